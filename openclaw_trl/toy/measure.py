"""Measure what the toy model learnt in pre-training, through the serving engine (``HFEngine``) at the
serving temperature, on seeded samples:

* P(preferred style) for a bare request (the base rate learning starts from), and on the same answers
  P(brief) (``bare_brief``) and P(a well-formed answer about the asked topic) (``bare_fidelity``,
  :func:`openclaw_trl.toy.world.answer_fidelity`);
* P(preferred style) when the request carries the ``[user's hint / instruction]`` block (the teacher);
  P(brief) when the block holds the brief request (``hinted_brief``); P(preferred style and brief) when
  it holds both requests (``hinted_both``);
* P(requested style) after a "No, not like that. Please …" follow-up; P(brief) after the brief request
  (``follow_up_brief``); P(requested style and brief) after both (``follow_up_both``);
* P(the fixed off-topic answer) for off-topic messages held out of pre-training (greetings, questions,
  unknown topics, random words: :func:`openclaw_trl.toy.world.held_out_off_topic`);
* the teacher - student log-prob gap per bare answer (what OPD's advantage sees).
"""

from __future__ import annotations

import random
from pathlib import Path

from openclaw_trl.toy import world


def sample_answers(engine, prompts: list[list[dict]], temperature: float, seed: int, max_tokens: int = 40):
    """One seeded answer per prompt with the policy weights: the requests, completions and decoded texts."""
    from openclaw_trl.chat import render_prompt_ids
    from openclaw_trl.engines.base import GenerationRequest, SamplingParams

    requests = [
        GenerationRequest(
            render_prompt_ids(engine.tokenizer, p),
            SamplingParams(temperature=temperature, max_new_tokens=max_tokens, seed=seed + i),
            weights="policy",
        )
        for i, p in enumerate(prompts)
    ]
    completions = engine.generate(requests)
    texts = [engine.tokenizer.decode(c.token_ids, skip_special_tokens=True).strip() for c in completions]
    return requests, completions, texts


def style_rates(
    engine, prompts: list[list[dict]], wanted: list[str], temperature: float, seed: int, max_tokens: int = 40
) -> dict:
    """Sample one answer per prompt (seeded) with the policy weights; the fraction meeting the wanted
    preference (a :func:`~openclaw_trl.toy.world.preference` spec per prompt: a style, ``brief`` or both)
    and the distribution of styles seen (``off_topic``: the off-topic answer; ``none``: anything else)."""
    requests, completions, texts = sample_answers(engine, prompts, temperature, seed, max_tokens)
    by_name = {s.name: s for s in world.STYLES}
    hits = [world.preference(w).matches(t) for w, t in zip(wanted, texts)]
    seen = {name: sum(s.matches(t) for t in texts) / len(texts) for name, s in by_name.items()}
    seen["off_topic"] = sum(t == world.OFF_TOPIC_ANSWER for t in texts) / len(texts)
    seen["none"] = sum(
        t != world.OFF_TOPIC_ANSWER and not any(s.matches(t) for s in world.STYLES) for t in texts
    ) / len(texts)
    out = {"rate": sum(hits) / len(texts), "styles": seen, "examples": texts[:3]}
    out["_samples"] = (requests, completions, hits)  # for teacher_gap; dropped before saving
    out["_texts"] = texts  # for the rates measured on the same answers; dropped before saving
    return out


def rate_of(texts: list[str], hits: list[bool]) -> dict:
    """``{"rate": fraction of hits, "examples": the first three texts}``."""
    return {"rate": sum(hits) / len(texts), "examples": texts[:3]}


def follow_ups(topics: list[str], rng: random.Random, brief: bool, style: bool):
    """Follow-up prompts: a first answer missing every requested criterion (another style when a style is
    requested, 2-3 facts when brevity is), then "No, not like that. …"; returns the prompts and the
    specs."""
    prompts, specs = [], []
    for t in topics:
        want = rng.choice(world.STYLE_NAMES)
        first = rng.choice([s for s in world.STYLE_NAMES if s != want or not style])
        n_facts = rng.randint(2, world.MAX_FACTS) if brief else rng.randint(1, world.MAX_FACTS)
        spec = "+".join([want] * style + ["brief"] * brief)
        prompts.append(
            [
                {"role": "user", "content": world.opening(t)},
                {"role": "assistant", "content": world.render_answer(first, t, rng, n_facts)},
                {"role": "user", "content": world.change_request(spec)},
            ]
        )
        specs.append(spec)
    return prompts, specs


