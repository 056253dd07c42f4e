"""The GPU check's plan and its refusals (the whole check runs in `make test-gpu-rehearsal`: ~5 minutes)."""

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import run_all  # noqa: E402


def gpu_stages(tmp_path, **kw):
    args = argparse.Namespace(
        gpu=True, device="cuda", tiny=False, quick=False, full=False, no_vllm=False, smoke=False
    )
    for key, value in kw.items():
        setattr(args, key, value)
    return {name: (cmd, out, timeout) for name, cmd, out, timeout in run_all.plan(args, tmp_path)}


def test_rehearsal_plan_runs_every_stage_on_the_tiny_model(tmp_path):
    stages = gpu_stages(tmp_path, device="cpu", tiny=True)
    assert {"engine", "trainer", "combine_4b", "serving", "learning", "judge", "guard"} <= set(stages)
    for name, (cmd, _, timeout) in stages.items():
        if cmd is None:
            continue
        assert not any("-shaped" in part for part in cmd), name
        assert timeout > 0
    assert "--tiny" in stages["combine_4b"][0] and "--tiny" in stages["trainer"][0]
    cmd, why, _ = stages["qlora"]
    assert cmd is None and "CUDA" in why


def test_gpu_plan_skips_vllm_with_a_reason_where_it_is_missing(tmp_path):
    stages = gpu_stages(tmp_path)
    assert stages["combine_4b"][0] is not None and "--tiny" not in stages["combine_4b"][0]
    if importlib.util.find_spec("vllm") is None:
        cmd, why, _ = stages["engine_vllm"]
        assert cmd is None and "vllm" in why


def test_gpu_plan_has_a_vllm_server_stage(tmp_path):
    """engine: vllm_server is measured where vllm imports (the stage starts its own server), else skipped."""
    stages = gpu_stages(tmp_path, device="cpu", tiny=True)
    cmd, why, _ = stages["vllm_server"]
    if importlib.util.find_spec("vllm") is None:
        assert cmd is None and "vllm" in why
    else:
        assert cmd[1].endswith("server_bench.py") and cmd[cmd.index("--model-dir") + 1].endswith("tiny")


def test_tiny_and_device_need_the_gpu_suite():
    with pytest.raises(SystemExit) as exc:
        run_all.main(["--tiny"])
    assert exc.value.code == 2


def _gpu_check(tmp_path, *argv, path=None):
    env = {**os.environ, "OUT": str(tmp_path)}
    if path is not None:
        env["PATH"] = path
    return subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def test_gpu_check_refuses_an_unknown_device(tmp_path):
    proc = _gpu_check(tmp_path, "--device", "tpu")
    assert proc.returncode == 2 and "--device is cuda or cpu" in proc.stderr


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this machine has an NVIDIA GPU")
def test_gpu_check_without_a_gpu_says_how_to_rehearse(tmp_path):
    proc = _gpu_check(tmp_path)
    assert proc.returncode == 2
    log = (tmp_path / "gpu_check.log").read_text()
    assert "no nvidia-smi" in log and "--device cpu --tiny" in log


def test_agent_stage_runs_full_size_on_the_gpu_and_smoke_in_the_rehearsal(tmp_path):
    """agent_bench.py: the 40,000-character session on the GPU, the tiny model in the CPU rehearsal, --quick on
    the CPU suite."""
    gpu = gpu_stages(tmp_path)["agent"][0]
    assert gpu[1].endswith("agent_bench.py") and not {"--smoke", "--quick"} & set(gpu)
    assert "--smoke" in gpu_stages(tmp_path, device="cpu", tiny=True)["agent"][0]
    cpu = gpu_stages(tmp_path, gpu=False, quick=True)["agent"][0]
    assert "--quick" in cpu
