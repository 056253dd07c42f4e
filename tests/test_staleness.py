"""``max_staleness``: samples sampled too many policy versions ago are dropped (kept, with the reason), never
trained on, counted and exported; the batch is filled with the next, fresh samples."""

from __future__ import annotations

import pytest

from openclaw_trl.config import OpenClawConfig
from openclaw_trl.export import collect_rows
from openclaw_trl.records import TrainingSample
from openclaw_trl.status import LearningStatus
from openclaw_trl.store import Store
from openclaw_trl.trainer.progress import ProgressCallback, TrainingProgress
from tests.trainer_helpers import make_trainer, sampled


def _sample(version: int) -> TrainingSample:
    return TrainingSample(
        turn_id=100 + version,
        prompt_ids=[1, 2, 3],
        completion_ids=[4, 5],
        sampling_logprobs=[-0.5, -1.25],
        temperature=1.0,
        policy_version=version,
        reward=1.0,
    )


def test_samples_more_than_k_versions_old_are_dropped_with_the_reason(tmp_path):
    with Store(tmp_path / "store.db") as store:
        ids = [store.queue.add_sample(_sample(v)) for v in range(7)]  # sampled by v0 .. v6
        batch = store.queue.wait_for_samples(3, timeout=1, policy_version=6, max_staleness=2)
        assert [s.policy_version for s in batch] == [4, 5, 6]  # 6 - v <= 2: fresh, filling the batch
        reasons = {s.sample_id: s.dropped_reason for s in store.queries.iter_samples()}
        assert [reasons[i] for i in ids] == [
            f"stale: sampled by v{v}, {6 - v} updates from policy v6, max_staleness 2" for v in range(4)
        ] + [None] * 3
        assert store.queue.count_dropped_stale() == 4
        store.queue.mark_consumed([s.sample_id for s in batch], step=7)
        assert store.queue.count_waiting() == 0  # dropped samples are never handed out again
        assert store.queue.drop_stale(policy_version=9, max_staleness=0) == 0  # consumed ones are not dropped
    with Store(tmp_path / "store.db") as reopened:  # kept across restarts
        assert reopened.queue.count_dropped_stale() == 4 and reopened.queue.count_waiting() == 0


def test_without_max_staleness_nothing_is_dropped(tmp_path):
    with Store(tmp_path / "store.db") as store:
        for v in range(7):
            store.queue.add_sample(_sample(v))
        batch = store.queue.wait_for_samples(7, timeout=1, policy_version=60)
        assert len(batch) == 7 and store.queue.count_dropped_stale() == 0


def test_trainer_drops_stale_samples_and_fills_the_batch(tiny_model_dir, tmp_path):
    store = Store(tmp_path / "store.sqlite")
    old = [store.queue.add_sample(s) for s in sampled(tiny_model_dir, 6, policy_version=0)]
    fresh = [store.queue.add_sample(s) for s in sampled(tiny_model_dir, 4, seed=1, policy_version=1)]
    trainer = make_trainer(tiny_model_dir, tmp_path, store, max_steps=2, max_staleness=0)
    progress = TrainingProgress()
    trainer.add_callback(ProgressCallback(progress))
    trainer.train()
    rows = {s.sample_id: s for s in store.queries.iter_samples()}
    # Step 1 (policy v0) trains the first four; step 2 (policy v1) drops the two v0 left, trains the v1 ones.
    assert [rows[i].consumed_step for i in old + fresh] == [1] * 4 + [None] * 2 + [2] * 4
    assert [rows[i].dropped_reason for i in old[4:]] == [
        "stale: sampled by v0, 1 updates from policy v1, max_staleness 0"
    ] * 2
    assert [entry["samples/dropped_stale"] for entry in trainer.state.log_history if "reward" in entry] == [
        0,
        2,
    ]
    status = LearningStatus(trainer.args, None, store, progress)()  # what the trainer pushed, not its state
    assert status["samples_dropped_stale"] == 2
    assert status["last_metrics"] == [e for e in trainer.state.log_history if "reward" in e][-1]
    assert [h["step"] for h in status["history"]] == [1, 2]
    exported = {r["sample_id"]: r["dropped_reason"] for r in collect_rows(store)["samples"]}
    assert exported[old[4]].startswith("stale: sampled by v0") and exported[fresh[0]] is None


