"""The toy model's "What changed": after each update, a few answers of the serving version to the person's
recent prompts are sampled in the background (``learn`` priority: chat turns go first) and classified by the toy
world's style patterns, once per version: "answers to *Tell me about apples.* are now bulleted in 8 of 10
samples (before learning: 3 of 10)", for the style the person's 👍/👎 and corrections teach
(``taught_style``), and how many of them are still well-formed (the toy world's own sentences: an answer that
repeats or garbles its facts is not).

No Gradio here: ``openclaw_trl.serving.ui.blocks`` shows it in the learning panel.
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
from openclaw_trl.toy import world

logger = logging.getLogger(__name__)

CHANGE_SAMPLES = 10
"""Answers sampled per prompt by "What changed" (per version, in the background)."""
CHANGE_PROMPTS = 2
"""Recent distinct prompts "What changed" samples."""
WELL_FORMED_SHARE = 0.8
"""Below this share of well-formed sampled answers (and fewer than before learning), "What changed" warns."""
CHANGE_MAX_TOKENS = 64
"""Tokens per sampled answer (the toy's answers are two short lines)."""


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


def _quality_words(now: StyleCounts, base: StyleCounts | None) -> str:
    """Beside the style: how many sampled answers are well-formed (the toy's own sentences, no repeats), with
    the base model's count; a warning when under ``WELL_FORMED_SHARE`` of them are and fewer than before
    learning."""
    if now.well_formed is None:
        return ""
    before = base.well_formed if base is not None else None
    was = f" (before learning: {before})" if before is not None else ""
    counted = f"{now.well_formed} of {now.samples} well-formed{was}"
    if now.well_formed >= WELL_FORMED_SHARE * now.samples or (
        before is not None and now.well_formed >= before
    ):
        return f" ✅ {counted[0].upper()}{counted[1:]}."
    return (
        f" ⚠️ Only {counted}: the others repeat or garble their facts (roll back to the last clean version if "
        "this grows)."
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
        return self._style_line(now, before, version, previous) + _quality_words(
            now, self._base.get(now.prompt)
        )

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
