"""The live view of learning that ``/v1/status`` and the UI's learning panel show."""

from __future__ import annotations


def learning_status(config, engine, store, trainer=None, learning=None) -> dict:
    """Policy version, queue, failures and the per-update history of a run.

    ``history`` has one entry per logged update (its step, mean reward, hint accept rate, mean OPD
    advantage and loss); ``last_metrics`` is the whole log entry of the last update. Without a trainer
    (serving only) both are empty. ``best_of_n_groups`` counts the Best-of-N groups stored. ``learning_paused`` is the persisted pause (``POST /v1/learning``),
    ``samples_rolled_back`` counts the samples of updates a rollback undid; ``trainer_state`` (with a
    ``LearningControl``) is ``waiting for samples``, ``paused``, ``updating``, ``rolling back`` or ``stopped``.
    """
    log = trainer.state.log_history if trainer is not None else []
    updates = [entry for entry in log if "reward" in entry]
    return {
        "policy_version": getattr(engine, "policy_version", 0),
        "samples_waiting": store.queue.count_waiting(),
        "batch_size": config.batch_size,
        "method": config.method,
        "last_metrics": updates[-1] if updates else {},
        "history": [_history_entry(entry) for entry in updates],
        "last_hints": store.queries.recent_hints(5),
        "turns_failed": store.queries.counts()["turns_failed"],
        "teacher_failed": store.judging.count_teacher_failed(),
        "samples_dropped_stale": store.queue.count_dropped_stale(),
        "best_of_n": config.best_of_n,
        "best_of_n_groups": store.groups.count_groups(),
        "learning_paused": store.versions.learning_paused(),
        "adapter_history": config.adapter_history,
        "samples_rolled_back": store.versions.count_rolled_back(),
        "trainer_state": learning.trainer_state if learning is not None else None,
    }


def _history_entry(entry: dict) -> dict:
    return {
        "step": entry.get("step"),
        "reward_mean": entry.get("reward"),
        "hint_accept_rate": entry.get("opd/hint_accept_rate"),
        "opd_mean_advantage": entry.get("opd/mean_advantage"),
        "loss": entry.get("loss"),
    }
