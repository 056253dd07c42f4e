"""The learning panel in plain words: what the model learned from, which version serves, what changed.

* :func:`summary_markdown`: the version serving, the updates so far (and those a rollback undid), the
  answers trained on and the feedback they came from, what the next update waits for, the last update's
  reward and the hints learned;
* :func:`reward_frame` / :func:`hint_frame`: the per-update curves; an update a rollback undid is its own
  series ("undone by a rollback") and each rollback is a point of its own, at the reward of the update it
  went back to;
* the answers' quality beside it (``ui.quality``); "What changed" in the toy model's answers is
  ``ui.changed``.

No Gradio here: ``openclaw_trl.serving.ui.blocks`` lays these out.
"""

from __future__ import annotations

import html
from collections import Counter
from dataclasses import dataclass

from openclaw_trl.serving.ui.quality import HeldVersion, last_clean_version, quality_markdown

KEPT, UNDONE, ROLLBACK = "update", "undone by a rollback", "rollback (to an earlier version)"
SERIES = (KEPT, UNDONE, ROLLBACK)
"""The series of the reward chart, in the order of their colours."""
HINTS_SHOWN = 5
"""Distinct hints the panel lists."""


@dataclass
class FeedbackCounts:
    """The person's explicit signals so far, per kind (``Feedback.kind``)."""

    likes: int = 0
    dislikes: int = 0
    corrections: int = 0  # typed corrections and edited answers
    retries: int = 0

    @classmethod
    def of(cls, feedback) -> FeedbackCounts:
        out = cls()
        for f in feedback:
            if f.kind in ("correction", "edit"):
                out.corrections += 1
            elif f.kind == "reject":
                out.retries += 1
            elif f.rating is not None:
                out.likes += f.rating > 0
                out.dislikes += f.rating < 0
        return out

    def words(self) -> str:
        parts = [f"{self.likes} 👍", f"{self.dislikes} 👎", _plural(self.corrections, "correction")]
        if self.retries:
            parts.append(_plural(self.retries, "retry", "retries"))
        return ", ".join(parts)


def _plural(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else (many or one + 's')}"


def undone_steps(store, serving: int, steps: list[int]) -> set[int]:
    """The update steps (= the versions they published) that are not in the serving version's weights: a
    rollback undid them."""
    if not steps:
        return set()
    path = store.lineage.lineage().path(serving)
    return {s for s in steps if s not in path and s <= serving}


def summary_markdown(
    status: dict,
    feedback: FeedbackCounts,
    trained: int,
    undone: int,
    rollback: tuple[int, int] | None = None,
    held: list[HeldVersion] | None = None,
    clean: int | None = None,
) -> str:
    """The panel's summary in words: ``status`` (``LearningStatus``), the person's ``feedback``, the
    answers ``trained`` on, the updates a rollback ``undone``, the last ``rollback`` (version, restored),
    the versions the guard ``held`` back (oldest first; None: as the status names them) and the last
    ``clean`` version (``quality.last_clean_version``), with the answers' quality in plain words."""
    version = status.get("policy_version", 0)
    history = status.get("history") or []
    updates = len(history)
    if updates:
        kept = f", {undone} of them undone by a rollback" if undone else ""
        lines = [f"**Serving v{version}** after {_plural(updates, 'update')}{kept}."]
        lines.append(
            f"**Learned from** {_plural(trained, 'answer')}; your feedback so far: {feedback.words()}."
        )
    else:
        lines = [f"**Serving v{version}**: the model as it started, no update yet."]
        lines.append(f"**Your feedback so far:** {feedback.words()}.")
    if rollback is not None:
        lines.append(f"**Last rollback:** v{rollback[0]} serves v{rollback[1]}'s weights again.")
    lines.append(_next_update(status))
    window = status.get("correction_window") or {}
    if window.get("waiting"):
        left = window.get("seconds_left")
        until = f" (the first for another {left:.0f} s)" if isinstance(left, int | float) else ""
        lines.append(
            f"**Waiting for a correction:** {_plural(window['waiting'], 'rating')} 👎{until}; a correction "
            "replaces it, your next message or a new conversation lets it stand."
        )
    reward = history[-1].get("reward_mean") if history else None
    if isinstance(reward, int | float):
        lines.append(
            f"**Last update:** average reward {reward:+.2f} (+1: every answer liked, −1: every answer disliked)."
        )
    quality = quality_markdown(
        status.get("guard") or {}, status.get("last_metrics"), _held(status, held), clean
    )
    if quality:
        lines.append(quality)
    failed, teacherless = status.get("turns_failed"), status.get("teacher_failed")
    if failed or teacherless:
        lines.append(
            f"**Not learned from:** {_plural(failed or 0, 'answer')} the judge could not score, "
            f"{teacherless or 0} without a teacher."
        )
    return "  \n".join(lines)


def _held(status: dict, held: list[HeldVersion] | None) -> list[HeldVersion]:
    """``held``, else the versions the status's ``guard`` names (the last one with its reason)."""
    if held is not None:
        return held
    guard = status.get("guard") or {}
    versions = list(guard.get("held_back") or [])
    return [HeldVersion(v, None, guard.get("last") or "" if v == versions[-1] else "") for v in versions]


