"""The learning benchmark's evaluation: a fixed set of openings answered by the engine, scored three ways.

The evaluation set is "Tell me about <topic>." ``eval_per_topic`` times for every topic of the toy world,
answered with fixed per-prompt seeds (the same random numbers at every evaluation, which removes most
sampling noise from the *differences* between points) at the serving temperature. :func:`evaluate` reads,
at one point of a run:

* ``rate``: the fraction of answers that satisfy the user's hidden preference (``world.preference``), over
  every topic; ``rate_unseen`` the same over the topics the simulated user never asks while learning;
* ``fidelity``: the fraction of answers that are well-formed answers about the asked topic stating its
  facts (``world.answer_fidelity``): what must not change while the style is learnt; ``fidelity_unseen``
  over the held-out topics;
* ``distinct``: distinct answers / answers, per topic, averaged: a collapse figure (it falls when the
  answers collapse onto a few strings even if each is well-formed).

:func:`evaluate_served` runs the same openings through Best-of-N's serving selection (N seeded samples
each, scored by a quick judge, the first best one counted): what a user of a Best-of-N row is served.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from openclaw_trl.toy import world as toy_world

HELD_OUT_TOPICS = toy_world.TOPICS[-2:]
"""Topics the simulated user never asks while learning: the evaluation checks that what was learnt (and
what must not be forgotten) carries over to them."""
LEARNING_TOPICS = tuple(t for t in toy_world.TOPICS if t not in HELD_OUT_TOPICS)


@dataclass(frozen=True)
class EvalPoint:
    """One evaluation of the policy (module docstring)."""

    rate: float
    rate_unseen: float
    fidelity: float
    fidelity_unseen: float
    distinct: float


def eval_items(settings) -> list[tuple[str, list[dict]]]:
    """``(topic, prompt messages)`` of every evaluation opening, topic by topic (``settings.eval_topics`` when
    it has them, else every topic of the toy world)."""
    return [
        (topic, [{"role": "user", "content": toy_world.opening(topic)}])
        for topic in getattr(settings, "eval_topics", toy_world.TOPICS)
        for _ in range(settings.eval_per_topic)
    ]


def sample(engine, settings, k: int, weights: str = "policy") -> tuple[list, list[str]]:
    """The k-th sample of every evaluation opening (seeds ``eval_seed + i + k * 100003``) with ``weights``:
    the completions and their texts."""
    from openclaw_trl.chat import render_prompt_ids
    from openclaw_trl.engines.base import GenerationRequest, SamplingParams

    requests = [
        GenerationRequest(
            render_prompt_ids(engine.tokenizer, prompt),
            SamplingParams(
                temperature=settings.temperature,
                max_new_tokens=settings.max_tokens,
                seed=settings.eval_seed + i + k * 100_003,
            ),
            weights=weights,
        )
        for i, (_, prompt) in enumerate(eval_items(settings))
    ]
    completions = engine.generate(requests)
    texts = [engine.tokenizer.decode(c.token_ids, skip_special_tokens=True).strip() for c in completions]
    return completions, texts


def _fraction(flags: list[bool]) -> float:
    return sum(flags) / len(flags) if flags else 0.0


def evaluate(engine, settings, preference: str, weights: str = "policy") -> EvalPoint:
    """The evaluation of the current policy adapter (``weights``: ``policy``, or ``base`` for the base
    model) for a user who wants ``preference``."""
    return evaluate_many(engine, settings, (preference,), weights)[preference]


def evaluate_many(engine, settings, preferences, weights: str = "policy") -> dict[str, EvalPoint]:
    """:func:`evaluate` for several preferences at once, from one set of answers (the same texts scored
    against each preference: what one adapter does for users who want different things)."""
    topics = [topic for topic, _ in eval_items(settings)]
    _, texts = sample(engine, settings, 0, weights)
    return {p: score_texts(topics, texts, p) for p in preferences}


def score_texts(topics: list[str], texts: list[str], preference: str) -> EvalPoint:
    """The :class:`EvalPoint` of answers ``texts`` to the openings about ``topics`` (one topic per answer)."""
    wants = toy_world.preference(preference)
    unseen = [t in HELD_OUT_TOPICS for t in topics]
    hits = [wants.matches(text) for text in texts]
    faithful = [toy_world.answer_fidelity(topic, text) for topic, text in zip(topics, texts, strict=True)]
    per_topic = [
        len({x for t, x in zip(topics, texts, strict=True) if t == topic}) / topics.count(topic)
        for topic in toy_world.TOPICS
    ]
    return EvalPoint(
        rate=_fraction(hits),
        rate_unseen=_fraction([h for h, u in zip(hits, unseen, strict=True) if u]),
        fidelity=_fraction(faithful),
        fidelity_unseen=_fraction([f for f, u in zip(faithful, unseen, strict=True) if u]),
        distinct=sum(per_topic) / len(per_topic),
    )


ScoreCandidates = Callable[[list[dict], list, list[str], str], list]
"""``score(prompt messages, completions, texts, session id) -> one score per candidate (None: no opinion)``."""


def evaluate_served(
    engine, settings, n: int, score: ScoreCandidates, preference: str, tag: str = "eval", weights="policy"
) -> float:
    """Fraction of answers satisfying ``preference`` among the ones Best-of-``n`` would serve: ``n`` samples
    per opening (the first is :func:`evaluate`'s), scored by ``score``, the first highest-scored one picked
    (candidate 0 when none has a score), as ``judging.best_of_n.served_index`` does. ``tag`` names the
    evaluation's sessions (``<tag>-<i>``); ``weights``: ``policy`` or ``base``."""
    from openclaw_trl.judging.best_of_n import served_index

    wants = toy_world.preference(preference)
    samples = [sample(engine, settings, k, weights) for k in range(n)]
    hits = 0
    for i, (_, prompt) in enumerate(eval_items(settings)):
        completions = [s[0][i] for s in samples]
        texts = [s[1][i] for s in samples]
        scores = score(prompt, completions, texts, f"{tag}-{i}")
        hits += wants.matches(texts[served_index(scores)])
    return hits / len(eval_items(settings))


def proxy_scorer(proxy) -> ScoreCandidates:
    """A per-candidate callable quick judge (``fn(turn) -> float``) as a :data:`ScoreCandidates`."""
    from openclaw_trl.judging import QuickJudgeInput

    def score(prompt, completions, texts, session):
        return [proxy(QuickJudgeInput(prompt, t, session)) for t in texts]

    return score


def quick_judge_scorer(quick_judge, temperature: float) -> ScoreCandidates:
    """A ``judging.QuickJudge`` (any backend) as a :data:`ScoreCandidates`: the candidates as sampled."""
    from openclaw_trl.judging import QuickJudgeInput

    def score(prompt, completions, texts, session):
        items = [
            QuickJudgeInput(prompt, t, session, tuple(c.token_ids), tuple(c.logprobs or ()), temperature)
            for c, t in zip(completions, texts, strict=True)
        ]
        return quick_judge.scores(items)

    return score
