"""Judge cost per turn (votes x tokens) and the scorer's throughput in turns/s, with m = 1 and m = 3.

    .venv/bin/python benchmarks/judge_bench.py                  # tiny model, HF engine, 16 turns
    .venv/bin/python benchmarks/judge_bench.py --turns 32 --judge-max-tokens 64

Why it is measured this way: the scorer's cost is the judge votes (``m`` per judge, two judges for Combine)
plus one batched teacher pass over the turns that got a hint. A fixed set of ready turns is written to a
temporary store and judged by the real ``Scorer`` with the ``engine`` backend on the HF engine. A random-init
model never writes a parsable vote, so the engine is wrapped: it really generates every vote (the cost is real,
every token counted), and the text handed back to the parser is a valid vote with a hint, so the teacher
pass runs as it does in production. ``turns/s`` is turns judged (votes + teacher + commit) per wall second.
Results go to ``benchmarks/results/judge_bench_<time>.json`` (git-ignored) unless ``--out`` is given.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _results import write_results  # noqa: E402  (benchmarks/ is on sys.path from here on)
from _smoke import parse_args  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

VALID_VOTE = "\\boxed{1}\n[HINT_START]Answer in one short sentence and name the total first.[HINT_END]"
TOPICS = ["apples", "homework", "the weather", "python code", "books", "a price", "a week plan", "music"]


class CountingEngine:
    """Forwards to a real engine, counts tokens, and hands back valid votes (see the module docstring)."""

    def __init__(self, engine, valid_votes: bool = True):
        self.engine, self.tokenizer = engine, engine.tokenizer
        self.valid_ids = self.tokenizer.encode(VALID_VOTE, add_special_tokens=False) if valid_votes else None
        self.counts = {"votes": 0, "vote_prompt_tokens": 0, "vote_generated_tokens": 0}
        self.counts.update({"teacher_calls": 0, "teacher_tokens": 0})

    @property
    def policy_version(self):
        return self.engine.policy_version

    def generate(self, requests, on_token=None, priority="serve", timeout_s=None):
        out = self.engine.generate(requests, on_token, priority=priority, timeout_s=timeout_s)
        self.counts["votes"] += len(requests)
        self.counts["vote_prompt_tokens"] += sum(len(r.prompt_ids) for r in requests)
        self.counts["vote_generated_tokens"] += sum(len(c.token_ids) for c in out)
        if self.valid_ids is not None:
            for c in out:
                c.token_ids = list(self.valid_ids)
        return out

    def score(self, prompt_ids, completion_ids, **kwargs):
        self.counts["teacher_calls"] += 1
        self.counts["teacher_tokens"] += sum(len(p) + len(c) for p, c in zip(prompt_ids, completion_ids))
        return self.engine.score(prompt_ids, completion_ids, **kwargs)

    def publish_adapter(self, adapter, version):
        return self.engine.publish_adapter(adapter, version)


def fill_store(store, tokenizer, n: int, completion_len: int, seed: int = 0) -> None:
    """``n`` ready turns: a short conversation, a completion of random ids, and a user reply as next state."""
    from openclaw_trl.chat import render_prompt_ids
    from openclaw_trl.records import ServedTurn

    rng = random.Random(seed)
    words = "the total is five apples and three books so we add them for a week of homework".split()
    for i in range(n):
        session = store.conversations.open_session(f"bench-{i}")
        topic = TOPICS[i % len(TOPICS)]
        messages = [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": f"Tell me about {topic}, and add 12 + {i}."},
        ]
        text = " ".join(rng.choice(words) for _ in range(completion_len))
        completion = tokenizer.encode(text, add_special_tokens=False)[:completion_len]
        turn = store.conversations.add_turn(
            ServedTurn(
                session_id=session,
                turn_type="main",
                prompt_messages=messages,
                tools=None,
                prompt_ids=render_prompt_ids(tokenizer, messages),
                completion_ids=completion,
                sampling_logprobs=[-1.0] * len(completion),
                completion_text=text,
                temperature=1.0,
                policy_version=0,
                finish_reason="stop",
                trainable=True,
                response_message={"role": "assistant", "content": text},
            )
        )
        store.conversations.attach_next_state(
            turn, {"role": "user", "content": "No, answer in French and be brief."}, "request"
        )


def _warm_up(engine, max_tokens: int) -> None:
    """One generate and one score call before the clock starts (first calls pay lazy initialisation)."""
    from openclaw_trl.engines.base import GenerationRequest, SamplingParams

    prompt = list(range(10, 800))
    sampling = SamplingParams(temperature=1.0, max_new_tokens=max_tokens, seed=0)
    engine.generate([GenerationRequest(prompt, sampling, weights="base")] * 4)
    engine.score([prompt[:100]] * 4, [prompt[100:150]] * 4)


def bench_scorer(model_dir: Path, m: int, turns: int, completion_len: int, judge_max_tokens: int) -> dict:
    from openclaw_trl.engines.hf import HFEngine
    from openclaw_trl.judging import JudgeConfig, Scorer
    from openclaw_trl.store import Store

    engine = HFEngine(model_dir, device=None, max_batch_size=16)
    counting = CountingEngine(engine)
    try:
        with tempfile.TemporaryDirectory(prefix="judge-bench-") as tmp:
            store = Store(Path(tmp) / "store.sqlite")
            fill_store(store, engine.tokenizer, turns, completion_len)
            config = JudgeConfig(
                method="combine",
                backend="engine",
                m=m,
                temperature=1.0,
                max_tokens=judge_max_tokens,
                batch_turns=8,
                max_concurrency=4,
            )
            scorer = Scorer(store, config, engine=counting)
            _warm_up(engine, judge_max_tokens)
            t0 = time.perf_counter()
            judged = scorer.run_until_idle()
            wall = time.perf_counter() - t0
            samples = store.queue.count_waiting()
            scorer.close()
            store.close()
    finally:
        engine.close()
    c = counting.counts
    if not c["votes"]:  # every engine call failed (each is a None vote to the scorer): nothing was measured
        raise RuntimeError("no judge vote reached the engine: the benchmark measured nothing")
    return {
        "m": m,
        "method": "combine",
        "turns": judged,
        "samples": samples,
        "wall_s": wall,
        "turns_per_s": judged / wall,
        "votes_per_turn": c["votes"] / judged,
        "judge_prompt_tokens_per_turn": c["vote_prompt_tokens"] / judged,
        "judge_generated_tokens_per_turn": c["vote_generated_tokens"] / judged,
        "judge_tokens_per_turn": (c["vote_prompt_tokens"] + c["vote_generated_tokens"]) / judged,
        "teacher_tokens_per_turn": c["teacher_tokens"] / judged,
        "teacher_calls": c["teacher_calls"],
        "judge_max_tokens": judge_max_tokens,
    }


def print_table(rows: list[dict]) -> None:
    print(
        "\n| m | votes/turn | judge prompt tok/turn | judge generated tok/turn | teacher tok/turn | turns/s |"
    )
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['m']} | {r['votes_per_turn']:.0f} | {r['judge_prompt_tokens_per_turn']:.0f} "
            f"| {r['judge_generated_tokens_per_turn']:.0f} | {r['teacher_tokens_per_turn']:.0f} | {r['turns_per_s']:.2f} |"
        )


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="tiny", help="tiny or qwen3-0.6b-shaped (built once and cached)")
    ap.add_argument("--model-dir", default=None, help="an existing model directory instead of --model")
    ap.add_argument("--turns", type=int, default=16)
    ap.add_argument("--completion-len", type=int, default=48, help="tokens of each judged response")
    ap.add_argument(
        "--judge-max-tokens", type=int, default=32, help="tokens per vote (random models never stop)"
    )
    ap.add_argument("--m", default="1,3", help="comma list of votes per judge")
    ap.add_argument("--out", default=None)
    args = parse_args(ap, argv, smoke=dict(turns=2, completion_len=8, judge_max_tokens=4))

    if args.model_dir:
        path = Path(args.model_dir)
    else:
        from _trainer_setup import model_dir

        path = model_dir(args.model)
    rows = [
        bench_scorer(path, int(m), args.turns, args.completion_len, args.judge_max_tokens)
        for m in args.m.split(",")
    ]
    print_table(rows)
    report = {"model": args.model_dir or args.model, "rows": rows}
    write_results(report, "judge_bench", args.out)
    return report


if __name__ == "__main__":
    main()
