"""vLLM tests: run by ``make test-vllm`` in ``.venv-vllm``; skipped (not errors) where vLLM is not importable."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB of KV cache on CPU: plenty for the tiny model
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for `import engine_contract`
sys.path.insert(0, str(Path(__file__).resolve().parent))  # for `import _vllm_server`


@pytest.fixture(scope="session")
def vllm_server(tiny_model_dir, tmp_path_factory):
    """One real vLLM server of the tiny model for the whole session (``engine: vllm_server`` tests)."""
    from _vllm_server import VLLMServer

    server = VLLMServer.start(tiny_model_dir, tmp_path_factory.mktemp("vllm-server"))
    yield server
    server.stop()
