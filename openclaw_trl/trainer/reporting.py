"""What training shows: one line per update for people, every logged metric in a file for tools.

* ``UpdateLines``: after each optimizer step, one log line that says what was learned from and what serves
  now, e.g. ``update 3 from 2 ratings (👍 1, 👎 1) · mean reward +0.00 · now serving v3``. It replaces
  transformers' console callbacks (``remove_console_callbacks``): their progress bar counts towards
  ``max_steps``, which for live learning is a billion (it runs until stopped), and they print the whole
  metrics dict at every logging step.
* ``MetricsFile``: every metrics dict the Trainer logs (the same dict the ``report_to`` trackers get), as one
  JSON object per line appended to ``<output_dir>/metrics.jsonl``, with the ``step`` it was logged at and
  the Unix ``time``. Appending means a restarted run continues the same file; non-finite numbers are
  written as ``null`` (strict JSON). The file is the whole record: the Trainer's own log history (in memory,
  and in every checkpoint's ``trainer_state.json``) keeps only the last ``LOG_HISTORY_KEPT`` entries, so that
  neither grows with every update of a server that runs for weeks.

Both act on the main process only.
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path

from transformers import TrainerCallback

from openclaw_trl.records import TrainingSample

logger = logging.getLogger(__name__)

METRICS_FILE = "metrics.jsonl"
"""The file, in ``output_dir``, that every logged metrics dict is appended to."""
LOG_HISTORY_KEPT = 1000
"""The newest logged metrics dicts the Trainer's log history keeps (``metrics.jsonl`` has them all)."""


@dataclass(frozen=True)
class BatchSummary:
    """Where the samples of one batch came from, and their mean judged reward.

    ``thumbs_up`` / ``thumbs_down``: 👍/👎 ratings without text; ``corrections``: feedback with a text that
    became a hint; ``replies``: turns judged from the user's next message; ``candidates``: Best-of-N
    candidates (quick-judged); ``other``: samples stored with no record of their signal.
    ``reward``: the mean reward of the samples that are not Best-of-N candidates (None when there are none,
    or when the method trains no reward).
    """

    thumbs_up: int = 0
    thumbs_down: int = 0
    corrections: int = 0
    replies: int = 0
    candidates: int = 0
    other: int = 0
    reward: float | None = None

    def describe(self) -> str:
        """``2 ratings (👍 1, 👎 1) and 1 correction``: what the update learned from, in words."""
        parts = []
        ratings = self.thumbs_up + self.thumbs_down
        if ratings:
            parts.append(f"{_count(ratings, 'rating')} (👍 {self.thumbs_up}, 👎 {self.thumbs_down})")
        for n, noun in (
            (self.corrections, "correction"),
            (self.replies, "judged reply"),
            (self.candidates, "Best-of-N candidate"),
            (self.other, "sample"),
        ):
            if n:
                parts.append(_count(n, noun))
        if len(parts) <= 1:
            return parts[0] if parts else "no samples"
        return ", ".join(parts[:-1]) + " and " + parts[-1]


def _count(n: int, noun: str) -> str:
    plural = noun[:-1] + "ies" if noun.endswith("y") and not noun.endswith("ey") else noun + "s"
    return f"{n} {noun if n == 1 else plural}"


def summarize_batch(samples: list[TrainingSample], with_reward: bool = True) -> BatchSummary:
    """Count each sample by its signal: the user's feedback (a rating, or a correction when it carries an
    accepted hint), a judged next message, or a Best-of-N candidate."""
    counts = dict.fromkeys(("thumbs_up", "thumbs_down", "corrections", "replies", "candidates", "other"), 0)
    rewards = []
    for sample in samples:
        counts[_signal(sample)] += 1
        if sample.group_id is None:
            rewards.append(sample.reward)
    reward = sum(rewards) / len(rewards) if rewards and with_reward else None
    return BatchSummary(**counts, reward=reward)


def _signal(sample: TrainingSample) -> str:
    if sample.group_id is not None:
        return "candidates"
    source = sample.meta.get("next_state_source")
    if source == "feedback":
        if sample.has_hint:
            return "corrections"
        return "thumbs_up" if sample.reward > 0 else "thumbs_down"
    return "replies" if source == "request" else "other"


def update_line(step: int, summary: BatchSummary | None, serving: bool, repeat: int = 1) -> str:
    """``update 3 from 2 ratings (👍 1, 👎 1) · mean reward +0.00 · now serving v3``; ``repeat`` > 1 for
    another optimizer step on the same batch (``num_iterations``)."""
    line = f"update {step}"
    if summary is not None:
        line += f" from {summary.describe()}" + (f" (pass {repeat})" if repeat > 1 else "")
        if summary.reward is not None and math.isfinite(summary.reward):
            line += f" · mean reward {summary.reward:+.2f}"
    return line + (f" · now serving v{step}" if serving else f" · version {step}")


class UpdateLines(TrainerCallback):
    """One log line per optimizer step (main process): ``update_line`` of the trainer's current batch."""

    def __init__(self, trainer):
        self.trainer = trainer
        self._last: BatchSummary | None = None
        self._repeat = 0

    def on_step_end(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return
        summary = getattr(self.trainer, "batch_summary", None)
        self._repeat = self._repeat + 1 if summary is self._last else 1
        self._last = summary
        line = update_line(state.global_step, summary, self.trainer.engine is not None, self._repeat)
        user = getattr(self.trainer, "user_name", None)  # a run with users: whose update it was
        logger.info("%s", f"{user}: {line}" if user else line)


class MetricsFile(TrainerCallback):
    """Appends every logged metrics dict to ``<output_dir>/metrics.jsonl`` (main process), and cuts the
    Trainer's log history to its last ``LOG_HISTORY_KEPT`` entries (every process)."""

    def __init__(self, output_dir: str | Path):
        self.path = Path(output_dir) / METRICS_FILE

    def on_log(self, args, state, control, logs=None, **kwargs):
        if len(state.log_history) > LOG_HISTORY_KEPT:
            del state.log_history[:-LOG_HISTORY_KEPT]
        if not state.is_world_process_zero or not logs:
            return
        entry = {"step": state.global_step, "time": time.time(), **{k: _finite(v) for k, v in logs.items()}}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(entry, default=str) + "\n")


def _finite(value):
    """Non-finite floats as None, so that every line is strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def remove_console_callbacks(trainer) -> None:
    """Drop transformers' progress bar and metrics printer (every kind of it): ``UpdateLines`` says what
    happened, ``MetricsFile`` and the ``report_to`` trackers keep the numbers."""
    from transformers import trainer as hf_trainer
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    kinds = {
        PrinterCallback,
        ProgressCallback,
        getattr(hf_trainer, "DEFAULT_PROGRESS_CALLBACK", ProgressCallback),
    }
    for kind in kinds:
        while any(isinstance(cb, kind) for cb in trainer.callback_handler.callbacks):
            trainer.remove_callback(kind)
