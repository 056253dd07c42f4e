"""Adapter versions on the trainer's side: the initial checkpoint, one history row per checkpoint, the rollback.

With ``adapter_history > 0`` every update is checkpointed (``checkpoint-<step>``: adapter, optimizer,
scheduler, RNG state, trainer state) and the initial adapter too, as ``checkpoint-0`` (``InitialCheckpoint``),
so that every listed version can be restored. ``record_version`` writes the store's row of the version a
checkpoint holds (its samples and the metrics logged at that update).

A rollback to version ``v`` while version ``s`` serves (``roll_back``), between two updates:

1. the weights, the optimizer and scheduler states and the RNG states are loaded from ``checkpoint-v`` with
   the Trainer's own loaders (in place: the optimizer keeps its parameters);
2. the global step becomes ``s + 1`` and the restored adapter is published as policy version ``s + 1``:
   policy versions never go back, so turns sampled by ``v + 1 .. s`` stay distinguishable from the new ones,
   staleness (``current - sampled``) stays >= 0 and the resume logic (step = version) is unchanged; the row
   of ``s + 1`` says ``restored_from: v``;
3. ``checkpoint-<s + 1>`` is written at once, so a restart continues from the rolled-back state;
4. the samples consumed by the undone updates ``v + 1 .. s`` are marked ``rolled_back`` (kept, exported, never
   trained on again: training on them again would redo what the rollback undid); samples still queued, even
   those sampled by an undone version, stay queued: they are feedback on real replies, and the trainer corrects
   for the policy that sampled them with its truncated importance weight, as for any stale sample.

The next update then starts from ``v``'s optimizer state (its step count and moments) and scheduler. The
rollback takes a step number of its own, so under ``max_steps`` it counts as one of them.
"""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path

from transformers import TrainerCallback

from openclaw_trl.resume import is_complete
from openclaw_trl.store import AdapterVersion
from openclaw_trl.trainer.callbacks import AdapterSnapshot
from openclaw_trl.trainer.control import RollbackResult

logger = logging.getLogger(__name__)


def checkpoint_dir(trainer, step: int) -> Path:
    return Path(trainer.args.output_dir) / f"checkpoint-{int(step)}"


class InitialCheckpoint(TrainerCallback):
    """Before the first update of a new run, checkpoint the initial adapter as version 0 (``adapter_history``)."""

    def __init__(self, trainer):
        self.trainer = trainer

    def on_train_begin(self, args, state, control, **kwargs):
        trainer = self.trainer
        if (
            args.adapter_history > 0
            and state.global_step == 0
            and not is_complete(checkpoint_dir(trainer, 0))
        ):
            trainer._save_checkpoint(trainer.model_wrapped, trial=None)


def record_version(trainer, restored_from: int | None = None) -> None:
    """The store's row of the version just checkpointed (main process, ``adapter_history > 0``)."""
    if trainer.store is None or not trainer.accelerator.is_main_process or trainer.args.adapter_history <= 0:
        return
    step = trainer.state.global_step
    updated = restored_from is None and step > 0  # an update's version, not the initial or a restored one
    trainer.store.record_adapter_version(
        AdapterVersion(
            version=step,
            created=time.time(),
            samples=trainer.store.count_consumed_at(step) if updated else 0,
            metrics=_update_metrics(trainer.state.log_history, step) if updated else {},
            restored_from=restored_from,
            checkpoint=str(checkpoint_dir(trainer, step)),
        )
    )


def _update_metrics(log_history: list[dict], step: int) -> dict:
    """The numbers logged at update ``step`` (NaN and infinities as None)."""
    entry = next((e for e in reversed(log_history) if e.get("step") == step and "reward" in e), {})
    out = {}
    for key, value in entry.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        out[key] = value if math.isfinite(value) else None
    return out


def restore_checkpoint(trainer, checkpoint: Path) -> None:
    """Weights, optimizer, scheduler and RNG states from ``checkpoint``, with the Trainer's own loaders."""
    trainer._load_from_checkpoint(str(checkpoint))
    trainer._load_optimizer_and_scheduler(str(checkpoint))
    trainer._load_rng_state(str(checkpoint))
    trainer._adapter_snapshot = AdapterSnapshot()


def roll_back(trainer, version: int) -> RollbackResult:
    """Restore ``version`` and publish it as the next policy version (module docstring); every process calls it.

    If loading fails half-way, the state of the current version is loaded back from its checkpoint and the
    error is raised: training goes on where it was.
    """
    before = trainer.state.global_step
    try:
        restore_checkpoint(trainer, checkpoint_dir(trainer, version))
    except Exception:
        restore_checkpoint(trainer, checkpoint_dir(trainer, before))
        raise
    trainer.state.global_step = before + 1
    trainer._globalstep_last_logged = before + 1  # the Trainer averages the next logged loss over 1 update
    trainer.publish()
    trainer._restored_from = version
    try:
        trainer._save_checkpoint(trainer.model_wrapped, trial=None)
    finally:
        trainer._restored_from = None
    marked, waiting = 0, 0
    if trainer.store is not None and trainer.accelerator.is_main_process:
        reason = f"version {version} restored as version {before + 1}"
        marked = trainer.store.mark_rolled_back(version, before, reason)
        waiting = trainer.store.count_waiting()
    logger.info(
        "rolled back to version %d: serving it as version %d, %d samples of the undone updates %d..%d marked",
        version,
        before + 1,
        marked,
        version + 1,
        before,
    )
    return RollbackResult(before + 1, version, marked, waiting)
