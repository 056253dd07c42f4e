#!/usr/bin/env bash
# The benchmark suite on one NVIDIA GPU, in bf16, in under 8 minutes: HF engine generate / score / publish,
# OpenClawTrainer vs GRPOTrainer update ratio and peak memory (Qwen3-0.6B shapes), one Combine update of a
# Qwen3-4B-shaped model with LoRA r = 16 beside the colocated HF engine (seconds, peak GiB: does it fit a
# 24 GB card?), serving p95 idle vs during updates, `benchmarks/learning/run.py --quick`, judge cost. All
# models are random-weight models built here (no downloads). The vLLM stages (in-process engine, and
# engine: vllm_server against a vLLM server the stage starts: publish vs merge, score, p95 during publishes) and
# the QLoRA stage run where vllm / bitsandbytes import and are skipped with one line each otherwise.
#
#   bash benchmarks/gpu_check.sh                       # on the GPU machine (uses python3, or $PYTHON)
#   bash benchmarks/gpu_check.sh --device cpu --tiny   # the CPU rehearsal: tiny model, float32
#   bash benchmarks/gpu_check.sh --device cpu --tiny --smoke   # ... every stage with --smoke: that it runs
#
# Packages the interpreter lacks (trl, datasets, fastapi, pydantic, uvicorn, ...) come from the wheelhouse
# that `make gpu-wheels` builds (.gpu-wheels/cp<python version>/, or $GPU_WHEELS): they are installed with
# `pip install --no-index --no-deps --target` into a folder put first on PYTHONPATH ($GPU_SITE), so the
# interpreter's own torch and transformers are never touched. Everything this writes goes to $OUT when
# that is set (else benchmarks/results/); models are cached in $OPENCLAW_BENCH_MODELS
# (/tmp/openclaw-bench-models). The last lines printed are the results table.
# Exit status: 0 when every stage that could run finished, 1 when one failed, 2 when the check cannot start;
# before any stage runs it imports every openclaw_trl module the stage scripts import (found in their source).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
PY="${PYTHON:-$(command -v python3 || command -v python || echo python3)}"
BUDGET_S="${GPU_CHECK_BUDGET_S:-480}"
DEVICE=cuda
TINY=()
SMOKE=()
while (( $# )); do
  case "$1" in
    --device) DEVICE="${2:?--device needs cuda or cpu}"; shift 2 ;;
    --tiny) TINY=(--tiny); shift ;;
    --smoke) SMOKE=(--smoke); shift ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
    *) echo "gpu_check: unknown argument '$1' (expected --device cuda|cpu, --tiny, --smoke)" >&2; exit 2 ;;
  esac
done
[[ "$DEVICE" == cuda || "$DEVICE" == cpu ]] || { echo "gpu_check: --device is cuda or cpu, not '$DEVICE'" >&2; exit 2; }

RESULTS="${OUT:-$ROOT/benchmarks/results}"
mkdir -p "$RESULTS"
exec > >(tee "$RESULTS/gpu_check.log") 2>&1  # the whole transcript comes back with $OUT
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false TRL_EXPERIMENTAL_SILENCE=1 GRADIO_ANALYTICS_ENABLED=False
export OPENCLAW_BENCH_MODELS="${OPENCLAW_BENCH_MODELS:-/tmp/openclaw-bench-models}"

fail() { echo "gpu_check: $*" >&2; exit 2; }
# run_all.py's stage lines, and the log tail it prints for a stage that failed, as they come
stage_lines() {
  local tail=0 line
  while IFS= read -r line; do
    case "$line" in
      "=== "*) tail=0; echo "$line" ;;
      "--- "*FAILED*) tail=1; echo "$line" ;;
      "--- "*) echo "$line" ;;
      "wrote "*) tail=0 ;;
      *) if (( tail )); then echo "$line"; fi ;;
    esac
  done
}
START=$(date +%s)

command -v "$PY" >/dev/null 2>&1 || fail "interpreter '$PY' not found (set PYTHON=...)"
if [[ "$DEVICE" == cuda ]]; then
  command -v nvidia-smi >/dev/null 2>&1 || fail "no nvidia-smi: this check needs an NVIDIA GPU (rehearse with --device cpu --tiny)"
  nvidia-smi -L >/dev/null 2>&1 || fail "nvidia-smi sees no GPU (driver not loaded or no device)"
else
  export CUDA_VISIBLE_DEVICES=""
fi

