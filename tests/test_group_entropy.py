"""The entropy-regularised Best-of-N group reward ``r_i = score_i - lambda * log pi(y_i | x)``: its hand values,
``lambda = 0`` being the plain score, the fixed point ``pi ~ exp(score / lambda)`` it trains towards, the rewards
a real store receives, and the recipe field that turns it on (refused where it cannot apply)."""

from __future__ import annotations

import math

import pytest
import torch

from openclaw_trl.config import OpenClawConfig
from openclaw_trl.engines.base import Completion
from openclaw_trl.judging import BestOfN, QuickJudgeConfig, QuickJudgeInput, make_quick_judge
from openclaw_trl.judging.best_of_n import GroupChoice, group_rewards, group_samples
from openclaw_trl.losses import group_relative_advantages
from openclaw_trl.serving_stack import make_best_of_n
from openclaw_trl.store import Store
from tests.helpers import served_turn


def flat_score(turn: QuickJudgeInput) -> float:
    """A callable quick judge that finds every reply equally good."""
    return 1.0


def _completion(logprobs: list[float]) -> Completion:
    return Completion(list(range(5, 5 + len(logprobs))), list(logprobs), "stop", 0)


def _advantages(samples, scale: str = "none") -> torch.Tensor:
    rewards = torch.tensor([s.reward for s in samples])
    means = torch.tensor([s.baseline for s in samples])
    stds = torch.tensor([s.group_std for s in samples])
    return group_relative_advantages(rewards, means, stds, scale)


def test_reward_is_the_score_minus_lambda_times_the_summed_sampling_logprob():
    comps = [_completion([-1.0, -1.0]), _completion([-4.0, -6.0]), _completion([-3.0])]
    assert group_rewards([2.0, 1.0, None], comps, 0.5) == [2.0 + 1.0, 1.0 + 5.0, None]
    assert group_rewards([2.0, 1.0, None], comps, 0.0) == [2.0, 1.0, None]


def test_equal_scores_the_less_likely_candidate_gets_the_larger_advantage():
    likely, unlikely = _completion([-0.5, -0.5]), _completion([-3.0, -2.0])  # log pi -1 and -5
    for scale in ("none", "group"):
        plain = _advantages(group_samples(1, [1], 1.0, [likely, unlikely], [2.0, 2.0], 0), scale)
        assert plain.tolist() == [0.0, 0.0]  # equal scores: nothing to learn without the entropy term
        regular = _advantages(group_samples(1, [1], 1.0, [likely, unlikely], [2.0, 2.0], 0, 0.25), scale)
        assert regular[1] > 0 > regular[0]
    # unscaled, the hand values: rewards 2 + 0.25 and 2 + 1.25, mean 2.75
    got = _advantages(group_samples(1, [1], 1.0, [likely, unlikely], [2.0, 2.0], 0, 0.25))
    torch.testing.assert_close(got, torch.tensor([-0.5, 0.5]))


def test_lambda_zero_is_exactly_the_plain_group():
    comps = [_completion([-0.2, -0.7]), _completion([-2.0]), _completion([]), _completion([-1.0, -1.5, -0.1])]
    scores = [2.0, None, 4.0, 9.0]
    plain = group_samples(11, [1, 2], 1.0, comps, scores, served=3)
    assert group_samples(11, [1, 2], 1.0, comps, scores, served=3, entropy_coef=0.0) == plain
    assert [s.reward for s in plain] == [2.0, 5.0, 9.0] and plain[0].baseline == 5.0


def test_a_candidate_without_a_score_keeps_a_zero_advantage():
    comps = [_completion([-1.0]), _completion([-9.0]), _completion([-4.0])]
    samples = group_samples(1, [1], 1.0, comps, [1.0, None, 3.0], 0, entropy_coef=1.0)
    assert [s.meta["best_of_n"]["score"] for s in samples] == [1.0, None, 3.0]  # the judge's own scores kept
    assert _advantages(samples)[1] == 0.0
    assert [s.reward for s in samples] == [2.0, 4.5, 7.0]  # 1 + 1, the mean of 2 and 7, 3 + 4


