"""OpenClawTrainer on the tiny model (CPU): updates from stored samples, the RL/OPD math, clipping, resume."""

from __future__ import annotations

import pytest
import torch
from peft import LoraConfig

from openclaw_trl.records import TrainingSample
from openclaw_trl.store import Store
from openclaw_trl.trainer import collate_samples, truncated_is_weight
from tests.helpers import clipped_surrogate, token_mean
from tests.trainer_helpers import (
    LORA,
    direct_grads,
    lora_params,
    make_trainer,
    sampled,
    train_and_capture,
)


def test_update_changes_adapter_not_base_and_marks_consumed(tiny_model_dir, tmp_path):
    store = Store(tmp_path / "store.sqlite")
    ids = [store.queue.add_sample(s) for s in sampled(tiny_model_dir, 6)]
    trainer = make_trainer(tiny_model_dir, tmp_path, store)
    lora_before, base_before = lora_params(trainer.model, True), lora_params(trainer.model, False)
    trainer.train()
    lora_after, base_after = lora_params(trainer.model, True), lora_params(trainer.model, False)
    assert any(not torch.equal(lora_before[n], lora_after[n]) for n in lora_before)
    assert all(torch.equal(base_before[n], base_after[n]) for n in base_before)
    # The first 4 samples were consumed by step 1; the surplus stays queued.
    consumed = {s.sample_id: s.consumed_step for s in store.queries.iter_samples(include_private=True)}
    assert [consumed[i] for i in ids] == [1, 1, 1, 1, None, None]
    assert store.queue.count_waiting() == 2
    logs = trainer.state.log_history[0]
    for key in (
        "reward",
        "opd/hint_accept_rate",
        "opd/teacher_failed",
        "clip_ratio/region_mean",
        "kl_old",
        "policy_version",
        "samples/waiting",
    ):
        assert key in logs, key
    assert logs["samples/waiting"] == 2 and logs["opd/teacher_failed"] == 0  # direct samples: no turns


def test_rl_gradient_equals_direct_policy_gradient(tiny_model_dir, tmp_path):
    samples = sampled(tiny_model_dir, 4, rewards=[1.0, -1.0, -1.0, 1.0])
    _, init, got = train_and_capture(tiny_model_dir, tmp_path, samples, method="rl")

    def loss_fn(logp, logits, batch, mask):  # the clipped objective; ratio 1 on the first pass
        return token_mean(clipped_surrogate(logp, batch["rewards"][:, None]), mask)

    want = direct_grads(tiny_model_dir, init, samples, loss_fn)
    assert set(want) == set(got)
    for n in want:
        torch.testing.assert_close(got[n], want[n], atol=1e-5, rtol=1e-4)
    assert sum(g.abs().sum() for g in want.values()) > 0


def test_opd_with_teacher_equal_to_student_is_a_no_op(tiny_model_dir, tmp_path):
    samples = sampled(tiny_model_dir, 4, hint=True, rewards=[0.0] * 4)
    trainer, before, grads = train_and_capture(tiny_model_dir, tmp_path, samples, method="opd")
    assert all(g.abs().max() == 0 for g in grads.values())
    after = lora_params(trainer.model, True)
    assert all(torch.equal(before[n], after[n]) for n in before)
    assert trainer.state.log_history[0]["opd/hint_accept_rate"] == 1.0
    assert trainer.state.log_history[0]["opd/mean_advantage"] == 0.0


def test_several_iterations_clip(tiny_model_dir, tmp_path):
    store = Store(tmp_path / "store.sqlite")
    for s in sampled(tiny_model_dir, 4):
        store.queue.add_sample(s)
    trainer = make_trainer(
        tiny_model_dir, tmp_path, store, method="rl", num_iterations=4, max_steps=4, learning_rate=3e-2
    )
    trainer.train()
    clip = [h["clip_ratio/region_mean"] for h in trainer.state.log_history if "clip_ratio/region_mean" in h]
    kl = [h["kl_old"] for h in trainer.state.log_history if "kl_old" in h]
    assert len(clip) == 4 and clip[0] == 0.0 and max(clip) > 0.0
    assert kl[0] == 0.0 and max(kl) > 0.0
    # One batch reused for 4 optimizer steps: consumed once, by the last step.
    assert {s.consumed_step for s in store.queries.iter_samples(include_private=True)} == {4}


