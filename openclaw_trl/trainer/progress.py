"""What training has logged so far, for readers on other threads: ``TrainingProgress`` and the callback that fills it.

The trainer runs in its own loop; the status route and the UI's learning panel answer in server threads.
They never read the trainer's ``state``: the trainer pushes each logged metrics dict to a
``TrainingProgress`` through ``ProgressCallback.on_log`` (on the trainer's thread), and readers take a copy
under its lock.

An *update entry* is a logged dict with a ``reward`` key (the per-update metrics, as opposed to the
Trainer's end-of-run summary); the progress keeps the last ``KEPT_UPDATES`` of those (a server runs for weeks:
``metrics.jsonl`` in the output folder has them all), each with the ``step`` it was logged at, exactly as the
Trainer appends them to ``state.log_history``. A resumed run starts from the entries of the checkpoint it
continues from.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable

from transformers import TrainerCallback

KEPT_UPDATES = 1000
"""The newest update entries kept (the status route's ``history`` and the learning panel's curves)."""


def is_update_entry(entry: dict) -> bool:
    """Whether a logged metrics dict is the one of an update (it has a ``reward``)."""
    return "reward" in entry


class TrainingProgress:
    """The last ``KEPT_UPDATES`` update entries logged (thread-safe: one writer, the trainer; any number of
    readers)."""

    def __init__(self, entries: Iterable[dict] = ()):
        self._lock = threading.Lock()
        self._updates: deque[dict] = deque(maxlen=KEPT_UPDATES)
        self.restart(entries)

    def restart(self, entries: Iterable[dict]) -> None:
        """Start over from ``entries`` (a resumed run's log history); entries that are not updates are skipped."""
        updates = deque((dict(entry) for entry in entries if is_update_entry(entry)), maxlen=KEPT_UPDATES)
        with self._lock:
            self._updates = updates

    def add(self, entry: dict) -> None:
        """Record one logged dict (ignored unless it is an update entry)."""
        if is_update_entry(entry):
            entry = dict(entry)
            with self._lock:
                self._updates.append(entry)

    def updates(self) -> list[dict]:
        """Copies of the update entries, oldest first."""
        with self._lock:
            updates = list(self._updates)
        return [dict(entry) for entry in updates]

    def last(self) -> dict:
        """A copy of the last update entry (``{}`` before the first update)."""
        with self._lock:
            return dict(self._updates[-1]) if self._updates else {}


class ProgressCallback(TrainerCallback):
    """Pushes what the trainer logs to a ``TrainingProgress`` (``{**logs, "step": global_step}``, the entry
    the Trainer appends to its log history); at the start of training, the history it resumed."""

    def __init__(self, progress: TrainingProgress):
        self.progress = progress

    def on_train_begin(self, args, state, control, **kwargs):
        self.progress.restart(state.log_history)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs:
            self.progress.add({**logs, "step": state.global_step})
