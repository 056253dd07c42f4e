"""Update time of ``OpenClawTrainer`` vs a stock TRL ``GRPOTrainer`` on the same tokens; publish vs merge-and-push.

    .venv/bin/python benchmarks/trainer_bench.py --quick    # tiny + a short 0.6B-shaped run (~2-4 min, 2 cores)
    .venv/bin/python benchmarks/trainer_bench.py            # tiny (more steps) + 0.6B-shaped publish only
    .venv/bin/python benchmarks/trainer_bench.py --full     # + 0.6B-shaped update ratio and KD step (~5 min)
    .venv/bin/python benchmarks/trainer_bench.py --smoke    # tiny, 3 small steps: that it runs (~20 s)
    python benchmarks/trainer_bench.py --gpu                # 0.6B-shaped, batch 16 x 512 tokens, on the GPU

Why these peers:

* **Update ratio.** Our trainer is a ``GRPOTrainer`` subclass that replaces generation by samples read from
  the store and builds per-token advantages. The question is what that costs per optimizer step. Both
  trainers get the same model directory, the same LoRA config (r=16, all linear layers), the same batch
  geometry (``batch`` samples per update in micro-batches of ``micro``, one optimizer step per batch), the
  same optimizer, ``loss_type``, clip range and ``num_iterations=1``, and the very same token ids. Generation
  is excluded on both sides: the GRPO peer gets the precomputed ids from a ``rollout_func`` and rewards from a
  reward function that only looks them up. Our samples carry ``policy_version`` = the step that consumes
  them (on-policy, the live case), so neither side recomputes old log-probs. Steps are timed from one
  ``on_step_end`` to the next (data preparation + forward/backward + optimizer + logging); the first step of
  each run is a warm-up and is dropped. Both trainers live in one process, each in a thread, and take one
  optimizer step in turn (``Baton``): paired steps seconds apart see the same machine load, and the figure is
  the median of the per-step ratios (process CPU time on a shared CPU, wall time on a GPU). Where two 0.6B
  models do not fit with room to spare they run one after the other instead.
* **Top-K distillation step** and **stale batch.** The same update with ``w_kd > 0`` (teacher top-K ids on
  every hinted sample), and on samples drawn by an older adapter (truncated IS weight): what they add.
* **Publish vs merge-and-push.** After each step we hand the LoRA state dict to the engine
  (``engine.publish_adapter``). TRL's ``VLLMGeneration.sync_weights`` instead merges the adapter into the base
  weights, pushes every base tensor to the engine (``load_weights``) and unmerges. Without vLLM we time exactly
  that work against the HF engine's own weight copy: ``merge_adapter`` + walk ``named_parameters`` with TRL's
  name fixing + ``copy_`` of every base tensor into the engine's copy + ``unmerge_adapter``.

Peak memory of an update (one trainer alone in the process): the peak RSS over the measured steps (``VmHWM``
after ``malloc_trim`` and a reset via ``/proc/self/clear_refs``; model weights included) on CPU,
``torch.cuda.max_memory_allocated`` on GPU.
Results go to ``benchmarks/results/trainer_bench_<time>.json`` (git-ignored) unless ``--out`` is given.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _results import write_results  # noqa: E402  (benchmarks/ is on sys.path from here on)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

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


# ------------------------------------------------------------------------------------------------ timing
class _Memory:
    """Peak memory over a window: CUDA max allocated, else the process' peak RSS (VmHWM reset at start)."""

    def __init__(self):
        import torch

        self.cuda = torch.cuda.is_available()

    def reset(self) -> None:
        import torch

        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            return
        gc.collect()
        try:  # hand freed heap back to the OS first, or earlier trainers' garbage counts as this one's peak
            import ctypes

            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except (OSError, AttributeError):
            pass
        try:
            Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
        except OSError:
            pass

    def peak_bytes(self) -> int:
        import torch

        if self.cuda:
            return int(torch.cuda.max_memory_allocated())
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
        return 0


class Baton:
    """Lets trainers running in threads take turns, one optimizer step each (only the holder runs).

    Paired steps, adjacent in time, see the same machine load: the ratio of two such steps is far less noisy
    on a shared CPU than the ratio of two runs minutes apart.
    """

    def __init__(self, names: list[str]):
        import threading

        self.cond = threading.Condition()
        self.order, self.done, self.turn = list(names), set(), names[0]

    def wait(self, me: str) -> None:
        with self.cond:
            self.cond.wait_for(lambda: self.turn == me)

    def pass_on(self, me: str, finished: bool = False) -> None:
        with self.cond:
            if finished:
                self.done.add(me)
            live = [n for n in self.order if n not in self.done]
            if live:
                i = self.order.index(me)
                self.turn = next(n for n in self.order[i + 1 :] + self.order[: i + 1] if n not in self.done)
            self.cond.notify_all()


