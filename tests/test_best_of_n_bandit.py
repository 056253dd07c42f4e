"""The served Best-of-N candidate's verdict, weighted by ``(1/N) / P(served)``, trains the on-policy gradient.

A 3-reply bandit: the policy ``pi`` (uniform), the user's verdicts ``v = (+1, -1, +1)`` and a biased quick
judge that ranks the replies A > B > C (C is liked by the user but ranked last). Each turn samples ``N = 4``
candidates, serves one (``best_of_n.choose_served``: the best, or with probability ``explore`` a uniform
one) and the verdict sample's update is ``w * v(y) * grad log pi(y) = w * v(y) * (e_y - pi)``.

* weighted (``best_of_n.verdict_weight``): ``E[update] = grad E_pi[v]`` within the Monte-Carlo error, so
  its sign agrees on every reply;
* the uncorrected row (the best always served, weight 1), computed here, pushes C down although the user
  rates it +1 and the on-policy gradient pushes it up.
"""

from __future__ import annotations

import random

import pytest
import torch

from openclaw_trl.judging import JudgeConfig, QuickJudgeConfig, Scorer, make_quick_judge
from openclaw_trl.judging.best_of_n import BestOfN, choose_served, served_probability, verdict_weight
from openclaw_trl.judging.voters import Verdict
from openclaw_trl.records import Candidate, CandidateGroup
from openclaw_trl.store import Store
from tests.helpers import served_turn

PI = torch.full((3,), 1 / 3, dtype=torch.float64)
VERDICT = torch.tensor([1.0, -1.0, 1.0], dtype=torch.float64)
QUICK = torch.tensor([3.0, 2.0, 1.0], dtype=torch.float64)  # biased: ranks C last
N, GROUPS = 4, 400_000


def _on_policy_gradient() -> torch.Tensor:
    return PI * VERDICT - PI * (PI * VERDICT).sum()


def _verdict_updates(explore: float, weighted: bool, gen: torch.Generator) -> torch.Tensor:
    candidates = torch.multinomial(PI, GROUPS * N, replacement=True, generator=gen).view(GROUPS, N)
    best = QUICK[candidates].argmax(1)  # the first of the highest scores, as served_index
    explored = torch.rand(GROUPS, generator=gen, dtype=torch.float64) < explore
    uniform = torch.randint(0, N, (GROUPS,), generator=gen)
    index = torch.where(explored, uniform, best)
    weight = torch.ones(GROUPS, dtype=torch.float64)
    reply = candidates.gather(1, index[:, None])[:, 0]
    if weighted:  # B: the candidates tied at the best score (here: the same reply drawn several times)
        top = QUICK[candidates].max(1).values
        n_best = (QUICK[candidates] == top[:, None]).sum(1)
        in_best = QUICK[reply] == top
        weight = torch.tensor(
            [
                verdict_weight(N, served_probability(bool(b), int(k), N, explore))
                for b, k in zip(in_best, n_best, strict=True)
            ],
            dtype=torch.float64,
        )
    score = torch.nn.functional.one_hot(reply, 3).to(torch.float64) - PI
    return (weight * VERDICT[reply])[:, None] * score


def test_weighted_verdict_agrees_with_the_on_policy_gradient_and_the_uncorrected_row_does_not():
    gen = torch.Generator().manual_seed(0)
    exact = _on_policy_gradient()
    explore = QuickJudgeConfig.explore
    weighted = _verdict_updates(explore, weighted=True, gen=gen)
    old = _verdict_updates(0.0, weighted=False, gen=gen)
    rows = {}
    for name, updates in (("weighted", weighted), ("uncorrected", old)):
        mean, se = updates.mean(0), updates.std(0) / GROUPS**0.5
        rows[name] = (mean, se)
        print(
            f"\n{name:11s} E[update] = {mean.numpy().round(4)} +- {se.numpy().round(4)}"
            f"  (on-policy {exact.numpy().round(4)}, ratio {(mean / exact).numpy().round(3)})"
        )
    mean, se = rows["weighted"]
    assert (torch.sign(mean) == torch.sign(exact)).all()
    assert ((mean - exact).abs() < 4 * se).all()
    mean, se = rows["uncorrected"]
    assert exact[2] > 0 and mean[2] < -10 * se[2]  # C pushed down although the user rates it +1


