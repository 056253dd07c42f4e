"""The learning status (``/v1/status``, the UI's learning panel) reads what the trainer pushed to a
``TrainingProgress`` through its callback, never the trainer: readers on other threads see whole entries."""

from __future__ import annotations

import threading

import pytest
from transformers import TrainerControl, TrainerState

from openclaw_trl.config import OpenClawConfig
from openclaw_trl.status import LearningStatus
from openclaw_trl.store import Store
from openclaw_trl.trainer.progress import ProgressCallback, TrainingProgress


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "s.db") as store:
        yield store


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    return OpenClawConfig(output_dir=str(tmp_path_factory.mktemp("run")), report_to="none")


def _log(callback: ProgressCallback, state: TrainerState, logs: dict) -> None:
    """What ``Trainer.log`` does: append the entry to the log history, then call ``on_log``."""
    state.log_history.append({**logs, "step": state.global_step})
    callback.on_log(None, state, TrainerControl(), logs=logs)


def test_the_status_shows_what_the_trainer_logged(store, config):
    progress = TrainingProgress()
    callback, state = ProgressCallback(progress), TrainerState()
    status = LearningStatus(config, None, store, progress)
    assert status()["history"] == [] and status()["last_metrics"] == {}
    callback.on_train_begin(None, state, TrainerControl())
    state.global_step = 1
    _log(callback, state, {"reward": 0.5, "loss": 0.25, "opd/hint_accept_rate": 1.0})
    _log(callback, state, {"train_runtime": 3.0})  # the end-of-run summary is not an update
    got = status()
    assert got["last_metrics"] == state.log_history[0]
    assert got["history"] == [
        {"step": 1, "reward_mean": 0.5, "hint_accept_rate": 1.0, "opd_mean_advantage": None, "loss": 0.25}
    ]
    got["last_metrics"]["reward"] = 9.0  # a reader's copy: the progress keeps its own
    assert status()["last_metrics"]["reward"] == 0.5
    assert (got["batch_size"], got["method"], got["policy_version"]) == (config.batch_size, config.method, 0)


def test_a_resumed_run_starts_from_its_checkpoints_history(store, config):
    progress = TrainingProgress([{"reward": 9.0, "step": 9}])  # left from another run: replaced
    state = TrainerState(
        log_history=[{"reward": 1.0, "step": 1}, {"loss": 0.1, "step": 1}, {"reward": 0.0, "step": 2}]
    )
    ProgressCallback(progress).on_train_begin(None, state, TrainerControl())
    assert [h["step"] for h in LearningStatus(config, None, store, progress)()["history"]] == [1, 2]


def test_serving_only_has_no_history(store, config):
    assert LearningStatus(config, None, store)()["history"] == []


def test_readers_on_other_threads_see_whole_entries_while_the_trainer_logs(store, config):
    progress = TrainingProgress()
    callback, state = ProgressCallback(progress), TrainerState()
    updates = 300
    reads: list[list[int]] = []
    done = threading.Event()

    def read():
        while not done.is_set():
            reads.append([h["step"] for h in LearningStatus(config, None, store, progress)()["history"]])

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for step in range(1, updates + 1):
            state.global_step = step
            _log(callback, state, {"reward": float(step), "loss": 0.0})
    finally:
        done.set()
        reader.join(timeout=60)
    assert reads and all(steps == list(range(1, len(steps) + 1)) for steps in reads)
    assert [len(r) for r in reads] == sorted(len(r) for r in reads)  # never goes back
    assert [e["reward"] for e in progress.updates()] == [float(s) for s in range(1, updates + 1)]