def off_topic_rate(engine, messages: list[str], temperature: float, seed: int, max_tokens: int = 40) -> dict:
    """The fraction of off-topic messages answered with exactly :data:`world.OFF_TOPIC_ANSWER` (within
    ``max_tokens``, the demo's answer length), and a few of the messages that were not."""
    prompts = [[{"role": "user", "content": m}] for m in messages]
    _, _, texts = sample_answers(engine, prompts, temperature, seed, max_tokens)
    misses = [{"message": m, "answer": t} for m, t in zip(messages, texts) if t != world.OFF_TOPIC_ANSWER]
    return {"rate": 1 - len(misses) / len(texts), "misses": misses[:5]}


def teacher_gap(engine, samples, hinted: list[list[dict]], temperature: float) -> dict:
    """What OPD's advantage sees: per sampled bare answer, sum over its tokens of
    ``lp_teacher - lp_student`` (teacher = the same weights on the hint-augmented prompt, scoring the
    sampled ids), averaged separately over answers in the preferred style and the others."""
    from openclaw_trl.chat import render_prompt_ids

    requests, completions, hits = samples
    teacher = engine.score(
        [render_prompt_ids(engine.tokenizer, h) for h in hinted],
        [c.token_ids for c in completions],
        weights="policy",
        temperature=temperature,
    ).logprobs
    gaps = [sum(t) - sum(c.logprobs) for t, c in zip(teacher, completions)]
    good = [g for g, h in zip(gaps, hits) if h]
    bad = [g for g, h in zip(gaps, hits) if not h]
    return {
        "preferred_style": sum(good) / len(good) if good else None,
        "other_styles": sum(bad) / len(bad) if bad else None,
    }


def measure(model_dir: Path, preferred: str = world.PREFERRED, n: int = 96, temperature: float = 1.0):
    """The probabilities and the gap of the module docstring, on ``n`` seeded samples each (``preferred``
    is a style name)."""
    from openclaw_trl.engines.hf import HFEngine
    from openclaw_trl.judge import append_hint

    rng = random.Random(1234)
    topics = [world.TOPICS[i % len(world.TOPICS)] for i in range(n)]
    bare = [[{"role": "user", "content": world.opening(t)}] for t in topics]
    hinted = [append_hint(p, world.style_request(preferred)) for p in bare]
    both = f"{preferred}+brief"
    hinted_brief = [append_hint(p, world.BRIEF.request) for p in bare]
    hinted_both = [append_hint(p, " ".join(world.preference(both).requests)) for p in bare]
    follow, wants = [], []
    for t in topics:
        first = rng.choice(world.STYLE_NAMES)
        want = rng.choice([s for s in world.STYLE_NAMES if s != first])
        follow.append(
            [
                {"role": "user", "content": world.opening(t)},
                {"role": "assistant", "content": world.render_answer(first, t, rng)},
                {"role": "user", "content": world.change_request(want)},
            ]
        )
        wants.append(want)
    follow_brief, wants_brief = follow_ups(topics, rng, brief=True, style=False)
    follow_both, wants_both = follow_ups(topics, rng, brief=True, style=True)
    engine = HFEngine(model_dir, max_batch_size=64)
    try:
        out = {
            "preferred": preferred,
            "temperature": temperature,
            "n": n,
            "bare": style_rates(engine, bare, [preferred] * n, temperature, seed=10_000),
            "hinted": style_rates(engine, hinted, [preferred] * n, temperature, seed=20_000),
            "follow_up": style_rates(engine, follow, wants, temperature, seed=30_000),
            "off_topic": off_topic_rate(engine, world.held_out_off_topic(n), temperature, seed=40_000),
            "hinted_brief": style_rates(engine, hinted_brief, ["brief"] * n, temperature, seed=50_000),
            "hinted_both": style_rates(engine, hinted_both, [both] * n, temperature, seed=60_000),
            "follow_up_brief": style_rates(engine, follow_brief, wants_brief, temperature, seed=70_000),
            "follow_up_both": style_rates(engine, follow_both, wants_both, temperature, seed=80_000),
        }
        out["teacher_gap"] = teacher_gap(engine, out["bare"]["_samples"], hinted, temperature)
    finally:
        engine.close()
    texts = out["bare"]["_texts"]
    out["bare_brief"] = rate_of(texts, [world.BRIEF.matches(t) for t in texts])
    out["bare_fidelity"] = rate_of(texts, [world.answer_fidelity(top, t) for top, t in zip(topics, texts)])
    for key in (
        "bare",
        "hinted",
        "follow_up",
        "hinted_brief",
        "hinted_both",
        "follow_up_brief",
        "follow_up_both",
    ):
        del out[key]["_samples"], out[key]["_texts"]
    return out
