"""The session baseline is unbiased: a Monte-Carlo bandit compares the expected update with ``grad E[r]``.

A 3-reply bandit (softmax policy over logits ``theta``), each reply with its own reward distribution in
{-1, 0, +1} and its own chance of an accepted hint. A judged turn's update is ``1(kept) * A * grad log pi(k)
= 1(kept) * A * (e_k - pi)`` with ``A`` the trainer's RL advantage ``w_rl * (r - b)``; ``b`` is the mean reward
of two earlier turns of the session (drawn from the same policy, so independent of this turn's reply).

* today's rule (every judged turn is a sample: ``judge.keeps_sample`` with ``every_judged_turn``) gives
  ``E[update] = grad E[r]`` within the Monte-Carlo error, for ``rl`` and ``combine``;
* the rule that keeps only some outcomes (``r != 0``; for ``combine`` a hint or ``r != 0``), computed here,
  is off by ``-E[b] * grad P(kept)``, many standard errors away.
"""

from __future__ import annotations

import pytest
import torch

from openclaw_trl import judge
from openclaw_trl.judging import JudgeConfig, Scorer
from openclaw_trl.judging.voters import Verdict
from openclaw_trl.losses import combined_advantages
from openclaw_trl.store import Store
from tests.helpers import served_turn

THETA = torch.tensor([0.4, 0.0, -0.3], dtype=torch.float64)
P_PLUS = torch.tensor([0.7, 0.15, 0.2], dtype=torch.float64)  # P(r = +1 | reply)
P_MINUS = torch.tensor([0.1, 0.05, 0.5], dtype=torch.float64)  # P(r = -1 | reply)
P_HINT = torch.tensor([0.1, 0.6, 0.3], dtype=torch.float64)  # P(an accepted hint | reply), combine
DRAWS = 400_000


def _exact_gradient() -> torch.Tensor:
    """``grad_theta E[r] = sum_k pi_k mu_k (e_k - pi)`` with ``mu_k = E[r | k]``."""
    pi = torch.softmax(THETA, 0)
    mu = P_PLUS - P_MINUS
    return pi * mu - pi * (pi * mu).sum()


def _rewards(replies: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    u = torch.rand(replies.shape, generator=gen, dtype=torch.float64)
    plus, minus = P_PLUS[replies], P_MINUS[replies]
    return torch.where(u < plus, 1.0, torch.where(u < plus + minus, -1.0, 0.0)).to(torch.float64)


def _turns(gen: torch.Generator):
    """``(reply, r, hint, b)`` of ``DRAWS`` judged turns, ``b`` the mean of two earlier turns' rewards."""
    pi = torch.softmax(THETA, 0)
    replies = torch.multinomial(pi, DRAWS, replacement=True, generator=gen)
    rewards = _rewards(replies, gen)
    hints = torch.rand(DRAWS, generator=gen, dtype=torch.float64) < P_HINT[replies]
    earlier = torch.multinomial(pi, 2 * DRAWS, replacement=True, generator=gen)
    baselines = _rewards(earlier, gen).view(DRAWS, 2).mean(1)
    return replies, rewards, hints, baselines


def _updates(replies, rewards, hints, baselines, kept) -> torch.Tensor:
    """Per judged turn ``1(kept) * A * (e_k - pi)``, ``A`` from the trainer's advantage function (the OPD term
    is 0 here: teacher = student, so only the RL term with its baseline is measured)."""
    zeros = torch.zeros(DRAWS, 1, dtype=torch.float64)
    advantages = combined_advantages(rewards - baselines, zeros, zeros, torch.ones(DRAWS, 1), hints)[:, 0]
    score = torch.nn.functional.one_hot(replies, 3).to(torch.float64) - torch.softmax(THETA, 0)
    return (kept.to(torch.float64) * advantages)[:, None] * score


def _kept_table(method: str, every: bool):
    """``judge.keeps_sample`` as a vectorised lookup over (r, hint)."""
    table = {(r, h): judge.keeps_sample(method, r, h, every) for r in (-1, 0, 1) for h in (False, True)}

    def kept(rewards, hints):
        out = torch.zeros(DRAWS, dtype=torch.bool)
        for (r, h), keep in table.items():
            out |= keep & (rewards == r) & (hints == h)
        return out

    return kept


def _old_rule(method: str):
    """The rule that keeps some outcomes only: ``rl`` keeps ``r != 0``, ``combine`` a hint or ``r != 0``."""

    def kept(rewards, hints):
        return (rewards != 0) | hints if method == "combine" else rewards != 0

    return kept


@pytest.mark.parametrize("method", ["rl", "combine"])
def test_every_judged_turn_makes_the_baseline_unbiased_and_keeping_some_outcomes_does_not(method):
    gen = torch.Generator().manual_seed(0)
    replies, rewards, hints, baselines = _turns(gen)
    exact = _exact_gradient()
    figures = {}
    for name, rule in (("every judged turn", _kept_table(method, True)), ("r != 0 kept", _old_rule(method))):
        updates = _updates(replies, rewards, hints, baselines, rule(rewards, hints))
        mean, se = updates.mean(0), updates.std(0) / DRAWS**0.5
        figures[name] = (mean, se, ((mean - exact) / se).abs().max())
    print(f"\n{method}: exact grad E[r] = {exact.numpy().round(4)}")
    for name, (mean, se, z) in figures.items():
        print(f"  {name:18s} E[update] = {mean.numpy().round(4)} +- {se.numpy().round(4)}  max |z| = {z:.1f}")
    mean, se, z = figures["every judged turn"]
    assert z < 4.0
    mean_old, se_old, z_old = figures["r != 0 kept"]
    assert z_old > 10.0
    # the bias is the baseline term: -E[b] * grad P(kept), P(kept) summed over the replies
    pi = torch.softmax(THETA, 0)
    p_kept = P_PLUS + P_MINUS
    if method == "combine":
        p_kept = p_kept + (1 - p_kept) * P_HINT
    grad_kept = pi * p_kept - pi * (pi * p_kept).sum()
    expected_bias = -baselines.mean() * grad_kept
    assert ((mean_old - exact - expected_bias).abs() < 4 * se_old + 1e-4).all()


def test_the_scorer_turns_a_zero_reward_into_a_sample_when_the_rl_term_has_a_baseline(tmp_path):
    rewards = iter([1, 0])

    def judge_fn(item):
        return Verdict(reward=next(rewards))

    with Store(tmp_path / "s.db") as store:
        session = store.conversations.open_session("a")
        for text in ("first", "second"):
            turn = store.conversations.add_turn(served_turn(session, text))
            store.conversations.attach_next_state(turn, {"role": "user", "content": "next"}, "request")
        config = JudgeConfig(method="rl", backend="callable", callable="unused:fn", every_judged_turn=True)
        Scorer(store, config, judge_fn=judge_fn).run_until_idle()
        samples = list(store.queries.iter_samples())
    assert [(s.reward, s.baseline) for s in samples] == [(1.0, 0.0), (0.0, 1.0)]  # the r = 0 turn: A = -1
