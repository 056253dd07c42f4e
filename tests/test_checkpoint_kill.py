"""A process killed in the middle of writing a checkpoint (the version just published): the run folder holds
whole checkpoints only, and the restart serves the last whole version.

The child (``tests/_checkpoint_kill_writer.py``) trains a tiny adapter, checkpointing every update, and stops
inside the write of update 2's checkpoint (after its adapter file, or halfway through its last file,
``trainer_state.json``); the test kills it there with SIGKILL, then resumes the run with a real HF engine.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from peft import LoraConfig
from transformers import TrainerCallback

from openclaw_trl.resume import is_restorable, latest_checkpoint
from openclaw_trl.store import Store
from tests.helpers import tiny_hf_engine
from tests.trainer_helpers import LORA, make_trainer

ROOT = Path(__file__).resolve().parents[1]


def _killed_while_writing(model_dir, work: Path, where: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen(
        [sys.executable, "-m", "tests._checkpoint_kill_writer", str(model_dir), str(work), where],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = child.stdout.readline()
        assert line.strip() == "stopped", child.stderr.read()[-3000:] if child.poll() is not None else line
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=60)


def _policy_logps(engine, prompt: list[int], completion: list[int]) -> torch.Tensor:
    scores = engine.score([prompt], [completion], weights="policy")
    return torch.tensor(scores.logprobs[0])


class ServedFirst(TrainerCallback):
    """The version the engine serves when training starts, and its log-probs of one completion."""

    def __init__(self, engine, prompt, completion):
        self.engine, self.prompt, self.completion = engine, prompt, completion
        self.version, self.logps = None, None

    def on_train_begin(self, args, state, control, **kwargs):
        self.version = self.engine.policy_version
        self.logps = _policy_logps(self.engine, self.prompt, self.completion)


@pytest.mark.slow
@pytest.mark.parametrize("where", ["optimizer", "trainer_state"])
def test_a_kill_during_a_checkpoint_write_leaves_whole_checkpoints_and_the_restart_serves_the_last(
    tiny_model_dir, tmp_path, where
):
    _killed_while_writing(tiny_model_dir, tmp_path, where)
    run = tmp_path / "run"
    folders = sorted(p.name for p in run.iterdir() if p.name.startswith("checkpoint-"))
    assert folders == ["checkpoint-0", "checkpoint-1"], folders  # update 2's checkpoint: absent, not partial
    assert all(is_restorable(run / name) for name in folders)
    assert latest_checkpoint(run) == str(run / "checkpoint-1")

    store = Store(tmp_path / "store.sqlite")
    assert store.lineage.last_published_version() == 2  # published, then lost with the process
    prompt, completion = list(range(10, 22)), [30, 31, 32]
    with tiny_hf_engine(tiny_model_dir, lora_config=LoraConfig(**LORA)) as engine:
        trainer = make_trainer(
            tiny_model_dir,
            tmp_path,
            store,
            max_steps=3,
            save_strategy="steps",
            save_steps=1,
            adapter_history=3,
        )
        trainer.engine = engine
        first = ServedFirst(engine, prompt, completion)
        trainer.add_callback(first)  # after the trainer's own: sees what the restart published
        trainer.train(resume_from_checkpoint=True)
        assert first.version == 3  # 2 was published and lost: checkpoint-1's weights serve under a new number
        version = store.lineage.published_version(3)
        assert (version.parent, version.updates, version.note) == (1, 0, "resume")
        engine.publish_adapter(str(run / "checkpoint-1"), version=100)
        torch.testing.assert_close(first.logps, _policy_logps(engine, prompt, completion), rtol=0, atol=0)
        assert is_restorable(run / "checkpoint-3")  # the renumbered version is checkpointed too
    assert not list(run.glob(".checkpoint-*"))  # the interrupted write's staging folder is gone
    store.close()
