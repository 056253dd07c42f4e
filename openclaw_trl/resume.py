"""Where a run starts: the latest checkpoint of its ``output_dir`` (continue by default), or step 0.

* A run on an ``output_dir`` that holds checkpoints continues from the latest complete one (a checkpoint is
  complete once ``trainer_state.json``, the Trainer's last write, is in it): adapter, optimizer, scheduler,
  RNG state, step and policy version (= step). ``resume_from_checkpoint`` names another checkpoint.
* The store is brought back to that step: samples consumed by later updates are queued again (those
  updates are not in the resumed weights). Versions published after the checkpoint and lost with the
  crash keep their numbers: the resumed weights are published under the next unused one
  (``publish_start`` in :mod:`openclaw_trl.trainer.versions`), so samples of the lost versions are stale,
  not mistaken for samples of the resumed weights.
* Checkpoints after the start step (incomplete ones, or a later branch when an older checkpoint is named)
  would be mixed up with the new ones of the same numbers: they are moved into
  ``<output_dir>/previous-<UTC time>/``.
* A checkpoint is written into a hidden staging folder (``staging_dir``) and renamed into place once whole, so
  a process killed while writing leaves no ``checkpoint-<step>`` folder at all, only the staging folder,
  which the next checkpoint write removes (``clear_staging``).
* ``fresh_start`` moves the whole old run there (every entry of ``output_dir`` and the store files) and
  starts at step 0. Nothing is deleted.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

TRAINER_STATE = "trainer_state.json"
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
_STORE_SUFFIXES = ("", "-wal", "-shm", "-journal")


@dataclass
class StartPoint:
    """Where this run starts, as decided on the main process (``start_point``)."""

    output_dir: str
    checkpoint: str | None  # the checkpoint folder resumed, None for step 0
    step: int  # global step = policy version served first
    optimizer: bool  # optimizer and scheduler states are in the checkpoint
    requeued: int  # samples consumed after ``step`` that are queued again
    moved_to: str | None = None  # where older data went (fresh start, or checkpoints after ``step``)
    last_published: int | None = None  # the last version published on the store (lost ones after ``step``)

    def describe(self) -> str:
        """The run's first log line."""
        if self.checkpoint is None:
            text = f"new run in {self.output_dir}"
            if self.requeued:
                text += f": {self.requeued} samples consumed by updates no checkpoint kept are queued again"
        else:
            restored = (
                "optimizer and scheduler restored"
                if self.optimizer
                else "no optimizer state in the checkpoint (a fresh optimizer and scheduler)"
            )
            text = (
                f"resuming run {self.output_dir} from {Path(self.checkpoint).name}: policy version {self.step}, "
                f"{restored}, {self.requeued} samples re-queued"
            )
        if self.last_published is not None and self.last_published > self.step:
            text += (
                f"; versions {self.step + 1}..{self.last_published} were published but never checkpointed: "
                f"these weights serve as version {self.last_published + 1}"
            )
        if self.moved_to:
            text += f" (older data moved to {self.moved_to})"
        return text


def checkpoints(output_dir: str | Path) -> list[tuple[int, Path]]:
    """``(step, folder)`` of every ``checkpoint-<step>`` folder of ``output_dir``, by step."""
    root = Path(output_dir)
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if p.is_dir() and (m := _CHECKPOINT.match(p.name))]
    return sorted(found)


def staging_dir(output_dir: str | Path, step: int) -> Path:
    """The hidden folder ``checkpoint-<step>`` is written in before it is renamed into ``output_dir``."""
    return Path(output_dir) / f".checkpoint-{int(step)}.partial"


def clear_staging(output_dir: str | Path) -> int:
    """Remove what checkpoint writes a kill interrupted left in ``output_dir`` (staging folders, and an older
    checkpoint renamed aside to be replaced); returns how many folders were removed."""
    root = Path(output_dir)
    if not root.is_dir():
        return 0
    left = [*root.glob(".checkpoint-*.partial"), *root.glob(".checkpoint-*.replaced")]
    for path in left:
        shutil.rmtree(path, ignore_errors=True)
    return len(left)


def is_complete(checkpoint: str | Path) -> bool:
    return (Path(checkpoint) / TRAINER_STATE).is_file()


