"""The learning benchmark's two noisy judges: the rule judge under judge noise
(``simulation.NoisyRuleJudge``: flipped verdict, garbled hint, seeded per turn) and the Best-of-N quick judge
that is a 0.7-accurate proxy of the toy user's hidden preference (``toy.proxy``)."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

from openclaw_trl.judging import JudgeInput, Verdict, load_callable
from openclaw_trl.simulation import THANKS, NoisyRuleJudge, rule_judge
from openclaw_trl.toy import world
from openclaw_trl.toy.proxy import ACCURACY, StyleProxy, quick_judge

CHANGE = world.change_request("bullets")
HINT = world.style_request("bullets")
DECOYS = tuple(s.request for s in world.STYLES)


def _turn(turn_id: int, text: str) -> JudgeInput:
    return JudgeInput(turn_id, 1, [], None, "Hey, apples!", {"role": "user", "content": text}, "request")


def test_without_noise_it_is_the_rule_judge():
    judge = NoisyRuleJudge(noise=0.0, seed=5, decoys=DECOYS)
    for i, text in enumerate((THANKS, CHANGE, "what about books?")):
        got, want = judge(_turn(i, text)), rule_judge(_turn(i, text))
        assert isinstance(got, Verdict) and (got.reward, got.hint) == (want.reward, want.hint)
    assert (want.reward, want.hint) == (0, None)


def test_noise_is_respected_on_many_turns_and_seeded_per_turn():
    judge = NoisyRuleJudge(noise=0.2, seed=3, decoys=DECOYS)
    verdicts = [judge.verdict(i, CHANGE) for i in range(5000)]
    corrupted = [v for v in verdicts if v[2]]
    assert abs(len(corrupted) / 5000 - 0.2) < 0.025
    assert verdicts == [NoisyRuleJudge(0.2, 3, DECOYS).verdict(i, CHANGE) for i in range(5000)]
    other_seed = [NoisyRuleJudge(0.2, 4, DECOYS).verdict(i, CHANGE)[2] for i in range(5000)]
    assert other_seed != [v[2] for v in verdicts]
    assert all(v == (-1, HINT, False) for v in verdicts if not v[2])
    # a change request misread: a +1 whose hint asks for another style (every other style turns up)
    assert all(r == 1 and h in DECOYS and h != HINT for r, h, _ in corrupted)
    assert {h for _, h, _ in corrupted} == set(DECOYS) - {HINT}


def test_a_flipped_thanks_is_a_minus_one_without_hint():
    judge = NoisyRuleJudge(noise=1.0, seed=0, decoys=DECOYS)
    assert judge.verdict(7, THANKS) == (-1, None, True)
    verdict = judge(_turn(7, THANKS))
    assert (verdict.reward, verdict.hint) == (-1, None) and "corrupted" in verdict.raw
    assert judge.verdict(8, "what about books?") == (0, None, True)  # no signal stays no signal


def test_without_decoys_the_hint_is_shuffled():
    judge = NoisyRuleJudge(noise=1.0, seed=1)
    for turn_id in range(50):
        reward, hint, corrupted = judge.verdict(turn_id, CHANGE)
        assert corrupted and reward == 1
        assert hint != HINT and sorted(hint.split()) == sorted(HINT.split())
    assert judge.garble("Please", random.Random(0)) == "Please"  # nothing to shuffle


@pytest.mark.parametrize("noise", [-0.1, 1.5])
def test_noise_outside_zero_one_is_refused(noise):
    with pytest.raises(ValueError, match=r"probability in \[0, 1\]"):
        NoisyRuleJudge(noise=noise)


@dataclass
class _Candidate:
    messages: list
    response: str
    session_id: object


def test_proxy_is_right_seventy_percent_of_the_time_and_seeded_by_the_candidate():
    rng = random.Random(0)
    prompt = [{"role": "user", "content": world.opening("apples")}]
    hits = {True: [], False: []}
    for i in range(4000):
        style = rng.choice(world.STYLE_NAMES)
        candidate = _Candidate(prompt, world.render_answer(style, "apples", rng), f"s{i}")
        score = quick_judge(candidate)
        assert score in (0.0, 1.0) and quick_judge(candidate) == score
        preferred = style == world.PREFERRED
        hits[preferred].append(score == (1.0 if preferred else 0.0))
    for right in hits.values():
        assert abs(sum(right) / len(right) - ACCURACY) < 0.04
    assert load_callable("openclaw_trl.toy.proxy:quick_judge") is quick_judge


def test_proxy_settings():
    answer = world.render_answer("casual", "music", random.Random(1))
    assert StyleProxy("casual", accuracy=1.0)(_Candidate([], answer, 1)) == 1.0
    assert StyleProxy("bullets", accuracy=1.0)(_Candidate([], answer, 1)) == 0.0
    assert StyleProxy("bullets", accuracy=0.0)(_Candidate([], answer, 1)) == 1.0
    with pytest.raises(ValueError, match="not one of"):
        StyleProxy("haiku")
    with pytest.raises(ValueError, match="probability"):
        StyleProxy(accuracy=2.0)
