"""The learning panel in plain words: what the model learned from, which version serves, what changed.

* :func:`summary_markdown`: the version serving, the updates so far (and those a rollback undid), the
  answers trained on and the feedback they came from, what the next update waits for, the last update's
  reward and the hints learned;
* :func:`reward_frame` / :func:`hint_frame`: the per-update curves; an update a rollback undid is its own
  series ("undone by a rollback") and each rollback is a point of its own, at the reward of the update it
  went back to;
* :class:`WhatChanged` (the offline toy model): after each update, a few answers of the serving version to
  the person's recent prompts are sampled in the background (``learn`` priority: chat turns go first) and
  classified by the toy world's style patterns, once per version: "answers to *Tell me about apples.* are
  now bulleted in 8 of 10 samples (before learning: 3 of 10)", for the style the person's 👍/👎 and
  corrections teach (``taught_style``).

No Gradio here: ``openclaw_trl.serving.ui.blocks`` lays these out.
"""

from __future__ import annotations

import html
import logging
import threading
from collections import Counter
from dataclasses import dataclass

from openclaw_trl.compare import distinct_prompt_turns, prompt_text, replay
from openclaw_trl.engines.base import SamplingParams
from openclaw_trl.serving.ui.guide import STYLE_WORDS
from openclaw_trl.serving.ui.quality import HeldVersion, last_clean_version, quality_markdown
from openclaw_trl.toy import world

logger = logging.getLogger(__name__)

KEPT, UNDONE, ROLLBACK = "update", "undone by a rollback", "rollback (to an earlier version)"
SERIES = (KEPT, UNDONE, ROLLBACK)
"""The series of the reward chart, in the order of their colours."""
CHANGE_SAMPLES = 10
"""Answers sampled per prompt by "What changed" (per version, in the background)."""
CHANGE_PROMPTS = 2
"""Recent distinct prompts "What changed" samples."""
HINTS_SHOWN = 5
"""Distinct hints the panel lists."""
CHANGE_MAX_TOKENS = 64
"""Tokens per sampled answer (the toy's answers are two short lines)."""


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


@dataclass
class StyleCounts:
    """Sampled answers to one prompt, counted per toy style (``other``: none of them)."""

    prompt: str
    counts: Counter
    samples: int
    well_formed: int | None = None  # answers that are one of the toy world's own (None: no topic to check)


def topic_of(prompt: str) -> str | None:
    """The toy topic a prompt asks about ("Tell me about apples." -> "apples"), else None."""
    return next((t for t in world.TOPICS if prompt.strip() == world.opening(t)), None)


def well_formed_count(prompt: str, answers: list[str]) -> int | None:
    """How many ``answers`` to ``prompt`` state the topic's facts word for word in one of the toy's styles
    (None when the prompt asks about no toy topic)."""
    topic = topic_of(prompt)
    if topic is None:
        return None
    return sum(world.answer_fidelity(topic, a) for a in answers)


def style_of(answer: str) -> str:
    return next((s.name for s in world.STYLES if s.matches(answer)), "other")


def taught_style(store) -> str | None:
    """The style the person teaches, from their feedback: +1 for the style of an answer they 👍, -1 for one
    they 👎, +2 for the style a correction is written in or asks for (the toy world's request sentences: a
    correction says what is wanted, a 👍 only that one answer was good enough); the best-scoring style when
    its score is positive, else None."""
    score: Counter = Counter()
    for f in store.queries.iter_feedback():
        if f.kind in ("correction", "edit") and f.text:
            asked = [s.name for s in world.STYLES if s.request in f.text or s.matches(f.text)]
            score.update({name: 2 for name in asked[:1]})
        elif f.rating is not None and f.kind in (None, "rating", "reject"):
            turn = store.conversations.get_turn(f.turn_id)
            answer = (turn.response_message or {}).get("content") if turn is not None else None
            score[style_of(answer or "")] += 1 if f.rating > 0 else -1
    score.pop("other", None)
    best = score.most_common(1)
    return best[0][0] if best and best[0][1] > 0 else None


def _changed_style(now: StyleCounts, base: StyleCounts | None, taught: str | None = None) -> str:
    """The style to report: the one the person teaches (``taught``), else the one whose share grew most
    since before learning (``base``), else the most common now."""
    if taught is not None:
        return taught
    common = [style for style, _ in now.counts.most_common()]
    if base is None:
        return common[0]
    return max(common, key=lambda style: (now.counts[style] - base.counts[style], now.counts[style]))


