"""vLLM tests: run by ``make test-vllm`` in ``.venv-vllm``; skipped (not errors) where vLLM is not importable."""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB of KV cache on CPU: plenty for the tiny model
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for `import engine_contract`
