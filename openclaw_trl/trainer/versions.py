"""Adapter versions on the trainer's side: the initial checkpoint, one history row per checkpoint, the rollback.

With ``adapter_history > 0`` every update is checkpointed (``checkpoint-<step>``: adapter, optimizer,
scheduler, RNG state, trainer state) and the initial adapter too, as ``checkpoint-0`` (``InitialCheckpoint``),
so that every listed version can be restored. ``record_version`` writes the store's row of the version a
checkpoint holds (its samples and the metrics logged at that update).

A rollback to version ``v`` while version ``s`` serves (``TrainerVersions.rollback_to``), between two updates:

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
than the last version published does the same as a rollback to that checkpoint (``publish_start``).

A checkpoint is whole or absent: the Trainer writes it into a hidden staging folder, which is renamed to
``checkpoint-<step>`` once every file is in it, so a process killed (or a machine stopped) in the middle of the
write leaves the previous checkpoints as they were, and the restart resumes the last whole version.
A checkpoint or version record that meets a full disk is tried again until there is space
(:mod:`openclaw_trl.trainer.disk_full`): learning pauses meanwhile, serving goes on, and a checkpoint folder is
whole or absent.

``TrainerVersions`` holds these steps as the trainer's own methods (``OpenClawTrainer`` inherits them):
``publish``, ``publish_start``, ``rollback_to``, ``resume_from``, the checkpoints. They run on the training
loop's thread; the server's threads only queue requests (``trainer.control.LearningControl``).
"""

from __future__ import annotations

import json
import logging
import math
import shutil
import threading
import time
from pathlib import Path

from transformers import TrainerCallback

from openclaw_trl.fsutil import RUN_INFO_FILE, move_into_place
from openclaw_trl.resume import checkpoint_step, clear_staging, is_complete, latest_checkpoint, staging_dir
from openclaw_trl.store import AdapterVersion
from openclaw_trl.trainer.callbacks import AdapterSnapshot, run_info
from openclaw_trl.trainer.control import RollbackResult
from openclaw_trl.trainer.disk_full import write_when_space

logger = logging.getLogger(__name__)

RNG_STATE_LOCK = threading.Lock()
"""Held while a trainer loads a checkpoint's RNG state. The Trainer loads it under
``torch.serialization.safe_globals``, which sets torch's *process-wide* allow-list of unpickling globals and
restores it on exit: with two trainers in one process (a run with users, both resuming at once) one would restore
the list while the other is loading, and that load fails ("Unsupported global: numpy...": that user's training
ends and only the other one learns on). The allow-list is process-wide, so the lock is too."""


def checkpoint_dir(output_dir: str | Path, step: int) -> Path:
    return Path(output_dir) / f"checkpoint-{int(step)}"


class InitialCheckpoint(TrainerCallback):
    """Before the first update of a new run, checkpoint the initial adapter as version 0 (``adapter_history``)."""

    def __init__(self, trainer):
        self.trainer = trainer

    def on_train_begin(self, args, state, control, **kwargs):
        if (
            args.adapter_history > 0
            and state.global_step == 0
            and not is_complete(checkpoint_dir(args.output_dir, 0))
        ):
            self.trainer.checkpoint_version()


