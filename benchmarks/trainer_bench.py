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
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _results import write_results  # noqa: E402  (benchmarks/ is on sys.path from here on)
from _trainer_setup import (  # noqa: E402
    GEOMETRY,
    PLANS,
    Memory,
    _load_model,
    available_gib,
    build_grpo,
    build_openclaw,
    lora_config,
    make_samples,
    median_after_warmup,
    median_pair_ratio,
    model_dir,
    run_trainers,
)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def bench_update(
    label: str, geometry: dict, steps: int, rounds: int, kd_topk: int = 20, stale: bool = False, paired=None
) -> dict:
    """OpenClawTrainer vs GRPOTrainer on one model, ``rounds`` times; optionally also OpenClawTrainer with
    top-K KD and on stale batches (sampled by an older adapter: truncated IS weight)."""
    import functools

    from transformers import AutoTokenizer

    path = model_dir(label)
    gpu = Memory().cuda
    if paired is None:  # side by side wherever the models fit with room to spare (0.6B: ~3 GiB per trainer)
        paired = gpu or label == "tiny" or available_gib() > 14
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
        "openclaw_step_s": median_after_warmup(ours),
        "grpo_step_s": median_after_warmup(stock),
        "openclaw_cpu_s": median_after_warmup(ours, "cpu_s"),
        "grpo_cpu_s": median_after_warmup(stock, "cpu_s"),
        "openclaw_steps": [r["step_s"] for r in ours],
        "grpo_steps": [r["step_s"] for r in stock],
        # Paired runs share one process: its peak RSS covers every trainer, so memory is only per run when in turn.
        "openclaw_peak_bytes": None if paired else max(r["peak_bytes"] for r in ours),
        "grpo_peak_bytes": None if paired else max(r["peak_bytes"] for r in stock),
    }
    result["update_ratio_wall"] = median_pair_ratio(ours, stock, "step_s")
    result["update_ratio_cpu"] = median_pair_ratio(ours, stock, "cpu_s")
    # The headline: CPU time where cores are shared (wall time there mostly measures the neighbours), wall on GPU.
    result["update_ratio"] = result["update_ratio_wall"] if gpu else result["update_ratio_cpu"]
    result["update_ratio_basis"] = "wall time" if gpu else "process CPU time"
    if kd:
        key = "step_s" if gpu else "cpu_s"
        result["kd_topk"] = kd_topk
        result["openclaw_kd_step_s"] = median_after_warmup(kd)
        result["openclaw_kd_cpu_s"] = median_after_warmup(kd, "cpu_s")
        result["openclaw_kd_peak_bytes"] = None if paired else max(r["peak_bytes"] for r in kd)
        result["kd_over_plain"] = median_pair_ratio(kd, ours, key)
    if runs["openclaw_stale"]:
        stale_runs = runs["openclaw_stale"]
        result["openclaw_stale_step_s"] = median_after_warmup(stale_runs)
        result["openclaw_stale_cpu_s"] = median_after_warmup(stale_runs, "cpu_s")
        result["stale_over_plain"] = median_pair_ratio(stale_runs, ours, "step_s" if gpu else "cpu_s")
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