def _available_gib() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return 0.0


def _step_timer(name: str = "", baton: Baton | None = None):
    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        """Wall and CPU time between consecutive optimizer steps; memory peak over all steps but the first.

        With a baton the trainer hands over to its peer after each step and the clock stops while it waits.
        """

        def __init__(self):
            self.times: list[float] = []
            self.cpu: list[float] = []  # process CPU time (all threads): robust when cores are shared
            self.memory = _Memory()
            self.peak = 0

        def _sync(self):
            if self.memory.cuda:
                import torch

                torch.cuda.synchronize()

        def _start(self):
            if baton is not None:
                baton.wait(name)
            self._sync()
            self.t, self.c = time.perf_counter(), time.process_time()

        def on_train_begin(self, args, state, control, **kwargs):
            self._start()

        def on_step_end(self, args, state, control, **kwargs):
            self._sync()
            now = time.perf_counter()
            self.times.append(now - self.t)
            self.cpu.append(time.process_time() - self.c)
            if len(self.times) == 1:
                self.memory.reset()  # measure the steady state, not the warm-up allocations
            else:
                self.peak = max(self.peak, self.memory.peak_bytes())
            if baton is not None:
                baton.pass_on(name)
            self._start()

        def on_train_end(self, args, state, control, **kwargs):
            if baton is not None:
                baton.pass_on(name, finished=True)

    return StepTimer()


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
    timers = {name: _step_timer(name, baton) for name in jobs}
    errors: dict[str, BaseException] = {}
    with tempfile.TemporaryDirectory(prefix="trainer-bench-") as root:
        trainers = {}
        for name, (builder, samples, geometry, steps, kd_topk) in jobs.items():
            tmp = Path(root) / name
            tmp.mkdir()
            if paired:
                trainers[name] = builder(
                    samples=samples,
                    geometry=geometry,
                    steps=steps,
                    tmp=str(tmp),
                    kd_topk=kd_topk,
                    timer=timers[name],
                )
            else:
                trainer = builder(
                    samples=samples,
                    geometry=geometry,
                    steps=steps,
                    tmp=str(tmp),
                    kd_topk=kd_topk,
                    timer=timers[name],
                )
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


def _median_after_warmup(runs: list[dict], key: str = "step_s") -> float:
    return statistics.median([t for r in runs for t in r[key][1:]])


def _median_pair_ratio(ours: list[dict], peer: list[dict], key: str) -> float:
    """Median over rounds and steps of ours[step] / peer[step] (steps taken back to back)."""
    ratios = [a / b for o, p in zip(ours, peer) for a, b in zip(o[key][1:], p[key][1:])]
    return statistics.median(ratios)