def record_version(store, state, output_dir: str | Path, restored_from: int | None = None) -> None:
    """The store's row of the version just checkpointed at ``state.global_step`` (main process, with
    ``adapter_history > 0``): its samples and metrics for an update's version, none for the initial one or a
    restored one (``restored_from``)."""
    step = state.global_step
    updated = restored_from is None and step > 0
    store.versions.record_adapter_version(
        AdapterVersion(
            version=step,
            created=time.time(),
            samples=store.versions.count_consumed_at(step) if updated else 0,
            metrics=_update_metrics(state.log_history, step) if updated else {},
            restored_from=restored_from,
            checkpoint=str(checkpoint_dir(output_dir, step)),
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


def follow_global_step(scheduler, global_step: int) -> None:
    """Put the LR schedule at the global step (``last_epoch = global_step``, learning rates recomputed).

    Restored weights and optimizer state keep their own step count (Adam's bias correction belongs to
    them), but the schedule is a function of the global step, which never goes back: restarting the warm-up
    or the decay at the restored version's step while the step count moves on would change the run's LR
    curve and how many steps are left under ``max_steps``.
    """
    if scheduler is None:
        return
    scheduler.last_epoch = global_step - 1
    scheduler.step()  # last_epoch = global step, the optimizer's learning rates set from the schedule


def main_value(accelerator, compute):
    """``compute()`` on the main process, the same value on every process."""
    holder = [compute() if accelerator.is_main_process else None]
    if accelerator.num_processes > 1:
        from accelerate.utils import broadcast_object_list

        broadcast_object_list(holder)
    return holder[0]


def everywhere(accelerator, ok: bool) -> bool:
    """Whether ``ok`` holds on every process (each process passes its own)."""
    if accelerator.num_processes <= 1:
        return ok
    from accelerate.utils import gather_object

    return all(gather_object([bool(ok)]))


class TrainerVersions:
    """The trainer's versions side: publish, checkpoint, roll back, resume (module docstring).

    A mixin of ``OpenClawTrainer`` (a transformers ``Trainer``): it uses the trainer's ``store``, ``engine``,
    ``learning``, ``log_metric`` and ``_adapter_snapshot``, and the Trainer's state, loaders and save.
    """

    def publish(self, parent: int | None = None, updates: int = 1, note: str = "update") -> None:
        """Record the current adapter as version = global step in the store's lineage (its weights came from
        ``parent`` by ``updates`` optimizer updates; an update's parent is the step before), then hand it to
        the serving engine (atomic swap there). Main process."""
        if not self.accelerator.is_main_process:
            return
        version = self.state.global_step
        if note == "update":
            parent = version - 1
        if self.store is not None:
            self.store.lineage.record_published(version, parent, updates, note)
        if self.engine is None:
            return
        state = self._adapter_snapshot(self.accelerator.unwrap_model(self.model))
        started = time.perf_counter()
        self.engine.publish_adapter(state, version=version)
        self.log_metric("publish_time", time.perf_counter() - started)

    def publish_start(self) -> None:
        """Publish the weights training starts from (every process, at the start of ``train``).

        Their version is the global step of the checkpoint resumed (0 for a new run), unless the store shows
        later versions that were published and then lost (a crash before their checkpoint was written): the
        checkpoint's weights are then published under the next unused number, as a rollback would (global
        step and LR schedule move on, ``checkpoint-<new>`` written with ``adapter_history > 0``), so that no
        number ever names two sets of weights and the samples of the lost versions stay recognisably stale.
        """
        step, store = self.state.global_step, self.store
        last = main_value(self.accelerator, lambda: store.lineage.last_published_version() if store else None)
        if last is None or last <= step:
            if step == 0:
                self.publish(parent=None, updates=0, note="initial")
            else:  # recorded already, unless the store predates the lineage: then it follows step - 1
                self.publish(parent=step - 1, updates=1, note="resume")
            return
        self.republish(restored_from=step, step=last + 1, note="resume")
        logger.warning(
            "versions %d..%d were published but no checkpoint kept them: the weights of version %d (the "
            "checkpoint resumed) now serve as version %d; samples of the lost versions are trained as stale",
            step + 1,
            last,
            step,
            last + 1,
        )
        if self.args.adapter_history > 0:
            self.checkpoint_version(restored_from=step)

    def rollback_to(self, version: int) -> RollbackResult:
        """Restore ``version`` and publish it as the next policy version (module docstring); every process
        calls it, between two updates.

        All or nothing: if loading fails on any process, every process loads the state of the current version
        back from its checkpoint and the error is raised: training goes on where it was.
        """
        before, output_dir = self.state.global_step, self.args.output_dir
        error: Exception | None = None
        try:
            self.restore_checkpoint(checkpoint_dir(output_dir, version))
        except Exception as err:  # noqa: BLE001 - raised below, once every process is back on ``before``
            error = err
        if not everywhere(self.accelerator, error is None):
            self.restore_checkpoint(checkpoint_dir(output_dir, before))
            raise error or RuntimeError(
                f"the rollback to version {version} failed on another process: every process is back on "
                f"version {before}"
            )
        self.republish(restored_from=version, step=before + 1, note="rollback")
        self.remember_good()  # the version guard compares the next update with these weights
        self.checkpoint_version(restored_from=version)
        marked, waiting = 0, 0
        if self.store is not None and self.accelerator.is_main_process:
            reason = f"version {version} restored as version {before + 1}"
            marked = self.store.versions.mark_rolled_back(
                self.store.lineage.lineage().undone(before, version), reason
            )
            waiting = self.store.queue.count_waiting()
        logger.info(
            "rollback to v%d · now serving its weights as v%d · %d samples of the undone updates kept out "
            "of training",
            version,
            before + 1,
            marked,
        )
        return RollbackResult(before + 1, version, marked, waiting)

    def restore_checkpoint(self, checkpoint: Path) -> None:
        """Weights, optimizer, scheduler and RNG states from ``checkpoint``, with the Trainer's own loaders."""
        self._load_from_checkpoint(str(checkpoint))
        self._load_optimizer_and_scheduler(str(checkpoint))
        self._load_rng_state(str(checkpoint))
        self._adapter_snapshot = AdapterSnapshot()

    def _load_rng_state(self, checkpoint):
        """The Trainer's RNG load (resume, rollback), one trainer of the process at a time (``RNG_STATE_LOCK``)."""
        with RNG_STATE_LOCK:
            super()._load_rng_state(checkpoint)

    def republish(self, restored_from: int, step: int, note: str) -> None:
        """Publish the weights of version ``restored_from`` (loaded now) as version ``step`` (every process):
        the global step and the LR schedule move to ``step`` (``follow_global_step``)."""
        self.state.global_step = step
        self._globalstep_last_logged = step  # the Trainer averages the next logged loss over 1 update
        follow_global_step(getattr(self, "lr_scheduler", None), step)
        self.publish(parent=restored_from, updates=0, note=note)

    def checkpoint_version(self, restored_from: int | None = None) -> None:
        """Write ``checkpoint-<global step>`` now and record its version (``restored_from``: the version whose
        weights it holds after a rollback or a resume; None otherwise). Every process."""
        self._write_checkpoint(self.model_wrapped, None)
        self._checkpoint_written(restored_from)

    def _save_checkpoint(self, model, trial):  # the Trainer's own checkpoints: an update's version
        self._write_checkpoint(model, trial)
        self._checkpoint_written(self.take_held_from())  # a held-back step holds the version kept

    def _write_checkpoint(self, model, trial) -> None:
        """The Trainer's save of ``checkpoint-<global step>``, whole or not at all (``_staged_save``); on a full
        disk it waits for space (``disk_full``)."""
        step = self.state.global_step
        write_when_space(
            lambda: self._staged_save(model, trial),
            f"checkpoint of update {step}",
            staging_dir(self.args.output_dir, step),
            on_wait=self._waiting_for_space,
        )

    _staging: Path | None = None  # while a checkpoint is written: the folder the Trainer writes it in

    def _get_output_dir(self, trial) -> str:
        """The Trainer's run folder, or, while a checkpoint is written, the staging folder it goes into."""
        if self._staging is not None:
            return str(self._staging)
        return super()._get_output_dir(trial)

    def _staged_save(self, model, trial) -> None:
        """The Trainer's save into ``staging_dir``, renamed to ``checkpoint-<step>`` once whole; then the
        Trainer's pruning of old checkpoints (``save_total_limit``) in the run folder. Every process."""
        from transformers.trainer_utils import rotate_checkpoints

        output_dir, step = self.args.output_dir, self.state.global_step
        staging = staging_dir(output_dir, step)
        if self.args.should_save:
            clear_staging(output_dir)  # what an interrupted write left
        self.accelerator.wait_for_everyone()
        self._staging = staging
        try:
            super()._save_checkpoint(model, trial)
        finally:
            self._staging = None
        self.accelerator.wait_for_everyone()
        if self.args.should_save:
            final = checkpoint_dir(output_dir, step)
            move_into_place(staging / final.name, final)
            shutil.rmtree(staging, ignore_errors=True)
            rotate_checkpoints(
                output_dir=output_dir,
                save_total_limit=self.args.save_total_limit,
                best_model_checkpoint=self.state.best_model_checkpoint,
                use_mtime=True,
            )
        self.accelerator.wait_for_everyone()

    def _waiting_for_space(self, waiting: bool) -> None:
        """``trainer_state`` while a write waits for disk space (main process, with a ``LearningControl``)."""
        if self.learning is not None and self.accelerator.is_main_process:
            self.learning.note_state("waiting for disk space" if waiting else "updating")

    def _checkpoint_written(self, restored_from: int | None) -> None:
        if self.accelerator.is_main_process:
            if self.store is not None and self.args.adapter_history > 0:
                step = self.state.global_step
                write_when_space(
                    lambda: record_version(self.store, self.state, self.args.output_dir, restored_from),
                    f"the version record of update {step}",
                    on_wait=self._waiting_for_space,
                )
            write_when_space(self.write_run_info, "the run's summary")

    def resume_from(self, checkpoint: str | bool | None, **train_kwargs):
        """Train from ``checkpoint`` (a ``checkpoint-<step>`` folder; True: the latest complete one in
        ``output_dir``; None: a new run at step 0). First the store is brought back to that step: samples
        consumed by later updates are queued again, as those step numbers are reused."""
        if checkpoint is True:
            checkpoint = latest_checkpoint(self.args.output_dir)
            if checkpoint is None:
                raise ValueError(f"no complete checkpoint in {self.args.output_dir} to resume from")
        step = checkpoint_step(checkpoint) if checkpoint else 0
        if self.accelerator.is_main_process and self.store is not None:
            requeued = self.store.queue.requeue_after(step)
            if requeued:
                logger.info(
                    "training from step %s: %s samples consumed after it are queued again", step, requeued
                )
        if self.learning is None:
            return super().train(resume_from_checkpoint=checkpoint, **train_kwargs)
        with self.learning.trainer_running():
            return super().train(resume_from_checkpoint=checkpoint, **train_kwargs)

    def train(self, resume_from_checkpoint=None, **kwargs):
        """The Trainer's ``train`` by way of ``resume_from`` (the store follows the checkpoint's step)."""
        return self.resume_from(resume_from_checkpoint, **kwargs)

    def save_checkpoint(self) -> str | None:
        """Save ``checkpoint-<global step>`` with the Trainer's own save (adapter, optimizer, scheduler, RNG and
        trainer state) unless it exists already; None before the first update. Every process calls it."""
        step = self.state.global_step
        path = checkpoint_dir(self.args.output_dir, step)
        if step == 0 or is_complete(path):
            return str(path) if step else None
        self._save_checkpoint(self.model_wrapped, trial=None)
        return str(path)

    def write_run_info(self, output_dir: str | None = None) -> Path:
        """``openclaw_run.json`` (``callbacks.run_info``): what ``openclaw-trl push`` puts in the model card."""
        output_dir = Path(output_dir or self.args.output_dir)
        output_dir.mkdir(parents=True, exist_ok=True)
        path = output_dir / RUN_INFO_FILE
        partial = path.with_name(f".{path.name}.partial")
        partial.write_text(json.dumps(run_info(self), indent=2, default=str))
        partial.replace(path)  # whole or the previous one, never a part
        return path
