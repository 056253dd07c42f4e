"""Child of the multi-process parity test: one update on a fixed batch, under ``torchrun`` or alone.

``python _multiprocess_train.py MODEL_DIR OUT_DIR`` trains one update per ``loss_type`` (grpo, dapo) on the
same 4 samples, written into a fresh SQLite store by the main process, and saves the adapter tensors after
that update to ``OUT_DIR/<loss_type>.safetensors`` (main process). Only the main process opens the store.
"""

import sys
from pathlib import Path

import torch
from accelerate import PartialState
from peft import LoraConfig, get_peft_model_state_dict
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from openclaw_trl.config import OpenClawConfig
from openclaw_trl.records import TrainingSample
from openclaw_trl.store import Store
from openclaw_trl.trainer import OpenClawTrainer

LORA = dict(r=8, lora_alpha=16, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM")


def samples() -> list[TrainingSample]:
    """Equal prompt lengths (left padding would shift positions), completions of 3, 5, 7 and 9 tokens: the
    two halves of the batch hold different token counts, which a per-process normalisation would show."""
    gen = torch.Generator().manual_seed(0)
    out = []
    for i in range(4):
        n = 3 + 2 * i
        out.append(
            TrainingSample(
                turn_id=100 + i,
                prompt_ids=torch.randint(10, 1500, (8,), generator=gen).tolist(),
                completion_ids=torch.randint(10, 1500, (n,), generator=gen).tolist(),
                sampling_logprobs=(-torch.rand(n, generator=gen) * 5).tolist(),
                temperature=1.0,
                policy_version=0,
                reward=1.0 if i % 2 == 0 else -1.0,
                has_hint=i == 1,
                teacher_logprobs=(-torch.rand(n, generator=gen) * 5).tolist() if i == 1 else None,
            )
        )
    return out


def train_once(model_dir: str, out: Path, loss_type: str) -> None:
    config = OpenClawConfig(
        output_dir=str(out / loss_type),
        use_cpu=True,  # torch DDP on gloo across the CPU processes
        batch_size=4,
        per_device_train_batch_size=4,
        loss_type=loss_type,
        optim="sgd",  # the update is proportional to the gradient (Adam's first step hides its scale)
        learning_rate=1.0,
        max_steps=1,
        max_grad_norm=1e9,
        save_strategy="no",
        adapter_history=0,
        report_to="none",
        seed=0,
        store_path=str(out / f"{loss_type}.sqlite"),
    )
    state = PartialState()
    store = None
    if state.is_main_process:
        store = Store(config.store_path)
        for s in samples():
            store.queue.add_sample(s)
    state.wait_for_everyone()
    trainer = OpenClawTrainer(
        model=AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32),
        args=config,
        store=store,
        processing_class=AutoTokenizer.from_pretrained(model_dir),
        peft_config=LoraConfig(**LORA),
        sample_timeout=60,
    )
    trainer.train()
    if state.is_main_process:
        adapter = get_peft_model_state_dict(trainer.accelerator.unwrap_model(trainer.model))
        save_file(
            {k: v.detach().contiguous() for k, v in adapter.items()}, str(out / f"{loss_type}.safetensors")
        )
        consumed = {s.consumed_step for s in store.queries.iter_samples(include_private=True)}
        assert consumed == {1}, consumed
    state.wait_for_everyone()


if __name__ == "__main__":
    model_dir, out = sys.argv[1], Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    for loss_type in ("grpo", "dapo"):
        train_once(model_dir, out, loss_type)
