"""The trainers the benchmarks build, and the samples they train on: shared by ``trainer_bench.py`` (update time vs
TRL's ``GRPOTrainer``), ``guard_bench.py``, ``multi_user_bench.py``, ``agent_bench.py``, ``judge_bench.py`` and
``combine_4b_bench.py``.

``model_dir(label)`` builds (once, in ``OPENCLAW_BENCH_MODELS``) the tiny or a shaped model; ``make_samples`` draws
judged samples of a batch geometry (``GEOMETRY``); ``build_openclaw`` / ``build_grpo`` build the two trainers on the
very same tokens; ``run_trainers`` runs them in one process, one optimizer step in turn (``Baton``), timing each
step (``_step_timing.step_timer``) and reading peak memory (``_step_timing.Memory``).
"""

from __future__ import annotations

import gc
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

from _step_timing import Baton, Memory, available_gib, step_timer  # noqa: F401 - also read from here

MODEL_CACHE = Path(os.environ.get("OPENCLAW_BENCH_MODELS", "/tmp/openclaw-bench-models"))

# Batch geometry per model: samples per update, micro-batch, prompt / completion lengths (varied +-25%).
GEOMETRY = {
    "tiny": dict(batch=16, micro=4, prompt_len=96, completion_len=64),
    "qwen3-0.6b-shaped": dict(batch=4, micro=2, prompt_len=64, completion_len=32),
    "qwen3-0.6b-shaped-gpu": dict(batch=16, micro=4, prompt_len=256, completion_len=256),
    "tiny-smoke": dict(batch=4, micro=2, prompt_len=32, completion_len=16),
}
# What each mode runs: (model, geometry, steps per run, rounds, top-K of the KD run or 0, stale run?, publish?).
PLANS = {
    "quick": [
        ("tiny", "tiny", 6, 2, 20, True, True),
        ("qwen3-0.6b-shaped", "qwen3-0.6b-shaped", 4, 1, 0, False, True),
    ],
    "default": [("tiny", "tiny", 8, 3, 20, True, True), ("qwen3-0.6b-shaped", None, 0, 0, 0, False, True)],
    "full": [
        ("tiny", "tiny", 8, 3, 20, True, True),
        ("qwen3-0.6b-shaped", "qwen3-0.6b-shaped", 5, 1, 20, False, True),
    ],
    "gpu": [("qwen3-0.6b-shaped", "qwen3-0.6b-shaped-gpu", 8, 2, 20, True, True)],
    "smoke": [("tiny", "tiny-smoke", 3, 1, 4, True, True)],  # every code path, seconds: no figure to read
}


def lora_config(r: int = 16):
    from peft import LoraConfig

    return LoraConfig(
        r=r, lora_alpha=2 * r, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM"
    )


def model_dir(label: str) -> Path:
    """Build (once, cached across benchmarks) the tiny or the 0.6B-shaped random model."""
    from openclaw_trl.testing import build_qwen3_0_6b_shaped, build_tiny_model

    path = MODEL_CACHE / label
    if not (path / "config.json").exists():
        t0 = time.perf_counter()
        {"tiny": build_tiny_model, "qwen3-0.6b-shaped": build_qwen3_0_6b_shaped}[label](path)
        print(f"built {label} in {time.perf_counter() - t0:.1f}s -> {path}", flush=True)
    return path


