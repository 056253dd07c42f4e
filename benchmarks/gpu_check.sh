#!/usr/bin/env bash
# The benchmark suite on one NVIDIA GPU with the `vllm` extra installed (issue 9): HF and vLLM engines
# (generate / score / plain forward, adapter publish), OpenClawTrainer vs GRPOTrainer update ratio, publish vs
# TRL's merge-and-push, serving p95 idle vs during updates, judge cost and scorer throughput -- all on a
# Qwen3-0.6B-shaped model with random weights built here (no downloads). Prints the table; the JSON and
# Markdown land in benchmarks/results/. Sized to finish in under 8 minutes.
#
#   bash benchmarks/gpu_check.sh                  # uses `python` (or $PYTHON)
#   PYTHON=.venv/bin/python bash benchmarks/gpu_check.sh
#
# It stops at once, with a message, when there is no GPU, no CUDA build of torch, or no vllm.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python}"
BUDGET_S="${GPU_CHECK_BUDGET_S:-480}"
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false TRL_EXPERIMENTAL_SILENCE=1

fail() { echo "gpu_check: $*" >&2; exit 2; }

command -v nvidia-smi >/dev/null 2>&1 || fail "no nvidia-smi: this check needs a machine with an NVIDIA GPU"
nvidia-smi -L >/dev/null 2>&1 || fail "nvidia-smi sees no GPU (driver not loaded or no device)"
command -v "$PY" >/dev/null 2>&1 || fail "interpreter '$PY' not found (set PYTHON=...)"
"$PY" - <<'EOF' || exit 2
import importlib.util
import sys

def fail(msg):
    print(f"gpu_check: {msg}", file=sys.stderr)
    sys.exit(2)

try:
    import torch
except ImportError:
    fail("torch is not installed in this interpreter")
if not torch.cuda.is_available():
    fail(f"torch {torch.__version__} sees no CUDA device (a CPU build of torch?)")
for name, hint in (("vllm", "pip install -e '.[vllm]'"), ("trl", "pip install -e ."), ("openclaw_trl", "pip install -e .")):
    if importlib.util.find_spec(name) is None:
        fail(f"{name} is not installed: {hint}")
print(f"gpu_check: {torch.cuda.get_device_name(0)}, torch {torch.__version__}, vllm "
      f"{__import__('importlib.metadata').metadata.version('vllm')}")
EOF

START=$(date +%s)
echo "gpu_check: building the tiny and the Qwen3-0.6B-shaped random models (cached in ${OPENCLAW_BENCH_MODELS:-/tmp/openclaw-bench-models})"
"$PY" - <<'EOF'
import sys
sys.path.insert(0, "benchmarks")
from trainer_bench import model_dir
for label in ("tiny", "qwen3-0.6b-shaped"):
    print(model_dir(label))
EOF

LEFT=$(( BUDGET_S - ($(date +%s) - START) ))
(( LEFT > 60 )) || fail "building the models took the whole budget (${BUDGET_S}s)"
"$PY" benchmarks/run_all.py --gpu --budget-s "$LEFT"
echo "gpu_check: done in $(( $(date +%s) - START ))s"