RESTORE_FILES = (TRAINER_STATE, "optimizer.pt", "scheduler.pt")
"""What a checkpoint needs besides its weights for training to continue from it exactly (a rollback)."""


def is_restorable(checkpoint: str | Path) -> bool:
    """Complete, with optimizer and scheduler states and the weights (a PEFT adapter or a full model)."""
    path = Path(checkpoint)
    weights = ("adapter_model.safetensors", "adapter_model.bin", "model.safetensors", "pytorch_model.bin")
    has_weights = any((path / name).is_file() for name in weights) or any(path.glob("model*.safetensors"))
    return all((path / name).is_file() for name in RESTORE_FILES) and has_weights


def checkpoint_step(checkpoint: str | Path) -> int:
    """The global step a (complete) checkpoint was saved at."""
    return int(json.loads((Path(checkpoint) / TRAINER_STATE).read_text())["global_step"])


def latest_checkpoint(output_dir: str | Path) -> str | None:
    """The complete checkpoint with the highest step in ``output_dir``, or None."""
    complete = [p for _, p in checkpoints(output_dir) if is_complete(p)]
    return str(complete[-1]) if complete else None


def checkpoint_to_resume(config) -> str | None:
    """``resume_from_checkpoint`` when set (it must be a complete checkpoint), else the latest one."""
    explicit = config.resume_from_checkpoint
    if explicit:
        if not is_complete(explicit):
            raise ValueError(
                f"resume_from_checkpoint={explicit!r} is not a checkpoint folder (no {TRAINER_STATE} in it): "
                "name a checkpoint-<step> folder, or leave it unset to continue from the latest checkpoint "
                "of output_dir"
            )
        return str(explicit)
    if config.fresh_start:
        return None
    return latest_checkpoint(config.output_dir)


def previous_dir(output_dir: str | Path) -> Path:
    """A new ``<output_dir>/previous-<UTC time>`` folder name (suffixed when that one exists)."""
    base = Path(output_dir) / f"previous-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
    path, n = base, 1
    while path.exists():
        path, n = base.with_name(f"{base.name}-{n}"), n + 1
    return path


def move_previous_run(config) -> str | None:
    """``fresh_start``: move every entry of ``output_dir`` (but earlier ``previous-*`` folders) and the store
    files into a new ``previous-<UTC time>`` folder. Returns that folder, or None when there was nothing."""
    root = Path(config.output_dir)
    entries = [p for p in root.iterdir() if not p.name.startswith("previous-")] if root.is_dir() else []
    store = Path(config.store_path).resolve()
    stores = [Path(f"{store}{s}") for s in _STORE_SUFFIXES if Path(f"{store}{s}").exists()]
    stores = [p for p in stores if root.resolve() not in p.parents]  # the others move with output_dir
    if not entries and not stores:
        return None
    target = previous_dir(root)
    target.mkdir(parents=True)
    for path in entries + stores:
        shutil.move(str(path), str(target / path.name))
    return str(target)


def move_later_checkpoints(output_dir: str | Path, step: int) -> str | None:
    """Move the checkpoints after ``step`` (their numbers will be reused) into a ``previous-*`` folder."""
    later = [p for s, p in checkpoints(output_dir) if s > step]
    if not later:
        return None
    target = previous_dir(output_dir)
    target.mkdir(parents=True)
    for path in later:
        shutil.move(str(path), str(target / path.name))
    return str(target)


def start_point(config, store, moved_to: str | None = None) -> StartPoint:
    """Decide where the run starts and bring ``output_dir`` and the store to that step (main process).

    ``moved_to`` is where ``move_previous_run`` put the old run, if it ran.
    """
    checkpoint = checkpoint_to_resume(config)
    step = checkpoint_step(checkpoint) if checkpoint else 0
    later = move_later_checkpoints(config.output_dir, step)
    requeued = store.queue.requeue_after(step)
    optimizer = bool(checkpoint) and (Path(checkpoint) / "optimizer.pt").is_file()
    last = store.lineage.last_published_version()
    return StartPoint(str(config.output_dir), checkpoint, step, optimizer, requeued, moved_to or later, last)