def _next_update(status: dict) -> str:
    waiting, batch = status.get("samples_waiting") or 0, status.get("batch_size")
    if status.get("learning_paused"):
        return f"**Learning is paused:** {_plural(waiting, 'answer')} wait for you to resume."
    if batch:
        return f"**Next update:** {min(waiting, batch)} of the {batch} answers it needs are ready."
    return f"**Next update:** {_plural(waiting, 'answer')} ready."


def hints_markdown(hints: list) -> str:
    """The hints learned, each once with how often it came (newest first): "Use a bulleted list. ×5"."""
    if not hints:
        return "_No hints learned yet: a correction, or a reply that says what was wrong, gives one._"
    counts = Counter(html.escape(str(h).strip())[:300] for h in hints)
    newest_first = list(dict.fromkeys(html.escape(str(h).strip())[:300] for h in reversed(hints)))
    return "\n".join(f"- {h} ×{counts[h]}" if counts[h] > 1 else f"- {h}" for h in newest_first[:HINTS_SHOWN])


def reward_frame(history: list[dict], undone: set[int], rollbacks: list[tuple[int, int]]):
    """Reward per update (``step``, ``reward``, ``series``): kept updates, those a rollback undid, and one
    point per rollback ``(version, restored_from)`` at the reward of the update it went back to.

    Every frame starts with one empty row (no step, no reward: not drawn) per series, in a fixed order:
    Gradio's chart fixes its colours to the series of the first data it draws, and would leave a series that
    appears later undrawn."""
    import pandas as pd

    rows = [{"step": None, "reward": None, "series": series} for series in SERIES]
    by_step = {}
    for i, h in enumerate(history):
        if h.get("reward_mean") is not None:
            step = h.get("step", i + 1)
            by_step[step] = h["reward_mean"]
            rows.append(
                {"step": step, "reward": h["reward_mean"], "series": UNDONE if step in undone else KEPT}
            )
    for version, restored in rollbacks:
        rows.append({"step": version, "reward": by_step.get(restored, 0.0), "series": ROLLBACK})
    frame = pd.DataFrame(rows, columns=["step", "reward", "series"])
    # logged metrics can arrive as strings: plotted as categories (an unordered axis) unless numeric
    numbers = frame[["step", "reward"]].apply(pd.to_numeric, errors="coerce").astype("float64")
    frame[["step", "reward"]] = numbers
    return frame


def has_points(frame) -> bool:
    """Whether a chart's frame has a point to draw (the empty rows of ``reward_frame`` are none)."""
    return bool(frame["step"].notna().any())


def hint_frame(history: list[dict]):
    """Accepted-hint rate per update, for the updates that had hints (empty: no chart)."""
    import pandas as pd

    rows = [
        {"step": h.get("step", i + 1), "hint_accept_rate": h.get("hint_accept_rate")}
        for i, h in enumerate(history)
        if h.get("hint_accept_rate") is not None
    ]
    frame = pd.DataFrame(rows, columns=["step", "hint_accept_rate"])
    frame = frame.apply(pd.to_numeric, errors="coerce").astype("float64")
    has_hints = bool((frame["hint_accept_rate"].fillna(0) > 0).any())
    return frame if has_hints else frame.iloc[0:0]


class PanelViews:
    """The panel's words and curves from a ``LearningStatus`` dict plus what the store knows (the person's
    feedback, the answers trained on, the lineage of versions); ``learning`` (a ``LearningControl`` or None)
    lists the rollbacks."""

    def __init__(self, store, learning=None):
        self.store, self.learning = store, learning
        self._feedback: tuple[int, FeedbackCounts] = (-1, FeedbackCounts())

    def __call__(self, status: dict):
        """(summary Markdown, hints Markdown, reward frame, hint frame)."""
        history = status.get("history") or []
        serving = int(status.get("policy_version") or 0)
        undone = undone_steps(self.store, serving, [h["step"] for h in history if h.get("step") is not None])
        held = set((status.get("guard") or {}).get("held_back") or [])  # the guard's, not the person's
        versions = self.learning.versions() if self.learning is not None else []
        rollbacks = [
            (v.version, v.restored_from)
            for v in versions
            if v.restored_from is not None and v.version not in held
        ]
        trained = self.store.queue.training_totals()["turns"]
        last = max(rollbacks, default=None)
        held_back = [HeldVersion.of(v) for v in self.store.lineage.held_back()]
        limits = (status.get("guard") or {}).get("limits")
        path = self.store.lineage.lineage().path(serving)
        clean = last_clean_version(versions, held | {h.version for h in held_back}, limits, path)
        summary = summary_markdown(
            status, self.feedback_counts(), trained, len(undone), last, held_back, clean
        )
        return (
            summary,
            hints_markdown(status.get("last_hints") or []),
            reward_frame(history, undone, rollbacks),
            hint_frame(history),
        )

    def feedback_counts(self) -> FeedbackCounts:
        """Counted again only when feedback was added (feedback rows are never deleted)."""
        rows = self.store.queries.counts()["feedback"]
        if rows != self._feedback[0]:
            self._feedback = (rows, FeedbackCounts.of(self.store.queries.iter_feedback()))
        return self._feedback[1]