def test_choose_served_explores_with_the_recorded_probability():
    rng, scores = random.Random(0), [1.0, 5.0, None, 2.0]
    picks = [choose_served(scores, 0.4, rng) for _ in range(20_000)]
    best = sum(1 for i, _ in picks if i == 1) / len(picks)
    assert abs(best - (0.6 + 0.1)) < 0.015
    assert {p for i, p in picks if i == 1} == {0.7} and {p for i, p in picks if i != 1} == {0.1}
    assert choose_served(scores, 0.0, rng) == (1, 1.0)
    assert verdict_weight(4, 1.0) is None and verdict_weight(1, 1.0) == 1.0
    assert verdict_weight(4, 0.1) == 2.5


@pytest.mark.parametrize("explore", [0.0, 0.25, 1.0])
@pytest.mark.parametrize("scores", [[None, None, None, None], [2.0, 2.0, 2.0, 2.0]])
def test_a_pick_the_judge_could_not_make_is_a_plain_policy_sample_of_weight_one(scores, explore):
    """No candidate scored, or all tied: the served one is a draw of the policy, its verdict weighs 1."""
    rng = random.Random(1)
    for _ in range(50):
        index, prob = choose_served(scores, explore, rng)
        assert prob == pytest.approx(1 / 4) and verdict_weight(4, prob) == 1.0


def test_candidates_tied_at_the_top_share_the_pick():
    rng = random.Random(2)
    scores = [3.0, 1.0, 3.0, None]
    index, prob = choose_served(scores, 0.0, rng)
    assert index == 0 and prob == pytest.approx(0.5) and verdict_weight(4, prob) == pytest.approx(0.5)
    picks = [choose_served(scores, 0.25, rng) for _ in range(2000)]
    assert {round(p, 6) for i, p in picks if i in (0, 2)} == {round(0.75 / 2 + 0.25 / 4, 6)}
    assert {round(p, 6) for i, p in picks if i in (1, 3)} == {round(0.25 / 4, 6)}


def _served_turn(store: Store, session: int, served_prob: float | None) -> int:
    turn = store.conversations.add_turn(served_turn(session, f"hi {served_prob}"))
    candidates = [Candidate([3], [-0.5], "x", "stop", 0, 1.0), Candidate([4], [-0.7], "y", "stop", 0, 0.0)]
    store.groups.add_group(CandidateGroup(turn, "callable", 0, candidates, 0.5, 0.7, served_prob), [])
    store.conversations.attach_next_state(turn, {"role": "user", "content": "next"}, "request")
    return turn


def test_the_scorer_weights_the_served_verdict_and_leaves_a_certain_pick_untrained(tmp_path):
    with Store(tmp_path / "s.db") as store:
        session = store.conversations.open_session("a")
        explored = _served_turn(store, session, served_probability(True, 1, 2, 0.25))
        certain = _served_turn(store, session, None)
        config = JudgeConfig(method="rl", backend="callable", callable="unused:fn")
        scorer = Scorer(store, config, judge_fn=lambda item: Verdict(reward=1))
        scorer.run_until_idle()
        samples = {s.turn_id: s for s in store.queries.iter_samples() if s.origin == "scorer"}
        assert set(samples) == {explored} and scorer.stats["best_of_n_not_trained"] == 1
        assert samples[explored].weight == (1 / 2) / 0.875
        assert samples[explored].meta["best_of_n_served"]["served_prob"] == 0.875
        assert store.conversations.get_turn(certain).reward == 1  # the verdict is kept on its turn


def test_best_of_n_records_the_served_probability(tmp_path):
    with Store(tmp_path / "s.db") as store:
        judge = make_quick_judge(
            QuickJudgeConfig("callable", "x:y"), fn=lambda item: float(len(item.response))
        )
        picker = BestOfN(2, judge, store, explore=1.0, seed=0)
        choice = picker.choose([{"role": "user", "content": "q"}], "s", [{"content": "a"}, {"content": "bb"}])
        assert choice.served_prob == served_probability(choice.served_index == 1, 1, 2, 1.0) == 0.5
