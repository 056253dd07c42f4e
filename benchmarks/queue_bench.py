"""The sample queue's work per update, for a young store and for one that has served for weeks.

    python benchmarks/queue_bench.py                       # 2,000 and 200,000 stored samples, 4,096 waiting
    python benchmarks/queue_bench.py --smoke               # seconds: that it runs

A server that learns keeps every sample it ever judged (trained, dropped or waiting). Each update, the trainer
takes a batch from the queue (the drop rules: too stale, another temperature, more than ``max_samples_waiting``
waiting), logs how many wait, marks the batch consumed, and the status route counts the dropped samples by
reason. None of that may grow with the store's age, or a server slows down the longer it runs.

Two stores are built with the same queue (``--waiting`` samples waiting, the bound ``max_samples_waiting``
reached) and a history of ``--small`` and ``--stored`` samples (trained on, 2% of them dropped as stale).
Every timed update first queues ``--arrivals`` new samples (so the backlog rule drops as many), then does the
trainer's and the status route's queue calls; the two stores take their updates in turn, so that the machine's
load weighs on both alike. Printed: the median milliseconds per update for each store and
their ratio (target: at most 1.5, the cost does not follow the store's size); for comparison, the same for a
count by reason that scans the table (``LIKE 'stale:%'``), which does.
Result: ``benchmarks/results/queue_bench_<time>.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _results import write_results
from _smoke import parse_args

from openclaw_trl.records import TrainingSample
from openclaw_trl.store import Store
from openclaw_trl.store.queue import insert_sample

TARGET_RATIO = 1.5
BATCH = 2  # samples per update (the toy recipe's batch_size)


def _sample(i: int, prompt_tokens: int) -> TrainingSample:
    return TrainingSample(
        turn_id=10_000_000 + i,
        prompt_ids=list(range(prompt_tokens)),
        completion_ids=list(range(32)),
        sampling_logprobs=[-0.5] * 32,
        temperature=1.0,
        policy_version=0,
        reward=1.0,
    )


def build(path: Path, history: int, waiting: int, prompt_tokens: int) -> Store:
    """A store holding ``history`` trained samples (2% dropped as stale) and ``waiting`` waiting ones."""
    store = Store(path)
    now = time.time()
    with store.db.tx() as tx:
        for i in range(history + waiting):
            insert_sample(tx, _sample(i, prompt_tokens), origin="direct", now=now)
        tx.execute("UPDATE samples SET consumed_step = id / ? WHERE id <= ?", (BATCH, history))
        tx.execute(
            "UPDATE samples SET consumed_step = NULL, dropped_reason = 'stale: built' WHERE id <= ? AND id % 50 = 0",
            (history,),
        )
    return store


def one_update(
    store: Store, step: int, arrivals: int, waiting: int, prompt_tokens: int, first_id: int
) -> None:
    """What one update and one status poll ask of the queue."""
    for i in range(arrivals):
        store.queue.add_sample(_sample(first_id + i, prompt_tokens))
    batch = store.queue.wait_for_samples(BATCH, timeout=5, temperature=1.0, max_waiting=waiting)
    store.queue.count_waiting()
    store.queue.mark_consumed([s.sample_id for s in batch], step)
    store.queue.count_dropped_stale()
    store.queue.count_dropped_temperature()
    store.queue.count_dropped_backlog()
    store.queue.count_skipped_out_of_memory()


def measure(stores: dict[str, Store], args) -> dict[str, dict]:
    """Updates on the stores in turn (one each, round after round), so that a change in the machine's load
    falls on both alike; per store the median milliseconds of an update and of a scanning count."""
    scan = "SELECT COUNT(*) FROM samples NOT INDEXED WHERE dropped_reason LIKE 'stale:%'"  # a table scan
    times = {name: {"update_ms": [], "scan_count_ms": []} for name in stores}
    next_id = 50_000_000
    for u in range(args.updates):
        for name, (store, history) in stores.items():
            t0 = time.perf_counter()
            one_update(store, history + u, args.arrivals, args.waiting, args.prompt_tokens, next_id)
            times[name]["update_ms"].append((time.perf_counter() - t0) * 1000)
            t0 = time.perf_counter()
            store.db.conn().execute(scan).fetchone()
            times[name]["scan_count_ms"].append((time.perf_counter() - t0) * 1000)
        next_id += args.arrivals
    return {
        name: {
            **{k: statistics.median(v) for k, v in times[name].items()},
            "waiting_after": store.queue.count_waiting(),
            "dropped_backlog": store.queue.count_dropped_backlog(),
        }
        for name, (store, _) in stores.items()
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", type=int, default=2_000, help="samples in the young store's history")
    ap.add_argument("--stored", type=int, default=200_000, help="samples in the old store's history")
    ap.add_argument("--waiting", type=int, default=4096, help="samples waiting (max_samples_waiting)")
    ap.add_argument("--arrivals", type=int, default=4, help="samples queued before each update")
    ap.add_argument("--updates", type=int, default=60, help="timed updates per store")
    ap.add_argument("--prompt-tokens", type=int, default=200, help="prompt length of every sample")
    ap.add_argument("--out", default=None, help="JSON report path")
    args = parse_args(ap, argv, {"small": 200, "stored": 2_000, "waiting": 256, "updates": 5})
    logging.getLogger("openclaw_trl").setLevel(logging.ERROR)  # the backlog rule's warning, every update here
    rows, stores = {}, {}
    with tempfile.TemporaryDirectory(prefix="queue-bench-") as tmp:
        for name, history in (("young", args.small), ("old", args.stored)):
            t0 = time.perf_counter()
            stores[name] = (
                build(Path(tmp) / f"{name}.sqlite", history, args.waiting, args.prompt_tokens),
                history,
            )
            size_mb = sum(f.stat().st_size for f in Path(tmp).glob(f"{name}.sqlite*")) / 2**20  # with its WAL
            rows[name] = {"history": history, "store_mb": size_mb, "built_s": time.perf_counter() - t0}
        for name, figures in measure(stores, args).items():
            rows[name].update(figures)
            stores[name][0].close()
            r = rows[name]
            print(
                f"{name:>5}: {r['history']:>8,} samples stored ({r['store_mb']:6.1f} MB), {args.waiting} waiting: "
                f"{r['update_ms']:7.2f} ms of queue work per update; a scanning count {r['scan_count_ms']:7.2f} ms",
                flush=True,
            )
    ratio = rows["old"]["update_ms"] / rows["young"]["update_ms"]
    scan_ratio = rows["old"]["scan_count_ms"] / rows["young"]["scan_count_ms"]
    verdict = "PASS" if ratio <= TARGET_RATIO else "FAIL"
    print(
        f"{verdict}  queue work per update, old store over young: {ratio:.2f} (target <= {TARGET_RATIO}); "
        f"a scanning count: {scan_ratio:.1f}x ({args.stored / args.small:.0f}x the samples)"
    )
    report = {
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
        "stores": rows,
        "ratio": ratio,
        "scan_count_ratio": scan_ratio,
        "target": TARGET_RATIO,
        "result": verdict,
    }
    write_results(report, "queue_bench", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