# ----------------------------------------------------------------------------------------------- samples
def make_samples(n: int, geometry: dict, vocab: int, kd_topk: int = 0, seed: int = 0) -> list:
    """``n`` judged samples (Combine: +-1 rewards, every other one with a hint and teacher log-probs).

    ``policy_version`` is the index of the update that consumes the sample, so every batch is on-policy.
    """
    from openclaw_trl.records import TrainingSample

    rng = random.Random(seed)
    out = []
    for i in range(n):
        p = rng.randint(int(geometry["prompt_len"] * 0.75), int(geometry["prompt_len"] * 1.25))
        c = rng.randint(int(geometry["completion_len"] * 0.75), int(geometry["completion_len"] * 1.25))
        completion = [rng.randrange(10, vocab) for _ in range(c)]
        hint = i % 2 == 0
        topk = None
        if hint and kd_topk:
            topk = [[tok] + [rng.randrange(10, vocab) for _ in range(kd_topk - 1)] for tok in completion]
        out.append(
            TrainingSample(
                turn_id=i + 1,
                prompt_ids=[rng.randrange(10, vocab) for _ in range(p)],
                completion_ids=completion,
                sampling_logprobs=[-rng.uniform(0.5, 6.0) for _ in range(c)],
                temperature=1.0,
                policy_version=i // geometry["batch"],
                reward=1.0 if i % 3 else -1.0,
                has_hint=hint,
                hint="be brief" if hint else None,
                teacher_logprobs=[-rng.uniform(0.5, 6.0) for _ in range(c)] if hint else None,
                topk_ids=topk,
                topk_logprobs=[[-2.0 - 0.5 * k for k in range(kd_topk)] for _ in completion]
                if topk
                else None,
            )
        )
    return out


def checkpointing_args(on: bool) -> dict:
    """Activation checkpointing under the name this transformers knows: ``activation_checkpointing`` in recent
    releases, ``gradient_checkpointing`` before (5.17 has only that; an unknown name would be ignored)."""
    from transformers import TrainingArguments

    fields = TrainingArguments.__dataclass_fields__
    return {
        "activation_checkpointing" if "activation_checkpointing" in fields else "gradient_checkpointing": on
    }


def _common_args(geometry: dict, steps: int, out_dir: str) -> dict:
    """Training arguments both trainers share (the same optimizer, clip range, loss and schedule)."""
    import torch

    return dict(
        output_dir=out_dir,
        bf16=torch.cuda.is_available(),  # both alike: float32 weights, bf16 autocast on GPU, float32 on CPU
        per_device_train_batch_size=geometry["micro"],
        max_steps=steps,
        learning_rate=1e-5,
        lr_scheduler_type="constant",
        loss_type="grpo",
        epsilon=0.2,
        epsilon_high=0.28,
        num_iterations=1,
        beta=0.0,
        temperature=1.0,
        max_completion_length=1024,
        save_strategy="no",
        report_to="none",
        logging_steps=1,
        disable_tqdm=True,
        seed=0,
        dataloader_pin_memory=False,
        **checkpointing_args(False),
    )


def openclaw_args(geometry: dict, steps: int, out_dir: str) -> dict:
    """``OpenClawConfig`` arguments: the shared ones plus its own (Combine on the store in ``out_dir``;
    ``adapter_history=0``: no checkpoint per update, as the peer saves nothing either)."""
    args = _common_args(geometry, steps, out_dir)
    args.update(
        batch_size=geometry["batch"],
        method="combine",
        store_path=str(Path(out_dir) / "store.sqlite"),
        adapter_history=0,
        guard=False,  # the update alone, as the peer's (guard_bench.py measures the guard)
    )
    return args


def _load_model(path: Path):
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)


def build_openclaw(
    path: Path, samples: list, geometry: dict, steps: int, tmp: str, kd_topk: int, timer, extra_args=None
):
    """``OpenClawTrainer`` on a store holding exactly the samples of ``steps`` updates (``extra_args``: more
    ``OpenClawConfig`` fields)."""
    from transformers import AutoTokenizer

    from openclaw_trl.config import OpenClawConfig
    from openclaw_trl.store import Store
    from openclaw_trl.trainer import OpenClawTrainer

    store = Store(Path(tmp) / "store.sqlite")
    for s in samples[: steps * geometry["batch"]]:
        store.queue.add_sample(s)
    args = openclaw_args(geometry, steps, tmp)
    if kd_topk:
        args.update(w_kd=0.1, kd_topk=kd_topk)
    args.update(extra_args or {})
    return OpenClawTrainer(
        model=_load_model(path),
        args=OpenClawConfig(**args),
        store=store,
        processing_class=AutoTokenizer.from_pretrained(path),
        peft_config=lora_config(),
        callbacks=[timer],
        sample_timeout=30,
    )