def _quality_words(now: StyleCounts) -> str:
    """Beside the style: how many sampled answers are well-formed (the toy's own sentences, no repeats)."""
    if now.well_formed is None:
        return ""
    if now.well_formed == now.samples:
        return " ✅ All well-formed."
    return (
        f" ⚠️ Only {now.well_formed} of {now.samples} well-formed: the others repeat or garble their facts"
        " (roll back to the last clean version if this grows)."
    )


class WhatChanged:
    """The toy model's "What changed": styles of sampled answers per version (module docstring)."""

    def __init__(self, service, samples: int = CHANGE_SAMPLES, prompts: int = CHANGE_PROMPTS):
        self.service, self.samples, self.prompts = service, samples, prompts
        self._lock = threading.Lock()
        self._by_version: dict[int, list[StyleCounts]] = {}
        self._base: dict[str, StyleCounts] = {}  # prompt text -> the base model's styles (sampled once)
        self._running: int | None = None
        self._taught: str | None = None  # the style the person's feedback teaches (``taught_style``)

    def markdown(self, version: int) -> str:
        """The view for the serving ``version``; starts the background check when it has none yet."""
        if version <= 0:
            return "_After the first update, this says how the answers to your recent prompts changed._"
        with self._lock:
            result = self._by_version.get(version)
            if result is None and self._running is None:
                self._running = version
                threading.Thread(
                    target=self._check, args=(version,), daemon=True, name="what-changed"
                ).start()
            previous = max((v for v in self._by_version if v < version), default=None)
        if result is None:
            return f"_Sampling {self.samples} answers of v{version} to your recent prompts…_"
        if not result:
            return "_No prompts to check yet (private conversations are left out)._"
        before = self._by_version.get(previous, []) if previous is not None else []
        return "  \n".join(self._line(r, before, version, previous) for r in result)

    def _line(self, now: StyleCounts, before: list[StyleCounts], version: int, previous: int | None) -> str:
        return self._style_line(now, before, version, previous) + _quality_words(now)

    def _style_line(
        self, now: StyleCounts, before: list[StyleCounts], version: int, previous: int | None
    ) -> str:
        base = self._base.get(now.prompt)
        style = _changed_style(now, base, self._taught)
        count, words = now.counts[style], STYLE_WORDS.get(style, (style, ""))[0]
        prompt = f"answers to *{html.escape(now.prompt)}*"
        if base is not None and base.counts[style] == count:
            return (
                f"v{version}: {prompt} are {words} in {count} of {now.samples} samples, as before learning."
            )
        earlier = [f"v{previous}: {c.counts[style]}" for c in before if c.prompt == now.prompt]
        if base is not None:
            earlier.append(f"before learning: {base.counts[style]}")
        tail = f" ({', '.join(earlier)} of {now.samples})" if earlier else ""
        return f"v{version}: {prompt} are now {words} in {count} of {now.samples} samples{tail}."

    def _check(self, version: int) -> None:
        try:
            result = self._sample(version)
        except Exception:  # a background check must never disturb serving; the next update tries again
            logger.warning("what-changed check of v%d failed", version, exc_info=True)
            result = None
        with self._lock:
            self._running = None
            if result is not None:
                self._by_version[version] = result
                for old in sorted(self._by_version)[:-4]:  # the last few versions are enough
                    del self._by_version[old]

    def _sample(self, version: int) -> list[StyleCounts] | None:
        service = self.service
        turns = distinct_prompt_turns(service.store, self.prompts)
        self._taught = taught_style(service.store)
        sampling = SamplingParams(
            temperature=service.settings.train_temperature,
            max_new_tokens=min(service.settings.default_max_tokens, CHANGE_MAX_TOKENS),
            seed=0,  # the same dice for every version and the base model: differences come from the weights
        )
        batch = [t for t in turns for _ in range(self.samples)]
        answers = replay(service.engine, batch, "policy", sampling, priority="learn")
        if getattr(service.engine, "policy_version", version) != version:
            return None  # another update was published meanwhile: its own check follows
        missing = [t for t in turns if prompt_text(t) not in self._base]
        if missing:
            base_batch = [t for t in missing for _ in range(self.samples)]
            base = replay(service.engine, base_batch, "base", sampling, priority="learn")
            for i, t in enumerate(missing):
                self._base[prompt_text(t)] = self._counts(t, base[i * self.samples : (i + 1) * self.samples])
        return [
            self._counts(t, answers[i * self.samples : (i + 1) * self.samples]) for i, t in enumerate(turns)
        ]

    def _counts(self, turn, answers: list[str]) -> StyleCounts:
        prompt = prompt_text(turn)
        counts = Counter(style_of(a) for a in answers)
        return StyleCounts(prompt, counts, len(answers), well_formed_count(prompt, answers))
