"""The learning benchmark's score: a fixed evaluation set answered by the engine with the current policy.

:func:`evaluate` samples one answer per opening with fixed per-prompt seeds (the same random numbers at
every evaluation) and returns the fraction in the preferred style. :func:`evaluate_served` runs the same
openings through Best-of-N's serving selection: N seeded samples each, scored by the quick judge, the
first best one counted, which is what a user of a Best-of-N row is served.
"""

from __future__ import annotations

from dataclasses import dataclass

from openclaw_trl.toy import measure
from openclaw_trl.toy import world as toy_world


def eval_prompts(settings) -> list[list[dict]]:
    return [
        [{"role": "user", "content": toy_world.opening(topic)}]
        for topic in toy_world.TOPICS
        for _ in range(settings.eval_per_topic)
    ]


def evaluate(engine, settings) -> float:
    """Fraction of first answers in the preferred style (policy adapter, serving temperature, fixed seeds)."""
    return _sample(engine, settings, 0)[0]


def _sample(engine, settings, k: int) -> tuple[float, list[str]]:
    """The k-th sample of every evaluation opening (seeds ``eval_seed + i + k * 100003``): rate, texts."""
    prompts = eval_prompts(settings)
    out = measure.style_rates(
        engine,
        prompts,
        [settings.preferred] * len(prompts),
        settings.temperature,
        seed=settings.eval_seed + k * 100_003,
        max_tokens=settings.max_tokens,
    )
    completions = out["_samples"][1]
    texts = [engine.tokenizer.decode(c.token_ids, skip_special_tokens=True).strip() for c in completions]
    return out["rate"], texts


@dataclass
class Candidate:
    """What a quick judge reads of one candidate reply (the fields of Best-of-N's quick-judge input)."""

    messages: list[dict]
    response: str
    session_id: str


def evaluate_served(engine, settings, n: int, quick_judge, seed: int) -> float:
    """Fraction of preferred answers among the ones Best-of-``n`` would serve: ``n`` samples per opening,
    each scored by ``quick_judge``, the first highest-scored one picked (the run's ``seed`` names the
    evaluation sessions, so the proxy's noise differs between seeds as it does online)."""
    prompts = eval_prompts(settings)
    samples = [_sample(engine, settings, k)[1] for k in range(n)]
    preferred = toy_world.style(settings.preferred)
    hits = 0
    for i, prompt in enumerate(prompts):
        texts = [s[i] for s in samples]
        scores = [quick_judge(Candidate(prompt, t, f"eval-{seed}-{i}")) for t in texts]
        hits += preferred.matches(texts[scores.index(max(scores))])
    return hits / len(prompts)
