"""Several processes: each rank trains on its slice of the batch, and the update equals the single-process one.

Two CPU processes (``torchrun --nproc_per_node 2``, accelerate on gloo) train one update on a fixed batch
written into a real SQLite store; one plain process trains the same update. Their adapters must agree.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.torch import load_file

ROOT = Path(__file__).parent.parent
SCRIPT = Path(__file__).parent / "_multiprocess_train.py"


def _train(out: Path, model_dir, processes: int) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    launcher = [sys.executable]
    if processes > 1:
        launcher += ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(processes)]
    cmd = [*launcher, str(SCRIPT), str(model_dir), str(out)]
    result = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]


@pytest.mark.slow
def test_two_processes_train_their_slices_like_one_process(tiny_model_dir, tmp_path):

    _train(tmp_path / "one", tiny_model_dir, processes=1)
    _train(tmp_path / "two", tiny_model_dir, processes=2)
    for loss_type in ("grpo", "dapo"):
        one = load_file(str(tmp_path / "one" / f"{loss_type}.safetensors"))
        two = load_file(str(tmp_path / "two" / f"{loss_type}.safetensors"))
        assert one.keys() == two.keys()
        worst = max((one[k] - two[k]).abs().max().item() for k in one)
        assert worst < 1e-5, f"{loss_type}: adapters differ by {worst}"
    # and the update is far above that tolerance (LoRA B starts at 0: its value is the update)
    update = max(v.abs().max().item() for k, v in one.items() if "lora_B" in k)
    assert update > 1e-3


def test_processes_launched_without_a_process_group_are_refused(tmp_path, monkeypatch):
    from openclaw_trl.config import OpenClawConfig

    # torchrun on CPU without use_cpu: every process would think it is alone and own the store and engine
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match="use_cpu: true"):
        OpenClawConfig(output_dir=str(tmp_path), report_to="none")
