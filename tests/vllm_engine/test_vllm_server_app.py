"""The acceptance run of ``engine: vllm_server``: ``python app.py --config recipes/tiny_vllm_server.yaml
--max_steps 2`` against a real vLLM server of the tiny model finishes, and its served turns carry policy
versions 0, 1 and 2 (the base weights, then each published adapter); the same with two training processes
(``torchrun --nproc_per_node 2``).

The app runs in its own interpreter: openclaw-trl's training dependencies (TRL, Gradio) live in the main venv,
vLLM in ``.venv-vllm``. ``make test-vllm`` names the main venv's python in ``OPENCLAW_TRL_APP_PYTHON``; without
it this interpreter is used when it can import TRL, else the test is skipped with that reason.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from _vllm_server import HAVE_VLLM

pytestmark = [pytest.mark.vllm, pytest.mark.skipif(not HAVE_VLLM, reason="vllm is not importable here")]

ROOT = Path(__file__).resolve().parents[2]


def _app_python() -> str:
    named = os.environ.get("OPENCLAW_TRL_APP_PYTHON")
    if named:
        return named
    try:
        import trl  # noqa: F401
    except ImportError:
        pytest.skip(
            "the app needs TRL: set OPENCLAW_TRL_APP_PYTHON to the main venv's python (make test-vllm does)"
        )
    return sys.executable


def _run_app(vllm_server, tiny_model_dir, out: Path, launcher: list[str], *extra: str) -> set[int]:
    """Run the recipe for two updates; the policy versions of its served turns.

    The run checks that it says ``now serving v2``: the update line of a step is logged after that step's
    adapter was published to the server. A turn served *by* v2 is not required: the simulated user stops when
    training ends, which may come before its next request after the last publish."""
    argv = [
        *launcher,
        str(ROOT / "app.py"),
        "--config",
        str(ROOT / "recipes" / "tiny_vllm_server.yaml"),
        "--max_steps",
        "2",
        "--model_name_or_path",
        str(tiny_model_dir),  # the weights the server serves (the recipe's openclaw-trl/tiny builds the same)
        "--vllm_server_urls",
        vllm_server.url,
        "--output_dir",
        str(out),
        "--adapter_history",  # the server engine under test, not the history: checkpoints at step 2 only
        "0",
        "--save_steps",
        "2",
        *extra,
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    result = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    assert result.returncode == 0, result.stderr[-4000:]
    assert (out / "checkpoint-2").is_dir()
    assert "now serving v2" in result.stderr, result.stderr[-4000:]
    with sqlite3.connect(out / "openclaw.sqlite") as db:
        return {v for (v,) in db.execute("SELECT DISTINCT policy_version FROM turns")}


def test_app_trains_two_steps_against_the_server(vllm_server, tiny_model_dir, tmp_path):
    versions = _run_app(vllm_server, tiny_model_dir, tmp_path / "run", [_app_python()])
    assert {0, 1} <= versions, versions


def test_two_training_processes_against_the_server(vllm_server, tiny_model_dir, tmp_path):
    """``torchrun --nproc_per_node 2`` (gloo on CPU): the main process owns the store and talks to the server,
    both processes train; the run finishes and serves versions 0 and 1 and publishes v2 as with one process."""
    launcher = [_app_python(), "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    versions = _run_app(vllm_server, tiny_model_dir, tmp_path / "run", launcher, "--use_cpu", "true")
    assert {0, 1} <= versions, versions
