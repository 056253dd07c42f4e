"""The session baseline (``advantage_baseline``) and the staged OPD -> top-K KD schedule (``opd_kd_schedule``)."""

from __future__ import annotations

import sqlite3

import pytest
import torch

from openclaw_trl.config import OpenClawConfig
from openclaw_trl.export import collect_rows
from openclaw_trl.losses import scheduled_weights
from openclaw_trl.records import Judgement, TrainingSample
from openclaw_trl.store import Store
from tests.helpers import clipped_surrogate, served_turn, token_mean
from tests.trainer_helpers import direct_grads, sampled, train_and_capture


def _judge(store: Store, session: int, reward: int, idx_text: str) -> TrainingSample:
    """Add a turn to ``session``, attach a next state, judge it with ``reward``; returns its stored sample."""
    turn_id = store.conversations.add_turn(served_turn(session, idx_text))
    store.conversations.attach_next_state(turn_id, {"role": "user", "content": "next"}, "request")
    turn = store.conversations.get_turn(turn_id)
    sample = TrainingSample(turn_id, [1, 2], [3], [-0.5], 1.0, 0, reward=float(reward))
    sample_id = store.judging.save_judgement(Judgement(turn, [], reward, sample=sample))
    return store.queue.get_samples([sample_id])[0]


def test_session_baseline_is_the_mean_of_earlier_judged_rewards(tmp_path):
    with Store(tmp_path / "s.db") as store:
        a, b = store.conversations.open_session("a"), store.conversations.open_session("b")
        got = [_judge(store, a, 1, "1"), _judge(store, b, -1, "other"), _judge(store, a, -1, "2")]
        got.append(_judge(store, a, 1, "3"))
        session_a = [got[0], got[2], got[3]]
        assert [s.baseline for s in session_a] == [0.0, 1.0, 0.0]  # rewards +1, -1, +1
        assert [s.reward - s.baseline for s in session_a] == [1.0, -2.0, 1.0]
        assert got[1].baseline == 0.0  # the first judged turn of session b
        assert [row["baseline"] for row in collect_rows(store)["samples"]] == [0.0, 0.0, 1.0, 0.0]


def test_existing_store_gains_the_baseline_column(tmp_path):
    path = tmp_path / "old.sqlite"
    with Store(path) as store:
        store.queue.add_sample(TrainingSample(1, [1, 2], [3], [-0.5], 1.0, 0, reward=1.0))
    conn = sqlite3.connect(path)
    conn.execute("ALTER TABLE samples DROP COLUMN baseline")
    conn.commit()
    conn.close()
    with Store(path) as store:
        (back,) = store.queue.take_samples(1)
    assert back.baseline == 0.0