@pytest.mark.parametrize("value", [-1, 1.5, "2"])
def test_max_staleness_must_be_a_non_negative_integer(tmp_path, value):
    with pytest.raises(ValueError, match="max_staleness must be an integer >= 0"):
        OpenClawConfig(output_dir=str(tmp_path), max_staleness=value, report_to="none")


@pytest.mark.parametrize("num_iterations", [1, 2])
def test_opd_term_of_a_stale_batch_compares_the_teacher_with_the_policy_being_trained(
    tiny_model_dir, tmp_path, num_iterations
):
    """A stale sample whose sampler gave log-probs 0.3 below the trainer's: the teacher here is the policy
    being trained itself (teacher log-probs = the base model's), so the OPD term must be 0, not 0.3."""
    samples = sampled(tiny_model_dir, 4, policy_version=3, rewards=[0.0] * 4, hint=True)
    for s in samples:
        s.sampling_logprobs = [lp - 0.3 for lp in s.sampling_logprobs]  # another policy sampled them
    store = Store(tmp_path / "store.sqlite")
    for s in samples:
        store.queue.add_sample(s)
    trainer = make_trainer(tiny_model_dir, tmp_path, store, method="combine", num_iterations=num_iterations)
    seen = []
    compute_loss = trainer.compute_loss

    def spy(model, inputs, *args, **kwargs):
        loss = compute_loss(model, inputs, *args, **kwargs)
        seen.append((inputs["advantages"].clone(), inputs["completion_mask"].clone()))
        return loss

    trainer.compute_loss = spy
    trainer.train()
    assert seen
    for advantages, mask in seen[:2]:  # the first pass over the batch: the weights of the start
        assert advantages[mask.bool()].abs().max() < 1e-4
    store.close()


def test_samples_of_another_temperature_are_kept_with_the_reason_and_never_trained(tiny_model_dir, tmp_path):
    """One temperature per sample: a sample drawn at T = 0.7 (a ``serve`` run's turns, judged later) compares
    a T = 0.7 teacher with the trainer's T = 1 log-probs, so a T = 1 trainer leaves it in the store, with the
    reason, and fills its batch with T = 1 samples; a T = 0.7 queue would take it."""
    import dataclasses

    store = Store(tmp_path / "store.sqlite")
    draws = sampled(tiny_model_dir, 6, hint=True)
    cold = [store.queue.add_sample(dataclasses.replace(s, temperature=0.7)) for s in draws[:2]]
    warm = [store.queue.add_sample(s) for s in draws[2:]]
    trainer = make_trainer(tiny_model_dir, tmp_path, store, max_steps=1)
    progress = TrainingProgress()
    trainer.add_callback(ProgressCallback(progress))
    trainer.train()
    rows = {s.sample_id: s for s in store.queries.iter_samples()}
    assert [rows[i].consumed_step for i in cold + warm] == [None, None, 1, 1, 1, 1]
    assert [rows[i].dropped_reason for i in cold] == [
        "temperature: sampled at T=0.7, the trainer trains at T=1 (a run with temperature 0.7 can train on it)"
    ] * 2
    logged = [entry for entry in trainer.state.log_history if "reward" in entry]
    assert logged[0]["samples/dropped_temperature"] == 2
    assert LearningStatus(trainer.args, None, store, progress)()["samples_dropped_temperature"] == 2
    assert store.queue.count_waiting() == 0  # kept, never handed out again


def test_a_queue_at_the_samples_temperature_hands_them_out(tmp_path):
    import dataclasses

    with Store(tmp_path / "store.db") as store:
        for v in range(3):
            store.queue.add_sample(dataclasses.replace(_sample(v), temperature=0.7))
        assert len(store.queue.wait_for_samples(3, timeout=1, temperature=0.7)) == 3
        assert store.queue.count_dropped_temperature() == 0