def test_resume_continues_with_next_unconsumed(tiny_model_dir, tmp_path):
    store = Store(tmp_path / "store.sqlite")
    ids = [store.queue.add_sample(s) for s in sampled(tiny_model_dir, 12)]
    trainer = make_trainer(tiny_model_dir, tmp_path, store, max_steps=2, save_strategy="steps", save_steps=1)
    trainer.train()
    steps = {s.sample_id: s.consumed_step for s in store.queries.iter_samples(include_private=True)}
    assert [steps[i] for i in ids[:8]] == [1] * 4 + [2] * 4
    # Resume from checkpoint-1: the samples step 2 used are queued again. Version 2 was published, so its
    # number names the first run's weights: checkpoint-1's weights are published as version 3 (lineage
    # parent 1), and the new updates are steps 4 and 5.
    checkpoint = tmp_path / "run" / "checkpoint-1"
    assert (checkpoint / "adapter_model.safetensors").exists()
    store2 = Store(tmp_path / "store.sqlite")
    resumed = make_trainer(tiny_model_dir, tmp_path, store2, max_steps=5, save_strategy="no")
    resumed.train(resume_from_checkpoint=str(checkpoint))
    steps = {s.sample_id: s.consumed_step for s in store2.queries.iter_samples(include_private=True)}
    assert [steps[i] for i in ids] == [1] * 4 + [4] * 4 + [5] * 4
    assert resumed.state.global_step == 5
    assert (store2.lineage.published_version(3).parent, store2.lineage.published_version(4).parent) == (1, 3)
    assert store2.lineage.lineage().staleness(2, 5) == 3  # v2 -> v1 (1 update), v3 -> v5 (2 updates)
    info = (tmp_path / "run" / "openclaw_run.json").read_text()
    assert '"samples_used": 12' in info  # totals over both runs


def test_truncated_is_weight_modes():
    old = torch.tensor([[0.0, -1.0, -2.0]])
    sampling = torch.tensor([[-2.0, -1.0, 0.0]])
    mask = torch.ones(1, 3)
    w = truncated_is_weight(old, sampling, mask, "token_truncate", None, 2.0)
    torch.testing.assert_close(w, torch.tensor([[2.0, 1.0, torch.exp(torch.tensor(-2.0)).item()]]))
    w = truncated_is_weight(old, sampling, mask, "token_mask", 0.5, 2.0)
    torch.testing.assert_close(w, torch.tensor([[0.0, 1.0, 0.0]]))
    w = truncated_is_weight(old, sampling, mask, "sequence_truncate", None, 3.0)
    assert w.shape == (1, 1) and w.item() == 1.0


def test_stale_batch_gradient_carries_the_truncated_is_weight(tiny_model_dir, tmp_path):
    samples = sampled(tiny_model_dir, 4, rewards=[1.0, -1.0, 1.0, -1.0], policy_version=7)
    for i, s in enumerate(samples):  # the sampler's log-probs differ from the trainer's: weights != 1
        s.sampling_logprobs = [
            lp + (0.5 if (i + t) % 2 else -1.5) for t, lp in enumerate(s.sampling_logprobs)
        ]
    trainer, init, got = train_and_capture(tiny_model_dir, tmp_path, samples, method="rl")
    assert trainer.state.log_history[0]["sampling/importance_sampling_ratio/mean"] != 1.0

    def loss_fn(logp, logits, batch, mask):
        weight = torch.exp(logp.detach() - batch["sampling_logprobs"]).clamp(max=3.0)
        return token_mean(clipped_surrogate(logp, batch["rewards"][:, None] * weight), mask)

    want = direct_grads(tiny_model_dir, init, samples, loss_fn)
    for n in want:
        torch.testing.assert_close(got[n], want[n], atol=1e-5, rtol=1e-4)