def build_grpo(path: Path, samples: list, geometry: dict, steps: int, tmp: str, kd_topk: int, timer):
    """Stock ``GRPOTrainer``; generation replaced by a ``rollout_func`` handing out the same precomputed ids."""
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    batch = geometry["batch"]
    feed = {"next": 0, "rewards": []}

    def rollout(prompts, trainer):
        start = feed["next"]
        chunk = samples[start : start + len(prompts)]
        feed["next"] += len(prompts)
        feed["rewards"] = [s.reward for s in chunk]
        return {
            "prompt_ids": [list(s.prompt_ids) for s in chunk],
            "completion_ids": [list(s.completion_ids) for s in chunk],
            "logprobs": [list(s.sampling_logprobs) for s in chunk],
        }

    def reward(completions, **kwargs):
        return list(feed["rewards"])

    args = _common_args(geometry, steps, tmp)
    args.update(
        gradient_accumulation_steps=batch // geometry["micro"],
        num_generations=2,  # GRPO's minimum; the group baseline is cheap tensor math
        gradient_checkpointing=False,
    )
    return GRPOTrainer(
        model=_load_model(path),
        reward_funcs=reward,
        args=GRPOConfig(**args),
        train_dataset=Dataset.from_dict({"prompt": ["bench"] * batch}),
        processing_class=AutoTokenizer.from_pretrained(path),
        peft_config=lora_config(),
        callbacks=[timer],
        rollout_func=rollout,
    )


def run_trainers(jobs: dict, paired: bool) -> dict:
    """Train each ``name -> (builder, samples, kd_topk)`` job; returns per-step times and memory per name.

    ``paired``: all trainers live at once, each in a thread, taking one step in turn (see ``Baton``).
    Otherwise one after the other (half the memory: what the 0.6B model needs on a small CPU box).
    """
    import threading

    baton = Baton(list(jobs)) if paired else None
    timers = {name: step_timer(name, baton) for name in jobs}
    errors: dict[str, BaseException] = {}
    with tempfile.TemporaryDirectory(prefix="trainer-bench-") as root:
        trainers = {}
        for name, (builder, samples, geometry, steps, kd_topk) in jobs.items():
            tmp = Path(root) / name
            tmp.mkdir()
            trainer = builder(
                samples=samples,
                geometry=geometry,
                steps=steps,
                tmp=str(tmp),
                kd_topk=kd_topk,
                timer=timers[name],
            )
            if paired:
                trainers[name] = trainer  # trained below, all at once
            else:
                trainer.train()
            del trainer
            gc.collect()

        def train(name):
            try:
                trainers[name].train()
            except BaseException as exc:  # reported below; the peer must not wait forever
                errors[name] = exc
                baton.pass_on(name, finished=True)

        threads = [threading.Thread(target=train, args=(n,), name=f"bench-{n}") for n in trainers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for trainer in trainers.values():
            if hasattr(trainer, "store"):
                trainer.store.close()
        trainers.clear()
        gc.collect()
    if errors:
        raise RuntimeError(f"benchmark trainers failed: {errors}")
    return {n: {"step_s": t.times, "cpu_s": t.cpu, "peak_bytes": t.peak} for n, t in timers.items()}


def median_after_warmup(runs: list[dict], key: str = "step_s") -> float:
    """Median of every run's step times, each run's first (warm-up) step left out."""
    return statistics.median([t for r in runs for t in r[key][1:]])


def median_pair_ratio(ours: list[dict], peer: list[dict], key: str) -> float:
    """Median over rounds and steps of ours[step] / peer[step] (steps taken back to back)."""
    ratios = [a / b for o, p in zip(ours, peer) for a, b in zip(o[key][1:], p[key][1:])]
    return statistics.median(ratios)
