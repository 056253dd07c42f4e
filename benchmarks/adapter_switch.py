"""One adapter per user on the Transformers engine: what a slot switch costs and what sharing slots does to serving.

    python benchmarks/adapter_switch.py                  # tiny model + a Qwen3-0.6B-bodied model (tiny vocabulary)
    python benchmarks/adapter_switch.py --smoke          # the tiny model only, that it runs
    python benchmarks/adapter_switch.py --only-serving   # just the serving p95 comparison below

Measured, per model, with a rank-``--lora-r`` LoRA on every linear projection:

* **switch**: a refill of a device slot from a user's CPU copy (``hf_slots``: pinned memory on CUDA), the mean
  of the engine's own refill timer over alternating requests of 2 users on 1 slot (``switch_times``).
* **serving latency**: greedy chat turns (``--prompt-len`` prompt tokens, ``--new-tokens`` new ones), one after
  the other, round-robin over the users: 1 user (always resident), 4 users on 2 slots (every turn refills a
  slot: the worst case of LRU) and 4 users on 4 slots (all resident). The ratios to the 1-user latency are the
  cost of sharing the engine.
* **concurrent**: 4 callers at once, all one user or one per user (one mixed batch: each row on its own
  adapter): the best wall time of the 4 turns, and its ratio.
* **serving p95**: 4 callers chatting at once, each turn after the previous one returned, for
  ``--serve-turns`` turns per caller per round, over ``--rounds`` rounds; the three engines below take turns
  round by round (order rotated), so a slow moment of a shared machine hits them alike. ``1 adapter``: all 4
  callers are one user; ``4 adapters mixed``: one user each, decoded in one batch (``mix_adapters=True``, the
  default); ``4 adapters separate``: one user each, one batch per adapter (``mix_adapters=False``, the engine's
  former behaviour). Per-turn latency p50 / p95, and each p95's ratio to the ``1 adapter`` one. 4 slots (all
  resident), prompts differ per caller (no shared prefill), prefix cache off.

Random-init models: the figures measure compute and copies, not text quality. Results go to
``benchmarks/results/adapter_switch_<time>.json`` (git-ignored) or ``--out``.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import threading
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # see engine_bench.py: spinning OpenMP teams fight

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _results import write_results  # noqa: E402
from _smoke import parse_args  # noqa: E402
from engine_bench import _adapter, _prompts  # noqa: E402

USERS = ["u0", "u1", "u2", "u3"]


def _body_0_6b(path: Path) -> Path:
    """Qwen3-0.6B's transformer body (28 layers, hidden 1024) with the tiny tokenizer's 2,048-token vocabulary:
    the adapter and the per-token compute of the real model, without its 150k-token LM head."""
    from openclaw_trl.testing import build_model_dir, build_tiny_tokenizer, qwen3_0_6b_config_kwargs

    return build_model_dir(path, build_tiny_tokenizer(), qwen3_0_6b_config_kwargs())


def _engine(model_dir: Path, lora_cfg, slots: int, states: dict, **kwargs):
    from openclaw_trl.engines import create_engine

    engine = create_engine(
        "hf", model_dir, lora_config=lora_cfg, max_adapters=slots, prefix_cache_mb=0, **kwargs
    )
    for version, (name, state) in enumerate(states.items(), start=1):
        engine.publish_adapter(state, version, name=name)
    return engine


def _turn(engine, prompt, name, new_tokens):
    from openclaw_trl.engines import GenerationRequest, SamplingParams

    sp = SamplingParams(temperature=0.0, max_new_tokens=new_tokens)
    return engine.generate([GenerationRequest(prompt, sp, adapter=name)])[0]


def _sequential(engine, users, prompt, turns, new_tokens) -> float:
    """Mean seconds of one turn, round-robin over ``users`` (after one warm-up round)."""
    for name in users:
        _turn(engine, prompt, name, new_tokens)
    times = []
    for i in range(turns):
        t0 = time.perf_counter()
        _turn(engine, prompt, users[i % len(users)], new_tokens)
        times.append(time.perf_counter() - t0)
    return statistics.mean(times)


def _concurrent(engine, users, prompt, new_tokens, repeats) -> float:
    """Best wall seconds of 4 simultaneous turns, caller ``k`` as ``users[k % len(users)]``."""
    best = float("inf")
    for _ in range(repeats + 1):  # the first round warms up
        barrier = threading.Barrier(4)

        def call(k, barrier=barrier):
            barrier.wait()
            _turn(engine, prompt, users[k % len(users)], new_tokens)

        threads = [threading.Thread(target=call, args=(k,)) for k in range(4)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        best = min(best, time.perf_counter() - t0)
    return best


def switch_times(model_dir: Path, lora_cfg, states: dict, prompt, switches: int) -> list[float]:
    """Seconds of each slot refill (the engine's own refill timer, read around each call): 2 users on 1
    slot, alternating one-token scores, so that every call refills; the first 2 calls are left out."""
    engine = _engine(model_dir, lora_cfg, 1, {n: states[n] for n in USERS[:2]})
    times = []
    try:
        for i in range(switches + 2):
            before = engine.model.slot_stats.get("refill_s", 0.0)
            engine.score([prompt[:8]], [[5]], weights="policy", adapter=USERS[i % 2])
            if i >= 2:
                times.append(engine.model.slot_stats["refill_s"] - before)
    finally:
        engine.close()
    return times


def _callers(engine, users, prompts, turns, new_tokens) -> list[float]:
    """Seconds of every turn of 4 callers chatting at once (caller ``k`` as ``users[k % len(users)]`` with
    ``prompts[k]``), each starting its next turn when the previous one returned."""
    latencies: list[float] = []
    barrier = threading.Barrier(4)

    def caller(k):
        barrier.wait()
        for _ in range(turns):
            t0 = time.perf_counter()
            _turn(engine, prompts[k], users[k % len(users)], new_tokens)
            latencies.append(time.perf_counter() - t0)

    threads = [threading.Thread(target=caller, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return latencies


def _quantile(values: list[float], q: float) -> float:
    """The ``q`` quantile, linear between order statistics."""
    xs = sorted(values)
    pos = q * (len(xs) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def serving(model_dir: Path, lora_cfg, states: dict, args) -> dict:
    """The serving p95 comparison of the module docstring."""
    prompts = _prompts(4, args.prompt_len, 2048, seed=1)
    cases = {
        "1 adapter": (USERS[:1], True),
        "4 adapters mixed": (USERS, True),
        "4 adapters separate": (USERS, False),
    }
    engines = {
        case: _engine(model_dir, lora_cfg, 4, {n: states[n] for n in users}, mix_adapters=mix)
        for case, (users, mix) in cases.items()
    }
    latencies: dict[str, list[float]] = {case: [] for case in cases}
    try:
        for case, engine in engines.items():  # warm-up
            _callers(engine, cases[case][0], prompts, 1, args.new_tokens)
        names = list(cases)
        for r in range(args.rounds):
            for case in names[r % 3 :] + names[: r % 3]:
                users = cases[case][0]
                latencies[case] += _callers(engines[case], users, prompts, args.serve_turns, args.new_tokens)
        stats = {case: dict(engine.stats) for case, engine in engines.items()}
    finally:
        for engine in engines.values():
            engine.close()
    out = {}
    for case, xs in latencies.items():
        out[case] = {
            "turns": len(xs),
            "p50_s": _quantile(xs, 0.5),
            "p95_s": _quantile(xs, 0.95),
            "mean_s": statistics.mean(xs),
            "batches": stats[case]["batches"],
            "mixed_batches": stats[case].get("mixed_batches", 0),
        }
    for row in out.values():
        row["p95_ratio"] = row["p95_s"] / out["1 adapter"]["p95_s"]
    return out


def bench(model_dir: Path, label: str, args) -> dict:
    states = {}
    lora_cfg = None
    for name in USERS:
        state, lora_cfg = _adapter(model_dir, args.lora_r)
        states[name] = state
    mb = sum(t.numel() * t.element_size() for t in states["u0"].values()) / 2**20
    prompt = _prompts(1, args.prompt_len, 2048)[0]
    if args.only_serving:
        return {"model": label, "adapter_mb": mb, "serving": serving(model_dir, lora_cfg, states, args)}

    switch_ms = 1000 * statistics.mean(switch_times(model_dir, lora_cfg, states, prompt, args.switches))

    rows = {}
    for case, users, slots in [
        ("1 user", USERS[:1], 2),
        ("4 users / 2 slots", USERS, 2),
        ("4 users / 4 slots", USERS, 4),
    ]:
        engine = _engine(model_dir, lora_cfg, slots, {n: states[n] for n in users})
        try:
            before = engine.model.slot_stats.get("refills", 0)
            seq = _sequential(engine, users, prompt, args.turns, args.new_tokens)
            refills = engine.model.slot_stats["refills"] - before
            conc = _concurrent(engine, users, prompt, args.new_tokens, args.repeats)
        finally:
            engine.close()
        rows[case] = {"turn_s": seq, "refills": refills, "concurrent_4_s": conc}
    one = rows["1 user"]
    for row in rows.values():
        row["turn_ratio"] = row["turn_s"] / one["turn_s"]
        row["concurrent_ratio"] = row["concurrent_4_s"] / one["concurrent_4_s"]
    result = {"model": label, "adapter_mb": mb, "switch_ms": switch_ms, "cases": rows}
    result["serving"] = serving(model_dir, lora_cfg, states, args)
    return result


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="tiny,qwen3-0.6b-body")
    ap.add_argument("--model-cache", default="/tmp/openclaw-bench-models", help="where built models are kept")
    ap.add_argument("--lora-r", type=int, default=16)
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=8)
    ap.add_argument("--turns", type=int, default=12)
    ap.add_argument("--switches", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--serve-turns", type=int, default=4, help="turns per caller per round (serving p95)")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds (serving p95)")
    ap.add_argument("--only-serving", action="store_true", help="run the serving p95 comparison alone")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--out", default=None)
    args = parse_args(
        ap,
        argv,
        smoke=dict(models="tiny", turns=4, switches=2, repeats=1, new_tokens=2, serve_turns=1, rounds=1),
    )
    if args.serve_turns < 1 or args.rounds < 1 or args.threads < 0:
        ap.error("--serve-turns and --rounds must be >= 1, --threads >= 0")

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)

    from openclaw_trl.testing import build_tiny_model

    builders = {"tiny": build_tiny_model, "qwen3-0.6b-body": _body_0_6b}
    results = []
    for label in args.models.split(","):
        path = Path(args.model_cache) / label
        if not (path / "config.json").exists():
            builders[label](path)
        print(f"benchmarking {label} ...", flush=True)
        results.append(bench(path, label, args))

    print("\n| model | 4 callers | turns | p50 s | p95 s | p95 ratio | batches (mixed) |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        for case, row in r["serving"].items():
            print(
                f"| {r['model']} | {case} | {row['turns']} | {row['p50_s']:.3f} | {row['p95_s']:.3f} | "
                f"{row['p95_ratio']:.2f} | {row['batches']} ({row['mixed_batches']}) |"
            )
    print(
        f"\n| model | LoRA r={args.lora_r} MB | switch ms | case | turn s (ratio) | 4 concurrent s (ratio) |"
    )
    print("|---|---|---|---|---|---|")
    for r in results:
        for case, row in r.get("cases", {}).items():
            print(
                f"| {r['model']} | {r['adapter_mb']:.1f} | {r['switch_ms']:.2f} | {case} | "
                f"{row['turn_s']:.3f} ({row['turn_ratio']:.2f}) | "
                f"{row['concurrent_4_s']:.3f} ({row['concurrent_ratio']:.2f}) |"
            )
    meta = {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "machine": platform.machine(),
        "device": "cuda" if torch.cuda.is_available() else "cpu",
        "args": vars(args),
    }
    write_results({"meta": meta, "results": results}, "adapter_switch", args.out)


if __name__ == "__main__":
    main()
