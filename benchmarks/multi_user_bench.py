"""One base, one adapter per user: what 4 users cost each other, on the tiny and a Qwen3-0.6B-shaped model (CPU).

    python benchmarks/multi_user_bench.py                   # tiny + qwen3-0.6b-shaped
    python benchmarks/multi_user_bench.py --models tiny     # the tiny model only
    python benchmarks/multi_user_bench.py --smoke           # that it runs, in seconds

Three figures, each a ratio of two sides measured in the same run, interleaved, so that a shared or throttled
CPU moves both sides alike:

1. **Update time** (``_multi_user_train.py``): the trainers of 4 users built as a run with users builds them
   (one ``SharedBase``, a copy per user, one shared ``UpdateTurns``, one HF engine with 4 slots), each
   training in its own thread. The first user's ``time/update_s`` while all 4 have batches ready vs while it
   alone has (median of each; the wait for its turn, ``schedule/turn_wait_s``, is reported apart). Target
   <= 1.1: taking turns must not slow an update down. Also the throughput (updates/s of the 4-user phase vs
   the alone phase: about 1, since the updates run one at a time) and the fairness: the longest run of
   consecutive updates of one user while another had a batch ready (1 = round-robin).
2. **Serving** (``adapter_switch.py``'s engine and turn): the p95 latency of greedy chat turns, one after the
   other, round-robin over 4 users' adapters on 4 slots (all resident) and on 2 slots (every turn refills a
   slot from its CPU copy), vs 1 user; the three engines take turns, one turn each, so the cases are
   interleaved turn by turn. Target <= 1.3 for both. Also the p95 and median of a slot refill alone
   (``adapter_switch.switch_times``).
3. **Memory per extra user**: trainer side, from the tensors (the LoRA parameters, their float32 gradients
   and AdamW's two moments) and as the resident memory added by building one more trainer; engine side, a
   device slot plus the CPU copy of the adapter (``hf_slots``). Each also as a fraction of the base model's
   bytes.

Random-init models: the figures measure compute, copies and scheduling, not text quality. ``--threads``
torch threads (1 by default: a shared machine). Results go to ``benchmarks/results/multi_user_<time>.json``
(git-ignored) or ``--out``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # see engine_bench.py: spinning OpenMP teams fight
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import _multi_user_train as mt  # noqa: E402
from _results import write_results  # noqa: E402
from _smoke import parse_args  # noqa: E402
from _trainer_setup import model_dir  # noqa: E402
from adapter_switch import USERS, _engine, _turn, switch_times  # noqa: E402
from engine_bench import _adapter, _prompts  # noqa: E402

VOCAB = 2048  # the tiny tokenizer's: both models' token ids are drawn from it
# Samples per update, micro-batch, prompt / completion lengths (+-25%) of the update-time figure.
GEOMETRY = {
    "tiny": dict(batch=8, micro=4, prompt_len=64, completion_len=32),
    "qwen3-0.6b-shaped": dict(batch=2, micro=2, prompt_len=48, completion_len=24),
    "smoke": dict(batch=2, micro=2, prompt_len=16, completion_len=8),
}


def p95(xs: list[float]) -> float:
    """The 95th percentile, linearly interpolated between the two nearest of the sorted values."""
    s = sorted(xs)
    k = 0.95 * (len(s) - 1)
    lo = int(k)
    return s[lo] + (s[min(lo + 1, len(s) - 1)] - s[lo]) * (k - lo)


# --------------------------------------------------------------------------------------------- 1. update time
def bench_updates(path: Path, geometry: dict, args) -> dict:
    n, k, rounds = args.users, args.batches, args.rounds
    # a warm-up update each, then per round k alone (user 0) and k shared (everyone)
    updates = [1 + 2 * rounds * k] + [1 + rounds * k] * (n - 1)
    with tempfile.TemporaryDirectory(prefix="multi-user-") as tmp:
        shared, engine, turns, users, rss = mt.build_users(path, n, geometry, updates, tmp, args.lora_r)
        try:
            mt.start(users)
            mt.phase(users, users, 1, geometry, VOCAB)  # warm-up: every user's first update
            kinds, walls, orders = [], {"alone": [], "shared": []}, []
            for r in range(rounds):
                for kind in ("alone", "shared") if r % 2 == 0 else ("shared", "alone"):  # A B B A ...
                    before = len(turns.order)
                    who = users[:1] if kind == "alone" else users
                    walls[kind].append(mt.phase(users, who, k, geometry, VOCAB))
                    kinds += [kind] * k
                    if kind == "shared":
                        orders.append(turns.order[before:])
            for user in users:
                user.thread.join(60)
            logs = [mt.update_logs(u.trainer) for u in users]
            memory = mt.memory(shared, engine, users, rss)
        finally:
            engine.close()
    first = logs[0][1:]  # user 0's updates after its warm-up, in the order of ``kinds``
    alone = [e["update_s"] for e, kind in zip(first, kinds) if kind == "alone"]
    together = [e["update_s"] for e, kind in zip(first, kinds) if kind == "shared"]
    waits = [e["turn_wait_s"] for e, kind in zip(first, kinds) if kind == "shared"]
    everyone = [e["update_s"] for log in logs[1:] for e in log[1:]] + together
    per_s = {kind: [(k * (n if kind == "shared" else 1)) / w for w in ws] for kind, ws in walls.items()}
    return {
        "geometry": geometry,
        "users": n,
        "rounds": rounds,
        "batches_per_phase": k,
        "alone_update_s": alone,
        "shared_update_s": together,
        "update_ratio": statistics.median(together) / statistics.median(alone),
        "all_users_shared_update_s_median": statistics.median(everyone),
        "turn_wait_s_mean": statistics.mean(waits),
        "updates_per_s": {kind: statistics.median(v) for kind, v in per_s.items()},
        "throughput_ratio": statistics.median(per_s["shared"]) / statistics.median(per_s["alone"]),
        "shared_orders": orders,
        "max_consecutive": max(mt.max_streak(o, {u.name: k for u in users}) for o in orders),
        "memory": memory,
    }


# ------------------------------------------------------------------------------------------------- 2. serving
def bench_serving(path: Path, args) -> dict:
    states, lora_cfg = {}, None
    for name in USERS:
        states[name], lora_cfg = _adapter(path, args.lora_r)
    prompt = _prompts(1, args.prompt_len, VOCAB)[0]
    switch = switch_times(path, lora_cfg, states, prompt, args.switches)
    cases = {  # name: (users, slots), as adapter_switch.bench's cases
        "1 user": (USERS[:1], 2),
        "4 users / 4 slots": (USERS, 4),
        "4 users / 2 slots": (USERS, 2),
    }
    engines = {
        case: _engine(path, lora_cfg, slots, {u: states[u] for u in users})
        for case, (users, slots) in cases.items()
    }
    times = {case: [] for case in cases}
    try:
        refills0 = {}
        for i in range(-len(USERS), args.turns):  # one warm-up turn per user first
            if i == 0:
                refills0 = {case: e.model.slot_stats.get("refills", 0) for case, e in engines.items()}
            for case, (users, _slots) in cases.items():  # interleaved: one turn of each case in turn
                t0 = time.perf_counter()
                _turn(engines[case], prompt, users[i % len(users)], args.new_tokens)
                if i >= 0:
                    times[case].append(time.perf_counter() - t0)
        refills = {case: e.model.slot_stats["refills"] - refills0[case] for case, e in engines.items()}
    finally:
        for engine in engines.values():
            engine.close()
    one = p95(times["1 user"])
    rows = {
        case: {
            "p95_s": p95(ts),
            "median_s": statistics.median(ts),
            "p95_ratio": p95(ts) / one,
            "refills": refills[case],
        }
        for case, ts in times.items()
    }
    return {
        "turns": args.turns,
        "prompt_len": args.prompt_len,
        "new_tokens": args.new_tokens,
        "switch_p95_ms": 1000 * p95(switch),
        "switch_median_ms": 1000 * statistics.median(switch),
        "switches": len(switch),
        "cases": rows,
    }


# --------------------------------------------------------------------------------------------------- report
def print_report(results: list[dict], load: tuple) -> None:
    print(f"\nload average at start {load[0]:.2f}, {load[1]:.2f}, {load[2]:.2f}")
    for r in results:
        u, s, m = r["updates"], r["serving"], r["updates"]["memory"]
        print(f"\n## {r['model']}")
        print(
            f"update time, user 0 with {u['users']} users / alone: {u['update_ratio']:.3f} "
            f"(median {statistics.median(u['shared_update_s']):.3f} s vs {statistics.median(u['alone_update_s']):.3f} s; "
            f"{len(u['alone_update_s'])}+{len(u['shared_update_s'])} updates) target <= 1.1 "
            f"[{'PASS' if u['update_ratio'] <= 1.1 else 'FAIL'}]"
        )
        print(
            f"  turn wait (excluded) mean {u['turn_wait_s_mean']:.3f} s; all users' median update "
            f"{u['all_users_shared_update_s_median']:.3f} s"
        )
        print(
            f"  throughput {u['updates_per_s']['shared']:.3f} vs {u['updates_per_s']['alone']:.3f} updates/s: "
            f"ratio {u['throughput_ratio']:.3f}; fairness: max consecutive updates of one user while others "
            f"were ready = {u['max_consecutive']}; orders {[''.join(x[1:] for x in o) for o in u['shared_orders']]}"
        )
        print(
            f"slot refill p95 {s['switch_p95_ms']:.2f} ms (median {s['switch_median_ms']:.2f}, {s['switches']} refills)"
        )
        for case, row in s["cases"].items():
            verdict = (
                ""
                if case == "1 user"
                else f" target <= 1.3 [{'PASS' if row['p95_ratio'] <= 1.3 else 'FAIL'}]"
            )
            print(
                f"  serving p95 {case}: {row['p95_s']:.3f} s (median {row['median_s']:.3f}), ratio "
                f"{row['p95_ratio']:.3f}, {row['refills']} refills over {s['turns']} turns{verdict}"
            )
        gib = 2**20
        print(
            f"memory per extra user (base {m['base_bytes'] / gib:.1f} MiB): trainer tensors "
            f"{m['trainer_tensor_bytes'] / gib:.2f} MiB (LoRA {m['lora_param_bytes'] / gib:.2f} + grads "
            f"{m['grad_bytes'] / gib:.2f} + Adam {m['adam_bytes'] / gib:.2f}) = {m['trainer_tensor_over_base']:.4f} "
            f"of the base; RSS per trainer built {(m['trainer_rss_delta_bytes'] or 0) / gib:.1f} MiB = "
            f"{m['trainer_rss_delta_over_base'] or 0:.4f}; engine {m['engine_bytes'] / gib:.2f} MiB (slot "
            f"{m['engine_slot_bytes'] / gib:.2f} + CPU copy {m['engine_cpu_copy_bytes'] / gib:.2f}) = "
            f"{m['engine_over_base']:.4f}"
        )


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="tiny,qwen3-0.6b-shaped")
    ap.add_argument("--users", type=int, default=4, help="users of the update-time figure (at least 2)")
    ap.add_argument("--rounds", type=int, default=4, help="alone / shared phase pairs (A B B A ...)")
    ap.add_argument("--batches", type=int, default=2, help="batches fed per user and phase (a backlog: >= 2)")
    ap.add_argument("--turns", type=int, default=40, help="timed serving turns per case")
    ap.add_argument("--switches", type=int, default=40, help="timed slot refills")
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=8)
    ap.add_argument("--lora-r", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    ap.add_argument("--out", default=None)
    args = parse_args(
        ap, argv, smoke=dict(models="tiny", rounds=1, batches=2, turns=4, switches=2, new_tokens=2)
    )
    for name in (
        "users",
        "rounds",
        "batches",
        "turns",
        "switches",
        "prompt_len",
        "new_tokens",
        "lora_r",
        "threads",
    ):
        if getattr(args, name) < (2 if name == "users" else 1):
            ap.error(f"--{name.replace('_', '-')} must be at least {2 if name == 'users' else 1}")
    models = [m for m in args.models.split(",") if m]
    unknown = sorted(set(models) - {"tiny", "qwen3-0.6b-shaped"})
    if unknown or not models:
        ap.error(f"--models: unknown {unknown or 'empty'}; known: tiny, qwen3-0.6b-shaped")

    import torch

    torch.set_num_threads(args.threads)
    load = os.getloadavg()
    results, out = [], args.out
    for label in models:
        path = model_dir(label)
        geometry = GEOMETRY["smoke" if args.smoke else label]
        print(f"benchmarking {label} ...", flush=True)
        t0 = time.perf_counter()
        updates = bench_updates(path, geometry, args)
        serving = bench_serving(path, args)
        results.append(
            {"model": label, "updates": updates, "serving": serving, "seconds": time.perf_counter() - t0}
        )
        print_report(results[-1:], load)
        report = {
            "meta": {
                "torch": torch.__version__,
                "threads": torch.get_num_threads(),
                "cores": os.cpu_count(),
                "load_average_start": load,
                "load_average_end": os.getloadavg(),
                "args": vars(args),
            },
            "results": results,
        }
        out = write_results(report, "multi_user", out)  # after each model: a later failure keeps these
    return report


if __name__ == "__main__":
    main()