def bench_update(
    label: str, geometry: dict, steps: int, rounds: int, kd_topk: int = 20, stale: bool = False, paired=None
) -> dict:
    """OpenClawTrainer vs GRPOTrainer on one model, ``rounds`` times; optionally also OpenClawTrainer with
    top-K KD and on stale batches (sampled by an older adapter: truncated IS weight)."""
    import functools

    from transformers import AutoTokenizer

    path = model_dir(label)
    gpu = _Memory().cuda
    if paired is None:  # side by side wherever the models fit with room to spare (0.6B: ~3 GiB per trainer)
        paired = gpu or label == "tiny" or _available_gib() > 14
    vocab = min(len(AutoTokenizer.from_pretrained(path)), 2000)
    samples = make_samples(steps * geometry["batch"], geometry, vocab)
    kd_samples = (
        make_samples(steps * geometry["batch"], geometry, vocab, kd_topk=kd_topk) if kd_topk else None
    )
    stale_samples = None
    if stale:
        stale_samples = make_samples(steps * geometry["batch"], geometry, vocab)
        for s in stale_samples:
            s.policy_version = -1  # sampled by an adapter older than any this run trains
    runs: dict[str, list[dict]] = {"openclaw": [], "grpo": [], "openclaw_kd": [], "openclaw_stale": []}
    for rnd in range(rounds):
        jobs = {
            "openclaw": (functools.partial(build_openclaw, path), samples, geometry, steps, 0),
            "grpo": (functools.partial(build_grpo, path), samples, geometry, steps, 0),
        }
        if kd_topk:
            jobs["openclaw_kd"] = (
                functools.partial(build_openclaw, path),
                kd_samples,
                geometry,
                steps,
                kd_topk,
            )
        if stale:
            jobs["openclaw_stale"] = (
                functools.partial(build_openclaw, path),
                stale_samples,
                geometry,
                steps,
                0,
            )
        print(
            f"[{label}] round {rnd + 1}/{rounds}: {', '.join(jobs)} ({'paired' if paired else 'in turn'})",
            flush=True,
        )
        for name, res in run_trainers(jobs, paired).items():
            runs[name].append(res)
    ours, stock, kd = runs["openclaw"], runs["grpo"], runs["openclaw_kd"]
    result = {
        "model": label,
        "geometry": {k: geometry[k] for k in ("batch", "micro", "prompt_len", "completion_len")},
        "steps_per_run": steps,
        "rounds": rounds,
        "paired_steps": paired,
        "openclaw_step_s": _median_after_warmup(ours),
        "grpo_step_s": _median_after_warmup(stock),
        "openclaw_cpu_s": _median_after_warmup(ours, "cpu_s"),
        "grpo_cpu_s": _median_after_warmup(stock, "cpu_s"),
        "openclaw_steps": [r["step_s"] for r in ours],
        "grpo_steps": [r["step_s"] for r in stock],
        # Paired runs share one process: its peak RSS covers every trainer, so memory is only per run when in turn.
        "openclaw_peak_bytes": None if paired else max(r["peak_bytes"] for r in ours),
        "grpo_peak_bytes": None if paired else max(r["peak_bytes"] for r in stock),
    }
    result["update_ratio_wall"] = _median_pair_ratio(ours, stock, "step_s")
    result["update_ratio_cpu"] = _median_pair_ratio(ours, stock, "cpu_s")
    # The headline: CPU time where cores are shared (wall time there mostly measures the neighbours), wall on GPU.
    result["update_ratio"] = result["update_ratio_wall"] if gpu else result["update_ratio_cpu"]
    result["update_ratio_basis"] = "wall time" if gpu else "process CPU time"
    if kd:
        key = "step_s" if gpu else "cpu_s"
        result["kd_topk"] = kd_topk
        result["openclaw_kd_step_s"] = _median_after_warmup(kd)
        result["openclaw_kd_cpu_s"] = _median_after_warmup(kd, "cpu_s")
        result["openclaw_kd_peak_bytes"] = None if paired else max(r["peak_bytes"] for r in kd)
        result["kd_over_plain"] = _median_pair_ratio(kd, ours, key)
    if runs["openclaw_stale"]:
        stale_runs = runs["openclaw_stale"]
        result["openclaw_stale_step_s"] = _median_after_warmup(stale_runs)
        result["openclaw_stale_cpu_s"] = _median_after_warmup(stale_runs, "cpu_s")
        result["stale_over_plain"] = _median_pair_ratio(stale_runs, ours, "step_s" if gpu else "cpu_s")
    if paired and label != "tiny":  # memory needs each trainer alone in the process: 2 more steps each
        print(f"[{label}] peak memory, one trainer at a time", flush=True)
        alone = run_trainers({k: (*v[:3], 2, v[4]) for k, v in jobs.items() if k != "openclaw_stale"}, False)
        for name, res in alone.items():
            result[f"{name}_peak_bytes"] = res["peak_bytes"]
    return result


