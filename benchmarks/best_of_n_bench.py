"""Best-of-N's cost on the HF engine: a served turn with N = 1, N = 4 (one request, ``n = 4``), and N = 4 as 4
separate requests.

    .venv/bin/python benchmarks/best_of_n_bench.py                  # tiny model, 3 rounds
    .venv/bin/python benchmarks/best_of_n_bench.py --model-dir DIR --prompt-tokens 512 --new-tokens 64

Each round, on one engine, with the same chat prompt (``--prompt-tokens`` tokens) and ``--new-tokens`` sampled
tokens per candidate (T = 1; EOS is left to chance, so the token counts are measured, not assumed):

* ``n1``: one request, one candidate: the time of a served turn without Best-of-N, and its time to the first
  streamed token;
* ``n4``: one request with ``n = 4``: the prompt is prefilled once and the 4 rows decode together;
* ``separate``: the same 4 candidates as 4 requests one after another (what a client pays to get 4 answers
  from a server without ``n``);
* ``quick``: the engine quick judge (base weights, greedy, 8 tokens) rating the 4 candidates, the rest of a
  Best-of-N turn's work before its reply can start.

Printed: the median seconds and tokens/s of each, the ratio ``n4 / separate`` (what the shared prefill and
batched decode buy; below 1 is cheaper), and the time to first token of a streamed reply: ``n1``'s first token
vs a Best-of-4 reply's, which starts only after ``n4 + quick``. Results go to
``benchmarks/results/best_of_n_bench_<time>.json`` (git-ignored) unless ``--out`` is given.
"""

from __future__ import annotations

import argparse
import os
import statistics
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

N = 4


def chat_prompt(tokenizer, tokens: int) -> list[int]:
    """A rendered one-message chat prompt of about ``tokens`` tokens."""
    from openclaw_trl.chat import render_prompt_ids

    words = "Tell me about tea, its history, how it is grown and how people drink it around the world. "
    text = words
    while len(render_prompt_ids(tokenizer, [{"role": "user", "content": text}])) < tokens:
        text += words
    return render_prompt_ids(tokenizer, [{"role": "user", "content": text}])


def timed(fn):
    started = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - started


def one_round(engine, quick_judge, prompt: list[int], new_tokens: int, seed: int) -> dict:
    """The four measurements of one round (module docstring)."""
    from openclaw_trl.engines.base import GenerationRequest, SamplingParams
    from openclaw_trl.judging import QuickJudgeInput

    def request(n: int, s: int) -> GenerationRequest:
        return GenerationRequest(
            prompt, SamplingParams(temperature=1.0, max_new_tokens=new_tokens, seed=s, n=n)
        )

    first: list[float] = []
    started = time.perf_counter()
    n1, n1_s = timed(
        lambda: engine.generate(
            [request(1, seed)], on_token=lambda i, t: first or first.append(time.perf_counter() - started)
        )
    )
    n4, n4_s = timed(lambda: engine.generate([request(N, seed)]))
    separate, separate_s = timed(lambda: [engine.generate([request(1, seed + k)])[0] for k in range(N)])
    replies = [engine.tokenizer.decode(c.token_ids, skip_special_tokens=True) for c in n4]
    messages = [{"role": "user", "content": engine.tokenizer.decode(prompt, skip_special_tokens=True)}]
    items = [QuickJudgeInput(messages, reply, "bench") for reply in replies]
    _, quick_s = timed(lambda: quick_judge.scores(items))
    return {
        "n1_s": n1_s,
        "n1_first_token_s": first[0] if first else n1_s,
        "n1_tokens": len(n1[0].token_ids),
        "n4_s": n4_s,
        "n4_tokens": sum(len(c.token_ids) for c in n4),
        "separate_s": separate_s,
        "separate_tokens": sum(len(c.token_ids) for c in separate),
        "quick_s": quick_s,
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--prompt-tokens", type=int, default=256)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--model-dir", default=None, help="a model directory (default: the tiny model)")
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads (1: steadier numbers on a shared machine)"
    )
    parser.add_argument("--out", default=None)
    args = parse_args(parser, argv, smoke=dict(rounds=1, prompt_tokens=32, new_tokens=4))

    import torch

    from openclaw_trl.engines.hf import HFEngine
    from openclaw_trl.judging import QuickJudgeConfig, make_quick_judge
    from openclaw_trl.testing import build_tiny_model

    torch.set_num_threads(args.threads)

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = args.model_dir or build_tiny_model(Path(tmp) / "tiny")
        engine = HFEngine(model_dir, dtype="float32", max_batch_size=8)
        quick_judge = make_quick_judge(
            QuickJudgeConfig(backend="engine"), engine=engine, tokenizer=engine.tokenizer
        )
        try:
            prompt = chat_prompt(engine.tokenizer, args.prompt_tokens)
            prefills = engine.stats["prefill_rows"]
            one_round(engine, quick_judge, prompt, 4, seed=0)  # warm-up
            rounds = [
                one_round(engine, quick_judge, prompt, args.new_tokens, seed=100 * r)
                for r in range(args.rounds)
            ]
            prefills_per_round = (engine.stats["prefill_rows"] - prefills) / (args.rounds + 1)
        finally:
            quick_judge.close()
            engine.close()
    med = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
    report = {
        "settings": {**vars(args), "n": N, "model": "tiny" if args.model_dir is None else args.model_dir},
        "prompt_tokens": len(prompt),
        "rounds": rounds,
        "median": med,
        "n1_tokens_per_s": med["n1_tokens"] / med["n1_s"],
        "n4_tokens_per_s": med["n4_tokens"] / med["n4_s"],
        "separate_tokens_per_s": med["separate_tokens"] / med["separate_s"],
        "n4_over_separate": med["n4_s"] / med["separate_s"],
        "n4_over_n1": med["n4_s"] / med["n1_s"],
        "best_of_4_first_token_s": med["n4_s"] + med["quick_s"],
        "prefill_rows_per_round": prefills_per_round,  # n1 + n4 (1, shared) + 4 separate + 4 quick-judge rows
    }
    report["first_token_ratio"] = report["best_of_4_first_token_s"] / med["n1_first_token_s"]
    print(
        f"prompt {len(prompt)} tokens, {args.new_tokens} new tokens per candidate (medians of {args.rounds})\n"
        f"N=1 turn            {med['n1_s']:.3f} s  {report['n1_tokens_per_s']:.0f} tok/s  "
        f"first token {med['n1_first_token_s']:.3f} s\n"
        f"N=4, one request    {med['n4_s']:.3f} s  {report['n4_tokens_per_s']:.0f} tok/s  "
        f"({report['n4_over_n1']:.2f} x N=1)\n"
        f"N=4, 4 requests     {med['separate_s']:.3f} s  {report['separate_tokens_per_s']:.0f} tok/s\n"
        f"quick judge of 4    {med['quick_s']:.3f} s\n"
        f"shared / separate = {report['n4_over_separate']:.2f}   "
        f"Best-of-4 first token {report['best_of_4_first_token_s']:.3f} s = "
        f"{report['first_token_ratio']:.1f} x N=1's"
    )
    write_results(report, "best_of_n_bench", args.out)
    return report


if __name__ == "__main__":
    main()