def test_trainer_rl_term_is_reward_minus_baseline(tiny_model_dir, tmp_path):
    samples = sampled(tiny_model_dir, 4, rewards=[1.0, -1.0, 1.0, 1.0])
    for s, b in zip(samples, [0.0, 1.0, 0.0, 0.5]):
        s.baseline = b
    trainer, init, got = train_and_capture(
        tiny_model_dir, tmp_path, samples, method="rl", advantage_baseline="session_mean"
    )
    assert trainer.state.log_history[0]["rl/baseline_mean"] == pytest.approx(0.375)

    def loss_fn(logp, logits, batch, mask):  # clipped objective with A = r - b; ratio 1 on the first pass
        return token_mean(clipped_surrogate(logp, (batch["rewards"] - batch["baselines"])[:, None]), mask)

    want = direct_grads(tiny_model_dir, init, samples, loss_fn)
    assert set(want) == set(got)
    for n in want:
        torch.testing.assert_close(got[n], want[n], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize(
    ("schedule", "step", "want"),
    [
        ("constant", 7, (1.0, 0.5)),
        ("switch", 1, (1.0, 0.0)),
        ("switch", 2, (0.0, 0.5)),
        ("ramp", 0, (1.0, 0.0)),
        ("ramp", 2, (1.0, 0.0)),
        ("ramp", 3, (0.5, 0.25)),
        ("ramp", 4, (0.0, 0.5)),
        ("ramp", 9, (0.0, 0.5)),
    ],
)
def test_scheduled_weights_hand_values(schedule, step, want):
    assert scheduled_weights(schedule, 1.0, 0.5, step, start=2, end=4) == pytest.approx(want)


def test_ramp_with_start_equal_end_is_a_step():
    assert scheduled_weights("ramp", 1.0, 0.5, 2, 3, 3) == (1.0, 0.0)
    assert scheduled_weights("ramp", 1.0, 0.5, 3, 3, 3) == (0.0, 0.5)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (dict(opd_kd_schedule="ramp", opd_kd_schedule_steps=[0, 2]), "w_kd > 0"),
        (dict(opd_kd_schedule="ramp", w_kd=0.1, method="rl", opd_kd_schedule_steps=[0, 2]), "opd or combine"),
        (dict(opd_kd_schedule="switch", w_kd=0.1), "needs opd_kd_schedule_steps"),
        (dict(opd_kd_schedule="ramp", w_kd=0.1, opd_kd_schedule_steps=[3]), "needs opd_kd_schedule_steps"),
        (dict(opd_kd_schedule="ramp", w_kd=0.1, opd_kd_schedule_steps=[3, 1]), "start <= end"),
        (dict(opd_kd_schedule_steps=[0, 2]), "used by opd_kd_schedule switch or ramp"),
        (dict(opd_kd_schedule="cosine"), "opd_kd_schedule must be one of"),
        (dict(advantage_baseline="group_mean"), "advantage_baseline must be one of"),
    ],
)
def test_config_refuses_unusable_schedules(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        OpenClawConfig(output_dir=str(tmp_path), report_to="none", **overrides)


def test_trainer_uses_the_scheduled_weights(tiny_model_dir, tmp_path):
    """switch at step 0: OPD weight 0 and KD weight w_kd from the first update; the gradient is the KD
    term's alone, though the teacher log-probs differ from the student's (an OPD term it would otherwise have)."""
    samples = sampled(tiny_model_dir, 4, hint=True, rewards=[0.0] * 4)
    gen = torch.Generator().manual_seed(3)
    for s in samples:
        s.teacher_logprobs = [lp - 1.0 for lp in s.sampling_logprobs]  # a nonzero OPD advantage
        ids = torch.randint(10, 1500, (len(s.completion_ids), 3), generator=gen)
        s.topk_ids = ids.tolist()
        s.topk_logprobs = torch.log(torch.tensor([[0.6, 0.2, 0.1]] * len(ids))).tolist()
    trainer, init, got = train_and_capture(
        tiny_model_dir,
        tmp_path,
        samples,
        method="opd",
        w_kd=0.5,
        kd_topk=3,
        opd_kd_schedule="switch",
        opd_kd_schedule_steps=[0, 0],
    )
    logs = trainer.state.log_history[0]
    assert logs["opd/weight"] == 0.0 and logs["kd/weight"] == 0.5
    assert logs["kd/loss_share"] == pytest.approx(1.0)  # the PPO loss is 0 with a zero advantage

    def loss_fn(logp, logits, batch, mask):
        from openclaw_trl.losses import topk_distillation_loss

        student = torch.log_softmax(logits, -1).gather(-1, batch["topk_ids"])
        kd = topk_distillation_loss(student, batch["topk_logprobs"], mask, cap=10.0)
        return 0.5 * ((kd * mask).sum(1) / mask.sum(1)).mean()

    want = direct_grads(tiny_model_dir, init, samples, loss_fn)
    for n in want:
        torch.testing.assert_close(got[n], want[n], atol=1e-5, rtol=1e-4)


def test_leave_one_out_baseline_is_the_mean_of_the_other_judged_rows():
    from openclaw_trl.losses import leave_one_out_baseline

    rewards = torch.tensor([1.0, -1.0, 1.0, 1.0, 0.5])
    judged = torch.tensor([True, True, True, True, False])  # the last row: a Best-of-N group sample
    assert leave_one_out_baseline(rewards, judged).tolist() == pytest.approx([1 / 3, 1.0, 1 / 3, 1 / 3, 0.0])
    assert leave_one_out_baseline(torch.ones(3), torch.ones(3, dtype=torch.bool)).tolist() == [1.0] * 3
    assert leave_one_out_baseline(torch.tensor([1.0]), torch.tensor([True])).tolist() == [0.0]  # no other row


def test_trainer_rl_term_is_reward_minus_the_other_rows_mean(tiny_model_dir, tmp_path):
    samples = sampled(tiny_model_dir, 4, rewards=[1.0, -1.0, 1.0, 1.0])
    trainer, init, got = train_and_capture(
        tiny_model_dir, tmp_path, samples, method="rl", advantage_baseline="batch_mean"
    )
    # each micro-batch of 2 rows is this process's share: the batch of 4 is the baseline's
    assert trainer.state.log_history[0]["rl/baseline_mean"] == pytest.approx((1 / 3 + 1 + 1 / 3 + 1 / 3) / 4)
    loo = torch.tensor([1 / 3, 1.0, 1 / 3, 1 / 3])

    def loss_fn(logp, logits, batch, mask):
        return token_mean(clipped_surrogate(logp, (batch["rewards"] - loo)[:, None]), mask)

    want = direct_grads(tiny_model_dir, init, samples, loss_fn)
    for n in want:
        torch.testing.assert_close(got[n], want[n], atol=1e-5, rtol=1e-4)