def test_ledger_closes_a_batch_after_its_last_update_only():
    from openclaw_trl.trainer.ledger import BatchLedger

    ledger = BatchLedger()
    samples = [
        TrainingSample(
            turn_id=t,
            prompt_ids=[1],
            completion_ids=[2],
            sampling_logprobs=[-1.0],
            temperature=1.0,
            policy_version=0,
            sample_id=10 + i,
        )
        for i, t in enumerate((7, 7, 8))
    ]
    ledger.open(samples, updates=3, off_policy=True, score_std=None)
    assert [ledger.step_done()[1] for _ in range(3)] == [[], [], [10, 11, 12]]
    assert (ledger.samples_used, ledger.turns_used, ledger.sample_ids) == (3, {7, 8}, [])
    assert ledger.step_done()[1] == []  # a step after the batch closed consumes nothing again
    ledger.open(samples[:1], updates=0, off_policy=False, score_std=None)  # at least one update
    assert ledger.step_done()[1] == [10] and ledger.samples_used == 4


@pytest.mark.parametrize("chunked", [False, True], ids=["one-block", "chunked"])
def test_topk_distillation_gradient(tiny_model_dir, tmp_path, monkeypatch, chunked):
    """OPD with teacher == student (advantage 0): the whole gradient is the top-K KD term's, whether the
    LM head runs on all distilled positions at once or in checkpointed chunks (large batches)."""
    if chunked:
        import openclaw_trl.trainer.distill as distill_module

        monkeypatch.setattr(distill_module, "KD_LOGITS_ELEMS", 3 * 2048)  # 3 positions per chunk
    samples = sampled(tiny_model_dir, 4, hint=True, rewards=[0.0] * 4)
    gen = torch.Generator().manual_seed(3)
    for s in samples:  # a teacher that prefers other tokens: random top-3 ids with a peaked distribution
        ids = torch.randint(10, 1500, (len(s.completion_ids), 3), generator=gen)
        s.topk_ids = ids.tolist()
        s.topk_logprobs = torch.log(torch.tensor([[0.6, 0.2, 0.1]] * len(ids))).tolist()
    trainer, init, got = train_and_capture(
        tiny_model_dir, tmp_path, samples, method="opd", w_kd=0.5, kd_topk=3
    )
    assert trainer.state.log_history[0]["kd/loss"] > 0

    def loss_fn(logp, logits, batch, mask):
        from openclaw_trl.losses import topk_distillation_loss

        student = torch.log_softmax(logits, -1).gather(-1, batch["topk_ids"])
        kd = topk_distillation_loss(student, batch["topk_logprobs"], mask, cap=10.0)
        return 0.5 * ((kd * mask).sum(1) / mask.sum(1)).mean()

    want = direct_grads(tiny_model_dir, init, samples, loss_fn)
    assert sum(g.abs().sum() for g in want.values()) > 0
    for n in want:
        torch.testing.assert_close(got[n], want[n], atol=1e-5, rtol=1e-4)


def test_engine_serves_the_trained_adapter(tiny_model_dir, tmp_path):
    """After each update the HF engine's ``policy`` weights are exactly the trainer's adapter."""
    from openclaw_trl.engines.hf import HFEngine

    store = Store(tmp_path / "store.sqlite")
    samples = sampled(tiny_model_dir, 8)
    for s in samples:
        store.queue.add_sample(s)
    engine = HFEngine(tiny_model_dir, lora_config=LoraConfig(**LORA), dtype=torch.float32)
    try:
        trainer = make_trainer(tiny_model_dir, tmp_path, store, max_steps=2, learning_rate=1e-2)
        trainer.engine = engine
        trainer.train()
        assert engine.policy_version == 2
        probe = samples[0]
        served = engine.score([probe.prompt_ids], [probe.completion_ids], weights="policy").logprobs[0]
        batch = collate_samples([probe], pad_token_id=0)
        with torch.no_grad():
            ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
            logits = trainer.model(input_ids=ids).logits[:, len(probe.prompt_ids) - 1 : -1]
        trained = torch.log_softmax(logits, -1).gather(-1, batch["completion_ids"][..., None])[0, :, 0]
        torch.testing.assert_close(torch.tensor(served), trained, atol=1e-4, rtol=0)
        base = engine.score([probe.prompt_ids], [probe.completion_ids], weights="base").logprobs[0]
        assert max(abs(a - b) for a, b in zip(served, base)) > 1e-3  # the update did change the policy
    finally:
        engine.close()
