"""``prm_monitor``: under OPD the PRM votes run too; their reward is stored and logged, never trained on."""

from __future__ import annotations

import pytest
import torch

from openclaw_trl.config import OpenClawConfig
from openclaw_trl.judging import JudgeConfig, Scorer
from openclaw_trl.store import Store
from tests.helpers import tiny_hf_engine
from tests.test_scorer import CATS_HINT, FRENCH_HINT, RULES, scripted
from tests.trainer_helpers import sampled, train_and_capture


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    with tiny_hf_engine(tiny_model_dir, device="cpu") as engine:
        yield engine


def test_opd_with_prm_monitor_stores_both_votes_and_keeps_the_opd_sample_rule(
    tmp_path, tiny_tokenizer, engine
):
    with Store(tmp_path / "s.db") as store:
        turns = scripted(store, tiny_tokenizer)
        names = {v: k for k, v in turns.items()}
        config = JudgeConfig(method="opd", backend="callable", callable=RULES, prm_monitor=True)
        scorer = Scorer(store, config, engine=engine)
        assert scorer.run_until_idle() == 6
        samples = store.queue.take_samples(100)
        # The OPD samples (an accepted hint), reward 0; the PRM reward is kept for monitoring only.
        got = {names[s.turn_id]: (s.reward, s.hint, s.meta["prm_eval_score"]) for s in samples}
        assert got == {"a3": (0, FRENCH_HINT, -1.0), "b1": (0, CATS_HINT, 0.0)}
        assert all(s.has_hint for s in samples)
        for name in ("a1", "a3", "b1"):
            assert {v.kind for v in store.judging.votes_for(turns[name])} == {"prm", "hint"}
        assert (
            store.conversations.get_turn(turns["a1"]).reward == 1
            and store.conversations.get_turn(turns["a3"]).reward == -1
        )
        scorer.close()


def test_prm_monitor_is_logged_and_leaves_the_gradient_unchanged(tiny_model_dir, tmp_path):
    def samples(scores):
        out = sampled(tiny_model_dir, 4, rewards=[0.0] * 4, hint=True)
        for i, s in enumerate(out):  # a teacher that differs from the student: a non-zero OPD gradient
            s.teacher_logprobs = [
                lp + (0.3 if (i + t) % 2 else -0.4) for t, lp in enumerate(s.sampling_logprobs)
            ]
            if scores is not None:
                s.meta = {"prm_eval_score": scores[i]}
        return out

    off, _, grads_off = train_and_capture(tiny_model_dir, tmp_path / "off", samples(None), method="opd")
    on, _, grads_on = train_and_capture(
        tiny_model_dir, tmp_path / "on", samples([1.0, -1.0, 1.0, 1.0]), method="opd", prm_monitor=True
    )
    assert on.state.log_history[0]["rollout/prm_eval_score"] == 0.5
    assert "rollout/prm_eval_score" not in off.state.log_history[0]
    assert grads_on.keys() == grads_off.keys() and any(g.abs().sum() > 0 for g in grads_on.values())
    for name, grad in grads_on.items():
        torch.testing.assert_close(grad, grads_off[name], atol=0, rtol=0)


@pytest.mark.parametrize("method", ["rl", "combine"])
def test_prm_monitor_is_refused_outside_opd(tmp_path, method):
    with pytest.raises(ValueError, match="prm_monitor monitors the PRM reward under method opd"):
        OpenClawConfig(output_dir=str(tmp_path), method=method, prm_monitor=True, report_to="none")
    with pytest.raises(ValueError, match="prm_monitor only applies to method 'opd'"):
        JudgeConfig(method=method, prm_monitor=True)