# --- the wheelhouse: what the interpreter lacks, installed beside it, never over it
PYTAG=$("$PY" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
WHEELS="${GPU_WHEELS:-$ROOT/.gpu-wheels/$PYTAG}"
SITE="${GPU_SITE:-/tmp/openclaw-gpu-site-$PYTAG}"
if compgen -G "$WHEELS/*.whl" >/dev/null; then
  rm -rf "$SITE"
  echo "gpu_check: installing $(ls "$WHEELS"/*.whl | wc -l) wheels from $WHEELS into $SITE"
  if "$PY" -m pip --version >/dev/null 2>&1; then
    "$PY" -m pip install --quiet --disable-pip-version-check --no-index --no-deps --no-compile \
      --target "$SITE" "$WHEELS"/*.whl || fail "installing the wheelhouse $WHEELS failed"
  else  # no pip in the image: a wheel is a zip of its files (plus metadata); unpacking it is enough here
    for whl in "$WHEELS"/*.whl; do "$PY" -m zipfile -e "$whl" "$SITE" || fail "unpacking $whl failed"; done
  fi
  export PYTHONPATH="$ROOT:$SITE${PYTHONPATH:+:$PYTHONPATH}"
else
  echo "gpu_check: no wheelhouse at $WHEELS ($PYTAG; build it with: make gpu-wheels): using the interpreter as it is"
  export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
fi

# --- what it runs with; the stages' imports, and that none of them pulls in gradio or vllm
DEVICE="$DEVICE" "$PY" - <<'EOF' || exit 2
import importlib.metadata as md
import importlib.util
import os
import sys

def fail(msg):
    print(f"gpu_check: {msg}", file=sys.stderr)
    sys.exit(2)

try:
    import torch
except ImportError:
    fail("torch is not installed in this interpreter")
if os.environ["DEVICE"] == "cuda" and not torch.cuda.is_available():
    fail(f"torch {torch.__version__} sees no CUDA device (a CPU build of torch?)")
# every openclaw_trl module (and name) a stage script imports, found in their source, so that a module
# renamed or removed fails here, before any stage runs; plus the serving entry point and TRL
import ast
import importlib
from pathlib import Path

wanted = {"openclaw_trl.commands.serve": [], "openclaw_trl.runtime": [], "openclaw_trl.trainer": [],
          "openclaw_trl.engines.hf": [], "trl": []}
for script in sorted(Path("benchmarks").rglob("*.py")):
    for node in ast.walk(ast.parse(script.read_text(), str(script))):
        if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").startswith("openclaw_trl"):
            wanted.setdefault(node.module, []).extend(a.name for a in node.names)
        elif isinstance(node, ast.Import):
            wanted.update({a.name: [] for a in node.names if a.name.startswith("openclaw_trl")})
for name, attributes in sorted(wanted.items()):
    try:
        module = importlib.import_module(name)
    except ImportError as err:
        fail(f"import {name}: {err} -- a missing package: add it to GPU_WHEELS_PKGS in the Makefile and run "
             "make gpu-wheels; a missing openclaw_trl module: fix the benchmark that imports it")
    missing = [a for a in attributes if not hasattr(module, a) and importlib.util.find_spec(f"{name}.{a}") is None]
    if missing:
        fail(f"{name} has no {', '.join(missing)} (imported by a benchmark script)")
print(f"gpu_check: the {len(wanted)} openclaw_trl / trl modules the stages import all import")
lazy = [m for m in ("gradio", "vllm") if m in sys.modules]
if lazy:
    fail(f"importing the stages' modules pulled in {lazy}: those imports must stay lazy")

def version(name):
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return "missing" if importlib.util.find_spec(name) is None else "?"

names = ("torch", "transformers", "accelerate", "peft", "trl", "datasets", "fastapi", "pydantic", "uvicorn",
         "safetensors", "tokenizers", "bitsandbytes", "vllm")
print(f"gpu_check: python {sys.version.split()[0]}; " + ", ".join(f"{n} {version(n)}" for n in names))
where = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "CPU"
print(f"gpu_check: device {where}" + (f", CUDA {torch.version.cuda}" if torch.cuda.is_available() else ""))
EOF

echo "gpu_check: building the random models (cached in $OPENCLAW_BENCH_MODELS)"
TINY_ONLY=${#TINY[@]} "$PY" - <<'EOF'
import os
import sys
sys.path.insert(0, "benchmarks")
from _trainer_setup import model_dir
for label in ("tiny",) if os.environ["TINY_ONLY"] != "0" else ("tiny", "qwen3-0.6b-shaped"):
    print(model_dir(label))
EOF

LEFT=$(( BUDGET_S - ($(date +%s) - START) ))
(( LEFT > 60 )) || fail "setting up took the whole budget (${BUDGET_S}s)"
# Live: the stage lines and the log tail of any stage that failed (the whole output is in run_all.log; the
# table follows at the end).
set +e
"$PY" benchmarks/run_all.py --gpu --device "$DEVICE" "${TINY[@]}" "${SMOKE[@]}" --budget-s "$LEFT" --results-dir "$RESULTS" 2>&1 \
  | tee "$RESULTS/run_all.log" \
  | stage_lines
STATUS=${PIPESTATUS[0]}
set -e
TABLE=$(ls -t "$RESULTS"/run_all_*.md 2>/dev/null | head -1)
[[ -n "$TABLE" ]] || { tail -40 "$RESULTS/run_all.log"; fail "run_all.py wrote no table (exit $STATUS)"; }
echo "gpu_check: $([[ $STATUS == 0 ]] && echo "every stage that could run finished" || echo "a stage FAILED (see its log)") in $(( $(date +%s) - START ))s; results, logs and this transcript in $RESULTS"
echo
cat "$TABLE"
exit $(( STATUS == 0 ? 0 : 1 ))