# ------------------------------------------------------------------------------ publish vs merge-and-push
def _median_time(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_publish(label: str, r: int = 16, repeats: int = 3) -> dict:
    """Our adapter publish vs TRL's merge-and-push weight sync, for the same PEFT model and engine."""
    import torch
    from peft import get_peft_model

    from openclaw_trl.engines.hf import HFEngine
    from openclaw_trl.trainer import AdapterSnapshot

    path = model_dir(label)
    cfg = lora_config(r)
    policy = get_peft_model(_load_model(path), cfg)
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if "lora_" in name:
                p.normal_(0, 0.01)  # a trained-looking adapter (B = 0 would make merging trivially cheap)
    engine = HFEngine(path, lora_config=cfg)
    try:
        versions = iter(range(1, 10_000))
        sync = (lambda: torch.cuda.synchronize()) if engine.device.type == "cuda" else (lambda: None)
        policy.to(engine.device)

        snapshot = AdapterSnapshot()

        def publish():  # exactly what OpenClawTrainer.publish does after each optimizer step
            engine.publish_adapter(snapshot(policy), version=next(versions))
            sync()

        # The engine's base tensors stand in for vLLM's weights (what load_weights copies into).
        targets = {
            n.removeprefix("base_model.model.").replace(".base_layer", ""): p
            for n, p in engine.model.lm.named_parameters()
            if "lora_" not in n
        }

        def merge_and_push():  # what VLLMGeneration.sync_weights does with a PEFT model, minus vLLM
            with torch.no_grad():
                policy.merge_adapter()
                for name, param in policy.named_parameters():
                    name = name.removeprefix("base_model.model.").replace(".base_layer", "")
                    if policy.prefix in name or "original_module" in name:
                        continue
                    targets[name].copy_(param.data)
                policy.unmerge_adapter()
            sync()

        publish_s = _median_time(publish, repeats)
        merge_s = _median_time(merge_and_push, repeats)
        adapter_params = sum(p.numel() for n, p in policy.named_parameters() if "lora_" in n)
        base_params = sum(p.numel() for n, p in policy.named_parameters() if "lora_" not in n)
    finally:
        engine.close()
        gc.collect()
    return {
        "model": label,
        "lora_r": r,
        "adapter_params": adapter_params,
        "base_params": base_params,
        "publish_s": publish_s,
        "merge_and_push_s": merge_s,
        "publish_over_merge": publish_s / merge_s,
    }


# ------------------------------------------------------------------------------------------------ report
def _gib(n: int | None) -> str:
    return "-" if n is None else f"{n / 2**30:.2f} GiB"


def print_report(report: dict) -> None:
    print(
        "\n| model | ours s/update (wall, CPU) | GRPOTrainer s/update (wall, CPU) | ratio wall | ratio CPU "
        "| with top-K KD (wall, CPU) | peak mem (ours / GRPO) |"
    )
    print("|---|---|---|---|---|---|---|")
    for u in report["update"]:
        kd = (
            f"{u['openclaw_kd_step_s']:.3f}, {u['openclaw_kd_cpu_s']:.3f}"
            if "openclaw_kd_step_s" in u
            else "-"
        )
        print(
            f"| {u['model']} | {u['openclaw_step_s']:.3f}, {u['openclaw_cpu_s']:.3f} "
            f"| {u['grpo_step_s']:.3f}, {u['grpo_cpu_s']:.3f} | {u['update_ratio_wall']:.3f} "
            f"| {u['update_ratio_cpu']:.3f} | {kd} | {_gib(u['openclaw_peak_bytes'])} / {_gib(u['grpo_peak_bytes'])} |"
        )
    print("\n| model | publish s (ours) | merge-and-push s (TRL) | publish / merge |")
    print("|---|---|---|---|")
    for p in report["publish"]:
        print(
            f"| {p['model']} | {p['publish_s']:.4f} | {p['merge_and_push_s']:.4f} | {p['publish_over_merge']:.3f} |"
        )


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--quick", action="store_true", help="tiny (6 steps x 2 rounds) + a 2-step 0.6B-shaped run"
    )
    ap.add_argument(
        "--full", action="store_true", help="+ the 0.6B-shaped update ratio and KD (~8 min, 2 cores)"
    )
    ap.add_argument(
        "--gpu", action="store_true", help="the 0.6B-shaped model with a larger batch, on the GPU"
    )
    ap.add_argument(
        "--tiny", action="store_true", help="the tiny model in place of the chosen mode's models (rehearsal)"
    )
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="the tiny model, batch 4, 3 steps, one round, KD and stale runs included: that every path runs "
        "(seconds; the figures mean nothing); overrides --quick/--full/--gpu",
    )
    ap.add_argument("--models", default=None, help="comma list: only these models of the chosen mode")
    ap.add_argument("--steps", type=int, default=None, help="optimizer steps per run (first = warm-up)")
    ap.add_argument("--rounds", type=int, default=None, help="alternated OpenClaw/GRPO runs per model")
    ap.add_argument("--kd-topk", type=int, default=None, help="K of the top-K distillation run (0 = skip)")
    ap.add_argument("--no-publish", action="store_true", help="skip publish vs merge-and-push")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)

    flags = {"smoke": args.smoke, "gpu": args.gpu, "full": args.full, "quick": args.quick}
    mode = next((name for name, on in flags.items() if on), "default")
    report: dict = {"mode": mode, "update": [], "publish": []}
    plan = PLANS[mode]
    if args.tiny:
        plan = [("tiny", "tiny" if g else None, *rest) for _, g, *rest in plan]
    for label, geometry_name, steps, rounds, kd_topk, stale, publish in plan:
        if args.models and label not in args.models.split(","):
            continue
        if geometry_name:
            geometry = dict(GEOMETRY[geometry_name])
            steps, rounds = args.steps or steps, args.rounds or rounds
            kd_topk = kd_topk if args.kd_topk is None else args.kd_topk
            report["update"].append(
                bench_update(label, geometry, steps, rounds, kd_topk=kd_topk, stale=stale)
            )
        if publish and not args.no_publish:
            print(f"[{label}] publish vs merge-and-push ...", flush=True)
            report["publish"].append(bench_publish(label))
    print_report(report)
    write_results(report, "trainer_bench", args.out)
    return report


if __name__ == "__main__":
    main()
