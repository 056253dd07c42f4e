"""Adapter versions on the trainer's side: the initial checkpoint, one history row per checkpoint, the rollback.

With ``adapter_history > 0`` every update is checkpointed (``checkpoint-<step>``: adapter, optimizer,
scheduler, RNG state, trainer state) and the initial adapter too, as ``checkpoint-0`` (``InitialCheckpoint``),
so that every listed version can be restored. ``record_version`` writes the store's row of the version a
checkpoint holds (its samples and the metrics logged at that update).

A rollback to version ``v`` while version ``s`` serves (``roll_back``), between two updates:

1. the weights, the optimizer and scheduler states and the RNG states are loaded from ``checkpoint-v`` with
   the Trainer's own loaders (in place: the optimizer keeps its parameters);
2. the global step becomes ``s + 1`` and the restored adapter is published as policy version ``s + 1``, its
   lineage parent ``v`` with 0 updates (:mod:`openclaw_trl.store.lineage`): a version number names one set of
   weights, so turns sampled by ``v + 1 .. s`` stay distinguishable from the new ones, and staleness is
   counted along the lineage (``v``'s samples are fresh again, those of ``v + 1 .. s`` are as stale as the
   updates that separate them from ``v``); the LR schedule is put at the new global step
   (:func:`follow_global_step`); the row of ``s + 1`` says ``restored_from: v``;
3. ``checkpoint-<s + 1>`` is written at once, so a restart continues from the rolled-back state;
4. the samples consumed by the undone updates (those on the path to ``s`` that ``v`` does not contain) are marked ``rolled_back`` (kept, exported, never
   trained on again: training on them again would redo what the rollback undid); samples still queued, even
   those sampled by an undone version, stay queued: they are feedback on real replies, and the trainer corrects
   for the policy that sampled them with its truncated importance weight, as for any stale sample.

The next update then starts from ``v``'s optimizer state (its step count and moments), with the LR of the
global step. The rollback takes a step number of its own, so under ``max_steps`` it counts as one of them.
With several processes the rollback is all or nothing: every process restores ``v``, or (one failed) every
process restores ``s`` again and the request fails with the error. A resumed run whose checkpoint is older
than the last version published does the same as a rollback to that checkpoint (:func:`publish_start`).
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
    trainer.store.versions.record_adapter_version(
        AdapterVersion(
            version=step,
            created=time.time(),
            samples=trainer.store.versions.count_consumed_at(step) if updated else 0,
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


def follow_global_step(trainer) -> None:
    """Put the LR schedule at the global step (``last_epoch = global_step``, learning rates recomputed).

    Restored weights and optimizer state keep their own step count (Adam's bias correction belongs to
    them), but the schedule is a function of the global step, which never goes back: restarting the warm-up
    or the decay at the restored version's step while the step count moves on would change the run's LR
    curve and how many steps are left under ``max_steps``.
    """
    scheduler = getattr(trainer, "lr_scheduler", None)
    if scheduler is None:
        return
    scheduler.last_epoch = trainer.state.global_step - 1
    scheduler.step()  # last_epoch = global step, the optimizer's learning rates set from the schedule


def republish(trainer, restored_from: int, step: int, note: str) -> None:
    """Publish the weights of version ``restored_from`` (loaded now) as version ``step`` (every process)."""
    trainer.state.global_step = step
    trainer._globalstep_last_logged = step  # the Trainer averages the next logged loss over 1 update
    follow_global_step(trainer)
    trainer.publish(parent=restored_from, updates=0, note=note)


def main_value(trainer, compute):
    """``compute()`` on the main process, the same value on every process."""
    holder = [compute() if trainer.accelerator.is_main_process else None]
    if trainer.accelerator.num_processes > 1:
        from accelerate.utils import broadcast_object_list

        broadcast_object_list(holder)
    return holder[0]


def everywhere(trainer, ok: bool) -> bool:
    """Whether ``ok`` holds on every process (each process passes its own)."""
    if trainer.accelerator.num_processes <= 1:
        return ok
    from accelerate.utils import gather_object

    return all(gather_object([bool(ok)]))


def publish_start(trainer) -> None:
    """Publish the weights training starts from (every process, at the start of ``train``).

    Their version is the global step of the checkpoint resumed (0 for a new run), unless the store shows
    later versions that were published and then lost (a crash before their checkpoint was written): the
    checkpoint's weights are then published under the next unused number, as a rollback would (global
    step and LR schedule move on, ``checkpoint-<new>`` written with ``adapter_history > 0``), so that no
    number ever names two sets of weights and the samples of the lost versions stay recognisably stale.
    """
    step = trainer.state.global_step
    last = main_value(
        trainer, lambda: trainer.store.lineage.last_published_version() if trainer.store else None
    )
    if last is None or last <= step:
        if step == 0:
            trainer.publish(parent=None, updates=0, note="initial")
        else:  # recorded already, unless the store predates the lineage: then it follows step - 1
            trainer.publish(parent=step - 1, updates=1, note="resume")
        return
    republish(trainer, step, last + 1, "resume")
    logger.warning(
        "versions %d..%d were published but no checkpoint kept them: the weights of version %d (the "
        "checkpoint resumed) now serve as version %d; samples of the lost versions are trained as stale",
        step + 1,
        last,
        step,
        last + 1,
    )
    if trainer.args.adapter_history > 0:
        trainer._restored_from = step
        try:
            trainer._save_checkpoint(trainer.model_wrapped, trial=None)
        finally:
            trainer._restored_from = None


def roll_back(trainer, version: int) -> RollbackResult:
    """Restore ``version`` and publish it as the next policy version (module docstring); every process calls it.

    All or nothing: if loading fails on any process, every process loads the state of the current version
    back from its checkpoint and the error is raised: training goes on where it was.
    """
    before = trainer.state.global_step
    error: Exception | None = None
    try:
        restore_checkpoint(trainer, checkpoint_dir(trainer, version))
    except Exception as err:  # noqa: BLE001 - raised below, once every process is back on ``before``
        error = err
    if not everywhere(trainer, error is None):
        restore_checkpoint(trainer, checkpoint_dir(trainer, before))
        raise error or RuntimeError(
            f"the rollback to version {version} failed on another process: every process is back on "
            f"version {before}"
        )
    republish(trainer, version, before + 1, "rollback")
    trainer._restored_from = version
    try:
        trainer._save_checkpoint(trainer.model_wrapped, trial=None)
    finally:
        trainer._restored_from = None
    marked, waiting = 0, 0
    if trainer.store is not None and trainer.accelerator.is_main_process:
        reason = f"version {version} restored as version {before + 1}"
        undone = trainer.store.lineage.lineage().undone(before, version)
        marked = trainer.store.versions.mark_rolled_back(undone, reason)
        waiting = trainer.store.queue.count_waiting()
    logger.info(
        "rollback to v%d · now serving its weights as v%d · %d samples of the undone updates kept out of "
        "training",
        version,
        before + 1,
        marked,
    )
    return RollbackResult(before + 1, version, marked, waiting)
