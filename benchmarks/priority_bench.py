"""Serving ahead of learning: chat latency behind a queue of teacher scoring and judge votes, HF engine.

    .venv/bin/python benchmarks/priority_bench.py                 # tiny model, 3 rounds
    .venv/bin/python benchmarks/priority_bench.py --rounds 5 --score-calls 8

Each round measures one short chat request (4 greedy tokens) twice on the same engine: alone (idle), and sent
0.2 s after ``--score-calls`` teacher scoring calls (``--pairs`` x 400-token pairs each) and one batch of
``--judge-rows`` judge votes were queued with ``priority="learn"``. Printed: the median idle latency, the
median latency behind the queue, the median time the learning work took, and two ratios measured in the same
run: ``queued / idle`` (what serving pays for learning: one bounded batch at most) and ``queued / learning``
(how early the chat is answered; 1.0 would mean "after all the learning work", a FIFO engine).
Results go to ``benchmarks/results/priority_bench_<time>.json`` (git-ignored) unless ``--out`` is given.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _results import write_results  # noqa: E402  (benchmarks/ is on sys.path from here on)
from _smoke import parse_args  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def chat_latency(engine, prompt: list[int]) -> float:
    from openclaw_trl.engines.base import GenerationRequest, SamplingParams

    started = time.monotonic()
    engine.generate([GenerationRequest(prompt, SamplingParams(temperature=0.0, max_new_tokens=4))])
    return time.monotonic() - started


def queued_round(engine, prompt: list[int], args) -> tuple[float, float]:
    """``(chat latency, learning time)`` with the learning queue in the engine before the chat arrives."""
    from openclaw_trl.engines.base import GenerationRequest, SamplingParams

    pair = (prompt * 400)[:400]
    judge = GenerationRequest(prompt, SamplingParams(temperature=1.0, max_new_tokens=200), weights="base")
    jobs = [
        lambda: engine.score(
            [pair[:200]] * args.pairs, [pair[200:]] * args.pairs, weights="base", priority="learn"
        )
        for _ in range(args.score_calls)
    ]
    jobs.append(lambda: engine.generate([judge] * args.judge_rows, priority="learn"))
    started = time.monotonic()
    threads = [threading.Thread(target=job) for job in jobs]
    for t in threads:
        t.start()
    time.sleep(0.2)
    latency = chat_latency(engine, prompt)
    for t in threads:
        t.join()
    return latency, time.monotonic() - started


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--score-calls", type=int, default=4)
    parser.add_argument("--pairs", type=int, default=32)
    parser.add_argument("--judge-rows", type=int, default=8)
    parser.add_argument("--out", default=None)
    args = parse_args(parser, argv, smoke=dict(rounds=1, score_calls=1, pairs=4, judge_rows=2))

    from openclaw_trl.engines.hf import HFEngine
    from openclaw_trl.testing import build_tiny_model

    with tempfile.TemporaryDirectory() as tmp:
        build_tiny_model(Path(tmp) / "tiny")
        engine = HFEngine(Path(tmp) / "tiny", dtype="float32")
        try:
            prompt = engine.tokenizer.encode("hello there, how are you?", add_special_tokens=False)
            chat_latency(engine, prompt)  # warm-up
            idle, queued, learning = [], [], []
            for _ in range(args.rounds):
                idle.append(chat_latency(engine, prompt))
                latency, took = queued_round(engine, prompt, args)
                queued.append(latency)
                learning.append(took)
        finally:
            engine.close()
    report = {
        "settings": vars(args),
        "idle_s": statistics.median(idle),
        "queued_s": statistics.median(queued),
        "learning_s": statistics.median(learning),
    }
    report["queued_over_idle"] = report["queued_s"] / report["idle_s"]
    report["queued_over_learning"] = report["queued_s"] / report["learning_s"]
    print(
        f"chat alone {report['idle_s']:.3f} s | behind the learning queue {report['queued_s']:.3f} s | "
        f"learning work {report['learning_s']:.2f} s\n"
        f"queued / idle = {report['queued_over_idle']:.2f}   queued / learning = {report['queued_over_learning']:.3f}"
    )
    write_results(report, "priority_bench", args.out)
    return report


if __name__ == "__main__":
    main()
