"""The live view of learning that ``/v1/status`` and the UI's learning panel show."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from openclaw_trl.config import OpenClawConfig
    from openclaw_trl.trainer.progress import TrainingProgress


LAST_HINTS = 20
"""How many of the most recent hints ``last_hints`` lists (oldest first; the same hint may come again)."""


@dataclass(frozen=True)
class LearningStatus:
    """Policy version, queue, failures and the per-update history of a run, read from any thread.

    Calling it returns the status dict. It reads what the trainer pushed to ``progress`` (never the
    trainer itself), the ``store``'s counts, the ``engine``'s policy version and the ``learning`` control's
    state, each safe to read while an update runs.

    ``history`` has one entry per logged update, the last 1000 (its step, mean reward, hint accept rate, mean OPD
    advantage and loss); ``last_metrics`` is the whole log entry of the last update. Without a trainer
    (``progress`` None: serving only) both are empty. ``best_of_n_groups`` counts the Best-of-N groups
    stored. ``learning_paused`` is the persisted pause (``POST /v1/learning``), ``samples_rolled_back``
    counts the samples of updates a rollback undid; ``trainer_state`` (with a ``LearningControl``) is
    ``waiting for samples``, ``paused``, ``updating``, ``rolling back`` or ``stopped``.
    """

    config: OpenClawConfig  # batch_size, method, best_of_n and adapter_history
    engine: object | None
    store: object
    progress: TrainingProgress | None = None
    learning: object | None = None  # a trainer.control.LearningControl

    def __call__(self) -> dict:
        config, store = self.config, self.store
        updates = self.progress.updates() if self.progress is not None else []
        return {
            "policy_version": getattr(self.engine, "policy_version", 0),
            "samples_waiting": store.queue.count_waiting(),
            "batch_size": config.batch_size,
            "method": config.method,
            "last_metrics": updates[-1] if updates else {},
            "history": [_history_entry(entry) for entry in updates],
            "last_hints": store.queries.recent_hints(LAST_HINTS),
            "turns_failed": store.queries.counts()["turns_failed"],
            "teacher_failed": store.judging.count_teacher_failed(),
            "samples_dropped_stale": store.queue.count_dropped_stale(),
            "samples_dropped_temperature": store.queue.count_dropped_temperature(),
            "samples_dropped_backlog": store.queue.count_dropped_backlog(),
            "guard": guard_status(config, store),
            "best_of_n": config.best_of_n,
            "best_of_n_groups": store.groups.count_groups(),
            "learning_paused": store.versions.learning_paused(),
            "adapter_history": config.adapter_history,
            "samples_rolled_back": store.versions.count_rolled_back(),
            "trainer_state": self.learning.trainer_state if self.learning is not None else None,
        }


def _history_entry(entry: dict) -> dict:
    return {
        "step": entry.get("step"),
        "reward_mean": entry.get("reward"),
        "hint_accept_rate": entry.get("opd/hint_accept_rate"),
        "opd_mean_advantage": entry.get("opd/mean_advantage"),
        "loss": entry.get("loss"),
    }


def guard_status(config, store) -> dict:
    """What the version guard did, in plain words: whether it is on, the versions it held back and the last
    one's reason (``last``: None when it never held one back), and the bounds its signals are held to
    (``limits``: ``kl``, ``implausible``, ``entropy_drop``, ``entropy_rise``)."""
    held = store.lineage.held_back()
    last = None
    if held:
        v = held[-1]
        why = v.note.partition(":")[2].strip() or "it failed the guard's check"
        last = f"v{v.version} was held back: {why}. The weights of v{v.parent} served in its place."
    out = {
        "enabled": bool(getattr(config, "guard", False)),
        "held_back": [v.version for v in held],
        "last": last,
    }
    if hasattr(config, "guard_max_kl"):  # the bounds the logged ``guard/...`` signals are held against
        out["limits"] = {
            "kl": config.guard_max_kl,
            "implausible": config.guard_max_implausible,
            "entropy_drop": config.guard_max_entropy_drop,
            "entropy_rise": config.guard_max_entropy_rise,
        }
    return out
