"""``engine: vllm_server`` on a real vLLM server: adapter publish vs a merge-and-push weight sync, scoring
throughput, and serving p95 latency idle vs while adapters are published.

It starts one ``python -m vllm.entrypoints.openai.api_server`` of the model (run it with an interpreter where
vLLM imports: ``.venv-vllm`` on CPU), or uses ``--url`` of a running one started with the options of
``openclaw_trl.engines.server_setup.serve_command``.

* **Publish vs merge-and-push.** Ours: ``publish_adapter`` = write the LoRA state dict to ``adapter_dir``,
  ``POST /v1/load_lora_adapter``, switch, unload the previous version. TRL's merge-and-push instead merges
  the adapter into the base weights and ships every base tensor to the server. A stock vLLM server has no
  runtime full-weight load endpoint (TRL's ``vllm-serve`` pushes them over NCCL), so what is timed for it is
  the part that is measurable here and always needed: ``merge_adapter`` + writing the full merged state dict
  (safetensors) + ``unmerge_adapter``; the load on the server comes on top. The ratio is ours / that.
* **Score vs forward.** Teacher scoring (``score``: prompt log-probs of 64-token completions after 64-token
  prompts) vs the same prefill with no log-probs, tokens/s.
* **Serving p95.** Concurrent greedy chat requests on the policy, idle, then while a thread publishes a new
  adapter version every ``--publish-every`` seconds.

    .venv-vllm/bin/python benchmarks/server_bench.py                 # tiny model, its own server (~2 min)
    .venv-vllm/bin/python benchmarks/server_bench.py --url http://127.0.0.1:8000 --model-dir DIR
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from _results import write_results  # noqa: E402
from _smoke import parse_args  # noqa: E402

from openclaw_trl.engines import GenerationRequest, SamplingParams  # noqa: E402


def lora_config(r: int):
    from peft import LoraConfig

    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    return LoraConfig(r=r, lora_alpha=2 * r, lora_dropout=0.0, target_modules=targets, task_type="CAUSAL_LM")


def start_server(model_dir: Path, port: int, rank: int, log: Path) -> subprocess.Popen:
    from openclaw_trl.engines.server_setup import serve_command

    argv = serve_command(sys.executable, str(model_dir), port, max_lora_rank=rank, max_logprobs=20)
    argv += ["--max-model-len", "1024"]
    env = dict(os.environ, VLLM_ALLOW_RUNTIME_LORA_UPDATING="True")
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    process = subprocess.Popen(argv, stdout=open(log, "w"), stderr=subprocess.STDOUT, env=env)  # noqa: SIM115
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the vLLM server exited; see {log}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=5).status_code == 200:
                return process
        except httpx.HTTPError:
            pass
        time.sleep(2)
    process.kill()
    raise RuntimeError(f"the vLLM server did not start; see {log}")


def peft_policy(model_dir: Path, r: int):
    import torch
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM

    policy = get_peft_model(
        AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32), lora_config(r)
    )
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if "lora_" in name:
                p.normal_(0, 0.01)  # a trained-looking adapter
    return policy


def median_time(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_publish(engine, policy, repeats: int, tmp: Path) -> dict:
    from peft import get_peft_model_state_dict
    from safetensors.torch import save_file

    versions = iter(range(1, 100_000))

    def publish():
        state = {k: v.detach().clone() for k, v in get_peft_model_state_dict(policy).items()}
        engine.publish_adapter(state, next(versions))

    def merge_and_write():
        import torch

        with torch.no_grad():
            policy.merge_adapter()
            base = {
                n.removeprefix("base_model.model.").replace(".base_layer", ""): p.detach().contiguous()
                for n, p in policy.named_parameters()
                if "lora_" not in n
            }
            save_file(base, str(tmp / "merged.safetensors"))
            policy.unmerge_adapter()

    publish_s = median_time(publish, repeats)
    merge_s = median_time(merge_and_write, repeats)
    return {
        "publish_s": publish_s,
        "merge_and_write_s": merge_s,
        "publish_over_merge": publish_s / merge_s,
        "adapter_params": sum(p.numel() for n, p in policy.named_parameters() if "lora_" in n),
        "base_params": sum(p.numel() for n, p in policy.named_parameters() if "lora_" not in n),
    }


def bench_score(engine, vocab: int, pairs: int, length: int) -> dict:
    import random

    rng = random.Random(0)
    prompts = [[rng.randrange(3, vocab) for _ in range(length)] for _ in range(pairs)]
    comps = [[rng.randrange(3, vocab) for _ in range(length)] for _ in range(pairs)]
    tokens = pairs * 2 * length
    score_s = median_time(lambda: engine.score(prompts, comps, weights="base"), 2)
    plain = [
        GenerationRequest(p + c, SamplingParams(temperature=0.0, max_new_tokens=1), "base")
        for p, c in zip(prompts, comps)
    ]
    forward_s = median_time(lambda: engine.generate(plain, priority="learn"), 2)
    return {
        "score_tok_per_s": tokens / score_s,
        "forward_tok_per_s": tokens / forward_s,
        "score_over_forward": forward_s / score_s,
    }


def latencies(engine, prompts, sessions: int, turns: int, max_tokens: int) -> list[float]:
    out: list[float] = []
    lock = threading.Lock()

    def session(i):
        for t in range(turns):
            req = GenerationRequest(
                prompts[(i + t) % len(prompts)], SamplingParams(temperature=0.0, max_new_tokens=max_tokens)
            )
            t0 = time.perf_counter()
            engine.generate([req])
            with lock:
                out.append(time.perf_counter() - t0)

    threads = [threading.Thread(target=session, args=(i,)) for i in range(sessions)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def p95(values: list[float]) -> float:
    return sorted(values)[max(0, int(round(0.95 * len(values))) - 1)]


def bench_serving(
    engine, policy, tokenizer, sessions: int, turns: int, max_tokens: int, every: float
) -> dict:
    from peft import get_peft_model_state_dict

    from openclaw_trl.chat import render_prompt_ids

    texts = [
        "hello",
        "what is the weather today?",
        "write code for the sum of two numbers",
        "tell me about books",
    ]
    prompts = [render_prompt_ids(tokenizer, [{"role": "user", "content": t}]) for t in texts]
    latencies(engine, prompts, 2, 1, max_tokens)  # warm-up
    idle = latencies(engine, prompts, sessions, turns, max_tokens)
    stop = threading.Event()
    published = [0]

    def publisher():
        version = 10_000
        while not stop.is_set():
            version += 1
            state = {k: v.detach().clone() for k, v in get_peft_model_state_dict(policy).items()}
            engine.publish_adapter(state, version)
            published[0] += 1
            stop.wait(every)

    thread = threading.Thread(target=publisher)
    thread.start()
    try:
        busy = latencies(engine, prompts, sessions, turns, max_tokens)
    finally:
        stop.set()
        thread.join()
    return {
        "idle_p95_s": p95(idle),
        "updating_p95_s": p95(busy),
        "p95_ratio": p95(busy) / p95(idle),
        "idle_p50_s": statistics.median(idle),
        "updating_p50_s": statistics.median(busy),
        "publishes_during": published[0],
        "requests": len(idle),
    }


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model-dir", default=None, help="model directory (default: the tiny model, built here)")
    ap.add_argument("--url", default=None, help="a running server of --model-dir (default: start one)")
    ap.add_argument("--lora-r", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--pairs", type=int, default=16)
    ap.add_argument("--sessions", type=int, default=8)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--publish-every", type=float, default=0.2)
    ap.add_argument("--out", default=None)
    args = parse_args(ap, argv, smoke=dict(repeats=1, pairs=2, sessions=2, turns=1, max_tokens=4))

    from openclaw_trl.engines.vllm_server import VLLMServerEngine

    tmp = Path(tempfile.mkdtemp(prefix="server-bench-"))
    model_dir = Path(args.model_dir) if args.model_dir else None
    if model_dir is None:
        from openclaw_trl.testing import build_tiny_model

        model_dir = build_tiny_model(tmp / "tiny")
    process = None
    url = args.url
    if url is None:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        t0 = time.perf_counter()
        process = start_server(model_dir, port, args.lora_r, tmp / "server.log")
        print(f"server up in {time.perf_counter() - t0:.0f} s")
        url = f"http://127.0.0.1:{port}"
    engine = VLLMServerEngine(
        model_dir, urls=[url], lora_config=lora_config(args.lora_r), adapter_dir=tmp / "adapters"
    )
    try:
        policy = peft_policy(model_dir, args.lora_r)
        report = {"model": str(model_dir), "lora_r": args.lora_r, "url": url}
        report["publish"] = bench_publish(engine, policy, args.repeats, tmp)
        report["score"] = bench_score(engine, len(engine.tokenizer), args.pairs, 64)
        report["serving"] = bench_serving(
            engine, policy, engine.tokenizer, args.sessions, args.turns, args.max_tokens, args.publish_every
        )
    finally:
        engine.close()
        if process is not None:
            process.terminate()
            process.wait(timeout=60)
    p, s, v = report["publish"], report["score"], report["serving"]
    print("\n| figure | ours | reference | ratio |\n|---|---|---|---|")
    print(
        f"| adapter publish (write + load_lora_adapter) vs merge + write full weights | {p['publish_s'] * 1e3:.1f} ms | {p['merge_and_write_s'] * 1e3:.1f} ms | {p['publish_over_merge']:.3f} |"
    )
    print(
        f"| score vs prefill-only tokens/s | {s['score_tok_per_s']:.0f} | {s['forward_tok_per_s']:.0f} | {s['score_over_forward']:.3f} |"
    )
    print(
        f"| serving p95 during publishes vs idle | {v['updating_p95_s'] * 1e3:.0f} ms | {v['idle_p95_s'] * 1e3:.0f} ms | {v['p95_ratio']:.3f} |"
    )
    write_results(report, "server_bench", args.out)
    return report


if __name__ == "__main__":
    main()
