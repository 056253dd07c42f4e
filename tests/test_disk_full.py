"""A checkpoint written onto a full disk: learning pauses (one log line), the half-written folder is removed, and the
checkpoint is written once space is back, by itself; every checkpoint kept is whole and restorable."""

from __future__ import annotations

import errno
import logging
from pathlib import Path

import torch

from openclaw_trl.resume import is_restorable
from openclaw_trl.store import Store, StoreFull
from openclaw_trl.trainer import disk_full
from tests.trainer_helpers import make_trainer, sampled


def test_a_checkpoint_on_a_full_disk_waits_for_space_and_is_written_whole(
    tiny_model_dir, tmp_path, monkeypatch, caplog
):
    monkeypatch.setattr(disk_full, "RETRY_S", 0.05)
    real_save = torch.save
    failures = {"left": 3, "partial_seen": False}

    def save(
        obj, f, *args, **kwargs
    ):  # the optimizer's state is written after the adapter: a half-written folder
        if str(f).endswith("optimizer.pt") and failures["left"]:
            failures["left"] -= 1
            failures["partial_seen"] |= any(p.name.startswith("adapter") for p in Path(f).parent.iterdir())
            raise OSError(errno.ENOSPC, "No space left on device", str(f))
        return real_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", save)
    store = Store(tmp_path / "store.sqlite")
    for sample in sampled(tiny_model_dir, 8):
        store.queue.add_sample(sample)
    trainer = make_trainer(
        tiny_model_dir, tmp_path, store, max_steps=2, save_strategy="steps", save_steps=1, adapter_history=3
    )
    with caplog.at_level(logging.WARNING, logger="openclaw_trl.trainer.disk_full"):
        trainer.train()
    assert trainer.state.global_step == 2 and failures["left"] == 0 and failures["partial_seen"]
    run = tmp_path / "run"
    folders = sorted(p.name for p in run.iterdir() if p.name.startswith("checkpoint-"))
    assert folders == ["checkpoint-0", "checkpoint-1", "checkpoint-2"]
    assert all(is_restorable(run / name) for name in folders)
    lines = [r.getMessage() for r in caplog.records]
    assert sum("not written, the disk is full" in line for line in lines) >= 1
    assert any("space is back" in line and "learning goes on" in line for line in lines)
    assert sorted(v.version for v in store.versions.adapter_versions()) == [0, 1, 2]
    store.close()


def test_only_a_full_disk_is_waited_for(monkeypatch):
    monkeypatch.setattr(disk_full, "RETRY_S", 0.0)
    assert disk_full.is_disk_full(OSError(errno.ENOSPC, "No space left on device"))
    assert disk_full.is_disk_full(StoreFull("the disk under the store x is full"))
    assert disk_full.is_disk_full(RuntimeError("file write failed")) is False
    wrapped = RuntimeError("PytorchStreamWriter failed")
    wrapped.__cause__ = OSError(errno.ENOSPC, "No space left on device")
    assert disk_full.is_disk_full(wrapped)
    calls = []

    def write():
        calls.append(1)
        if len(calls) < 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        return "done"

    waits = []
    assert (
        disk_full.write_when_space(write, "a test write", on_wait=waits.append) == "done" and len(calls) == 3
    )
    assert waits == [True, False]  # one wait, however many tries
    try:
        disk_full.write_when_space(lambda: 1 / 0, "a broken write")
    except ZeroDivisionError:
        pass
    else:
        raise AssertionError("an error other than a full disk must be raised at once")
