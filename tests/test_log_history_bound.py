"""A server that learns for weeks keeps a bounded log in memory: the Trainer's log history (and so each
checkpoint's ``trainer_state.json``) and the progress the status route reads hold the newest entries, while
``metrics.jsonl`` keeps every one."""

from __future__ import annotations

import json

from transformers import TrainerControl, TrainerState

from openclaw_trl.trainer.progress import KEPT_UPDATES, ProgressCallback, TrainingProgress
from openclaw_trl.trainer.reporting import LOG_HISTORY_KEPT, METRICS_FILE, MetricsFile


def test_the_log_history_keeps_the_newest_entries_and_the_file_keeps_all(tmp_path):
    state, control = TrainerState(), TrainerControl()
    progress = TrainingProgress()
    callbacks = [MetricsFile(tmp_path), ProgressCallback(progress)]
    n = LOG_HISTORY_KEPT + 25
    for step in range(1, n + 1):
        state.global_step = step
        logs = {"reward": 1.0, "loss": float(step)}
        state.log_history.append({**logs, "step": step})  # what the Trainer does before on_log
        for callback in callbacks:
            callback.on_log(None, state, control, logs=logs)

    assert len(state.log_history) == LOG_HISTORY_KEPT
    assert state.log_history[0]["step"] == n - LOG_HISTORY_KEPT + 1 and state.log_history[-1]["step"] == n
    lines = (tmp_path / METRICS_FILE).read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == list(range(1, n + 1))
    updates = progress.updates()
    assert len(updates) == KEPT_UPDATES and updates[-1]["step"] == n and progress.last()["loss"] == float(n)


def test_a_resumed_history_longer_than_the_bound_keeps_its_newest_updates():
    entries = [{"reward": 0.0, "step": s} for s in range(KEPT_UPDATES + 10)]
    progress = TrainingProgress(entries)
    assert [e["step"] for e in progress.updates()] == list(range(10, KEPT_UPDATES + 10))