def test_the_expected_update_converges_to_exp_score_over_lambda():
    """A softmax policy over four replies, updated by the exact expectation of the group gradient
    ``E[(r - E r) grad log pi]`` with ``r`` from :func:`group_rewards`: it settles at ``softmax(score / lambda)``;
    two equally good replies end with equal mass, however unequal they started."""
    scores, lam = torch.tensor([1.0, 1.0, 0.0, -0.5], dtype=torch.float64), 0.5
    logits = torch.tensor([3.0, -1.0, 0.5, 0.0], dtype=torch.float64)
    for _ in range(3000):
        pi = torch.softmax(logits, 0)
        comps = [_completion([float(lp)]) for lp in torch.log(pi)]
        rewards = torch.tensor(group_rewards(scores.tolist(), comps, lam), dtype=torch.float64)
        advantage = rewards - (pi * rewards).sum()
        logits = logits + pi * advantage  # sum_y pi(y) A(y) (e_y - pi), the last term zero in mean
    torch.testing.assert_close(torch.softmax(logits, 0), torch.softmax(scores / lam, 0), atol=1e-6, rtol=0)
    pi = torch.softmax(logits, 0)
    assert math.isclose(pi[0], pi[1], rel_tol=1e-6)


def test_best_of_n_stores_the_regularised_rewards_and_the_plain_scores(tmp_path):
    comps = [_completion([-0.5, -0.5]), _completion([-3.0, -2.0])]
    with Store(tmp_path / "s.db") as store:
        turn_id = store.conversations.add_turn(served_turn(store.conversations.open_session("s")))
        picker = BestOfN(
            2,
            make_quick_judge(QuickJudgeConfig("callable", "x:y"), fn=flat_score),
            store,
            entropy_coef=0.25,
        )
        try:
            group_id = picker.record(
                turn_id, [1, 2], 1.0, comps, ["a", "b"], GroupChoice([2.0, 2.0], 0, 0.75)
            )
        finally:
            picker.close()
        assert store.groups.get_group(group_id).scores == [2.0, 2.0]
        samples = store.queue.take_samples(10)
        assert [s.reward for s in samples] == [2.25, 3.25] and {s.baseline for s in samples} == {2.75}
        assert samples[0].group_std == pytest.approx(math.sqrt(0.5))


def test_the_recipe_field_reaches_the_best_of_n_picker(tmp_path):
    config = OpenClawConfig(
        output_dir=str(tmp_path),
        report_to="none",
        best_of_n=2,
        quick_judge_backend="callable",
        quick_judge_callable="tests.test_group_entropy:flat_score",
        group_entropy_coef=0.3,
    )
    assert config.quick_judge_config().entropy_coef == 0.3
    with Store(tmp_path / "s.db") as store:
        picker = make_best_of_n(2, config.quick_judge_config(), None, None, store)
        try:
            assert picker.entropy_coef == 0.3
        finally:
            picker.close()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (dict(group_entropy_coef=0.1), "only apply to Best-of-N groups: set best_of_n > 1"),
        (dict(best_of_n=4, group_entropy_coef=-0.1), "group_entropy_coef must be a finite number >= 0"),
        (dict(best_of_n=4, group_entropy_coef=float("nan")), "group_entropy_coef must be a finite number"),
        (dict(best_of_n=4, group_entropy_coef=float("inf")), "group_entropy_coef must be a finite number"),
        (dict(best_of_n=4, group_entropy_coef=True), "group_entropy_coef must be a finite number"),
    ],
)
def test_config_refuses_what_cannot_work(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        OpenClawConfig(output_dir=str(tmp_path), report_to="none", **overrides)


def test_the_picker_refuses_a_bad_coefficient(tmp_path):
    with Store(tmp_path / "s.db") as store:
        judge = make_quick_judge(QuickJudgeConfig("callable", "x:y"), fn=flat_score)
        with pytest.raises(ValueError, match="entropy_coef must be a finite number >= 0"):
            BestOfN(2, judge, store, entropy_coef=-1.0)
        judge.close()
    with pytest.raises(ValueError, match="group_entropy_coef must be a finite number >= 0"):
        QuickJudgeConfig("callable", "x:y", entropy_coef=float("nan"))
