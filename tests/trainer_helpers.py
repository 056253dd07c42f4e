"""Builders shared by the trainer tests: samples drawn from the tiny base model with their exact sampling
log-probs, a small ``OpenClawTrainer`` over a store, and the gradients of a loss computed directly (without
the trainer) for comparison."""

from __future__ import annotations

import functools

import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback

from openclaw_trl.config import OpenClawConfig
from openclaw_trl.records import TrainingSample
from openclaw_trl.store import Store
from openclaw_trl.trainer import OpenClawTrainer, collate_samples

LORA = dict(r=8, lora_alpha=16, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM")


def sampled(
    model_dir, n, seed=0, prompt_len=12, completion_len=6, policy_version=0, rewards=None, hint=False
):
    """Samples whose completions were drawn from the base model, with their exact sampling log-probs."""
    out = []
    for i, (prompt, completion, logprobs) in enumerate(
        _draws(model_dir, n, seed, prompt_len, completion_len)
    ):
        reward = rewards[i] if rewards is not None else (1.0 if i % 2 == 0 else -1.0)
        out.append(
            TrainingSample(
                turn_id=1000 + i,
                prompt_ids=list(prompt),
                completion_ids=list(completion),
                sampling_logprobs=list(logprobs),
                temperature=1.0,
                policy_version=policy_version,
                reward=reward,
                has_hint=hint,
                teacher_logprobs=list(logprobs) if hint else None,
            )
        )
    return out


def _draws(model_dir, n, seed, prompt_len, completion_len) -> list[tuple]:
    """The first ``n`` ``(prompt, completion, log-probs)`` drawn with ``seed``: the draws are sequential, so
    the first ``n`` of a longer draw are the same; one draw of at least 12 is kept per model and seed."""
    return list(_draws_up_to(str(model_dir), max(n, 12), seed, prompt_len, completion_len)[:n])


@functools.lru_cache(maxsize=8)
def _draws_up_to(model_dir: str, n, seed, prompt_len, completion_len) -> tuple:
    gen = torch.Generator().manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    out = []
    for i in range(n):
        prompt = torch.randint(10, 1500, (prompt_len + i % 3,), generator=gen).tolist()
        ids = torch.tensor([prompt])
        completion, logprobs = [], []
        with torch.no_grad():
            for _ in range(completion_len):
                lp = torch.log_softmax(model(ids).logits[0, -1], -1)
                tok = int(torch.multinomial(lp.exp(), 1, generator=gen))
                completion.append(tok)
                logprobs.append(float(lp[tok]))
                ids = torch.cat([ids, torch.tensor([[tok]])], 1)
        out.append((tuple(prompt), tuple(completion), tuple(logprobs)))
    return tuple(out)


def make_trainer(model_dir, tmp_path, store, **overrides):
    args = dict(
        output_dir=str(tmp_path / "run"),
        batch_size=4,
        per_device_train_batch_size=2,
        learning_rate=1e-3,
        max_steps=1,
        save_strategy="no",
        adapter_history=0,
        report_to="none",
        max_grad_norm=1e9,
        seed=0,
        store_path=str(tmp_path / "store.sqlite"),
    )
    args.update(overrides)
    config = OpenClawConfig(**args)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(model_dir)
    return OpenClawTrainer(
        model=model,
        args=config,
        store=store,
        processing_class=tok,
        peft_config=LoraConfig(**LORA),
        sample_timeout=5,
    )


class GradCapture(TrainerCallback):
    def __init__(self, model):
        self.model, self.grads = model, []

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        self.grads.append(
            {n: p.grad.detach().clone() for n, p in self.model.named_parameters() if p.grad is not None}
        )


def lora_params(model, lora: bool):
    return {n: p.detach().clone() for n, p in model.named_parameters() if ("lora_" in n) == lora}


def direct_grads(model_dir, init_lora, samples, loss_fn):
    """Gradients of ``loss_fn(logp, logits, batch, mask)`` for a fresh PEFT model holding ``init_lora``."""
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model = get_peft_model(base, LoraConfig(**LORA))
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_" in n:
                p.copy_(init_lora[n])
    batch = collate_samples(samples, pad_token_id=0)
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
    att = torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1)
    logits = model(input_ids=ids, attention_mask=att).logits[:, batch["prompt_ids"].size(1) - 1 : -1]
    logp = torch.log_softmax(logits, -1).gather(-1, batch["completion_ids"][..., None]).squeeze(-1)
    loss_fn(logp, logits, batch, batch["completion_mask"].float()).backward()
    return {n: p.grad for n, p in model.named_parameters() if p.grad is not None}


def train_and_capture(model_dir, tmp_path, samples, **overrides):
    store = Store(tmp_path / "store.sqlite")
    for s in samples:
        store.queue.add_sample(s)
    trainer = make_trainer(model_dir, tmp_path, store, **overrides)
    init = lora_params(trainer.model, True)
    capture = GradCapture(trainer.model)
    trainer.add_callback(capture)
    trainer.train()
    return trainer, init, capture.grads[0]
