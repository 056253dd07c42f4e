"""Child process of the checkpoint-kill test: trains a tiny adapter, every update checkpointed and published,
and stops for good in the middle of writing update 2's checkpoint, where the parent kills it.

``python -m tests._checkpoint_kill_writer <model dir> <work dir> <where>``: ``where`` is ``optimizer`` (after
the adapter file is written, before the optimizer state) or ``trainer_state`` (half of the last file written).
Prints ``stopped`` once it is stuck there.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch
from transformers import TrainerState

from openclaw_trl.store import Store
from tests.trainer_helpers import make_trainer, sampled


def _stop() -> None:
    print("stopped", flush=True)
    while True:
        time.sleep(60)


def main(model_dir: str, work: str, where: str) -> None:
    work_dir = Path(work)
    store = Store(work_dir / "store.sqlite")
    for sample in sampled(model_dir, 12):
        store.queue.add_sample(sample)
    trainer = make_trainer(
        model_dir, work_dir, store, max_steps=3, save_strategy="steps", save_steps=1, adapter_history=3
    )
    real_save, real_state = torch.save, TrainerState.save_to_json

    def save(obj, f, *args, **kwargs):
        if where == "optimizer" and trainer.state.global_step == 2 and str(f).endswith("optimizer.pt"):
            _stop()
        return real_save(obj, f, *args, **kwargs)

    def save_state(state, path):
        if where == "trainer_state" and state.global_step == 2:
            real_state(state, path)
            text = Path(path).read_text()
            Path(path).write_text(text[: len(text) // 2])
            _stop()
        return real_state(state, path)

    torch.save = save
    TrainerState.save_to_json = save_state
    trainer.train()


if __name__ == "__main__":
    main(*sys.argv[1:4])
