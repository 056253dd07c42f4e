"""Serving latency and throughput, idle vs while training updates run (issue 6, item 4).

N concurrent sessions each chat T turns over the real HTTP API (streaming, so time-to-first-token is
measured too). The workload runs twice: with the engine idle, then while a background thread runs LoRA
forward/backward steps on a separate model copy and publishes the adapter to the engine after every step
(what the trainer does; the engine serves from its double-buffered adapter copy, so serving must never
fail, only slow down). Prints a table and writes JSON under ``benchmarks/results/``.

    .venv/bin/python benchmarks/serving_bench.py                      # tiny model, 8 sessions x 4 turns
    .venv/bin/python benchmarks/serving_bench.py --sessions 16 --max-tokens 32
    .venv/bin/python benchmarks/serving_bench.py --shape qwen3-0.6b --sessions 4 --turns 2 --repeats 1 \
        --max-tokens 8 --train-batch 1 --train-seq-len 64           # 0.6B shapes (random weights; slow on CPU)

With the 0.6B shapes the tiny tokenizer covers only ~2k of the 151,936 ids, so most sampled ids decode to
nothing and the time to first *visible* token equals the latency there; latency and tokens/s are still real.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from _smoke import parse_args  # noqa: E402  (this script's folder is on sys.path)

RESULTS = Path(__file__).parent / "results"
TOPICS = ["apples", "homework", "the weather", "python code", "books", "a price", "a week plan", "music"]


def lora_config():
    from peft import LoraConfig

    return LoraConfig(
        r=8,
        lora_alpha=16,
        lora_dropout=0.0,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
        task_type="CAUSAL_LM",
    )


class TrainingLoad(threading.Thread):
    """LoRA PPO-sized steps on a separate model copy; publishes the adapter to the engine after each step."""

    def __init__(
        self,
        model_dir,
        engine,
        batch: int = 8,
        seq_len: int = 128,
        start_version: int = 1,
        max_steps: int | None = None,
        device: str | None = None,
    ):
        super().__init__(name="bench-training", daemon=True)
        import torch
        from peft import get_peft_model
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        self.model = get_peft_model(model, lora_config()).to(device or "cpu")
        self.device = device or "cpu"
        self.max_steps = max_steps
        self.optimizer = torch.optim.AdamW([p for p in self.model.parameters() if p.requires_grad], lr=1e-3)
        self.engine, self.batch, self.seq_len = engine, batch, seq_len
        self.vocab = model.config.vocab_size
        self.version = start_version
        self.steps, self.step_s, self.publish_s = 0, [], []
        self.stop_event = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        import torch
        from peft import get_peft_model_state_dict

        gen = torch.Generator().manual_seed(0)
        try:
            while not self.stop_event.is_set() and (self.max_steps is None or self.steps < self.max_steps):
                t0 = time.perf_counter()
                ids = torch.randint(0, min(self.vocab, 2000), (self.batch, self.seq_len), generator=gen)
                ids = ids.to(self.device)
                loss = self.model(input_ids=ids, labels=ids).loss
                loss.backward()
                self.optimizer.step()
                self.optimizer.zero_grad(set_to_none=True)
                t1 = time.perf_counter()
                state = {k: v.detach().clone() for k, v in get_peft_model_state_dict(self.model).items()}
                self.engine.publish_adapter(state, self.version)
                self.publish_s.append(time.perf_counter() - t1)
                self.step_s.append(t1 - t0)
                self.version += 1
                self.steps += 1
        except BaseException as exc:  # reported in the results, never silently
            self.error = exc


def chat_turn(client, messages: list[dict], session: str, max_tokens: int) -> dict:
    """One streamed request; returns latency, time to first token, completion tokens, status, version."""
    body = {
        "model": "openclaw",
        "messages": messages,
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    t0 = time.perf_counter()
    ttft, tokens, content, version, status = None, 0, "", None, None
    with client.stream("POST", "/v1/chat/completions", json=body, headers={"X-Session-Id": session}) as r:
        status = r.status_code
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if "error" in chunk:
                status = 500
                continue
            for choice in chunk.get("choices", []):
                delta = choice.get("delta", {})
                text = (delta.get("content") or "") + (delta.get("reasoning_content") or "")
                if text and ttft is None:
                    ttft = time.perf_counter() - t0
                content += delta.get("content") or ""
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
            version = chunk.get("system_fingerprint", version)
    latency = time.perf_counter() - t0
    return {
        "latency": latency,
        "ttft": ttft if ttft is not None else latency,
        "tokens": tokens,
        "status": status,
        "fingerprint": version,
        "content": content,
    }


def run_workload(url: str, sessions: int, turns: int, max_tokens: int, tag: str) -> tuple[list[dict], float]:
    import httpx

    def session(k: int) -> list[dict]:
        out, messages = [], []
        with httpx.Client(base_url=url, timeout=600) as client:
            for t in range(turns):
                messages.append(
                    {"role": "user", "content": f"Tell me about {TOPICS[(k + t) % len(TOPICS)]}."}
                )
                res = chat_turn(client, messages, f"{tag}-{k}", max_tokens)
                out.append(res)
                messages.append({"role": "assistant", "content": res["content"]})
        return out

    t0 = time.perf_counter()
    with ThreadPoolExecutor(sessions) as pool:
        results = [r for rs in pool.map(session, range(sessions)) for r in rs]
    return results, time.perf_counter() - t0


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, max(0, round(q / 100 * (len(values) - 1))))]


def summarize(phase: str, results: list[dict], wall: float, load: TrainingLoad | None) -> dict:
    ok = [r for r in results if r["status"] == 200]
    lat, ttft = [r["latency"] for r in ok], [r["ttft"] for r in ok]
    tokens = sum(r["tokens"] for r in ok)
    per_req = [r["tokens"] / r["latency"] for r in ok if r["latency"] > 0]
    return {
        "phase": phase,
        "requests": len(results),
        "errors": len(results) - len(ok),
        "status_codes": sorted({r["status"] for r in results}),
        "p50_latency_s": pct(lat, 50),
        "p95_latency_s": pct(lat, 95),
        "p50_ttft_s": pct(ttft, 50),
        "p95_ttft_s": pct(ttft, 95),
        "completion_tokens": tokens,
        "wall_s": wall,
        "throughput_tok_s": tokens / wall if wall else float("nan"),
        "per_request_tok_s_p50": statistics.median(per_req) if per_req else float("nan"),
        "policy_versions_served": sorted({r["fingerprint"] for r in ok if r["fingerprint"]}),
        "train_steps": load.steps if load else 0,
        "train_step_s_mean": statistics.mean(load.step_s) if load and load.step_s else None,
        "publish_s_mean": statistics.mean(load.publish_s) if load and load.publish_s else None,
        "train_error": repr(load.error) if load and load.error else None,
        "_results": results,
    }


def merge_rounds(rows: list[dict]) -> list[dict]:
    """Per-round rows -> one row per phase (requests pooled; percentiles over all rounds' requests)."""
    merged = []
    for phase in ("idle", "training"):
        rs = [r for r in rows if r["phase"] == phase]
        pooled = [x for r in rs for x in r.pop("_results")]
        wall = sum(r["wall_s"] for r in rs)
        out = summarize(phase, pooled, wall, None)
        out["train_steps"] = sum(r["train_steps"] for r in rs)
        steps = [r["train_step_s_mean"] for r in rs if r["train_step_s_mean"] is not None]
        pubs = [r["publish_s_mean"] for r in rs if r["publish_s_mean"] is not None]
        out["train_step_s_mean"] = statistics.mean(steps) if steps else None
        out["publish_s_mean"] = statistics.mean(pubs) if pubs else None
        out["train_error"] = next((r["train_error"] for r in rs if r["train_error"]), None)
        out["policy_versions_served"] = sorted({v for r in rs for v in r["policy_versions_served"]})
        out["rounds"] = rs
        out.pop("_results", None)
        merged.append(out)
    return merged


def print_table(rows: list[dict]) -> str:
    head = (
        f"{'phase':<10} {'req':>4} {'err':>4} {'p50 lat s':>10} {'p95 lat s':>10} {'p50 TTFT s':>11} "
        f"{'p95 TTFT s':>11} {'tok/s':>8} {'tok/s/req':>10} {'train steps':>12} {'versions':>9}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r['phase']:<10} {r['requests']:>4} {r['errors']:>4} {r['p50_latency_s']:>10.3f} "
            f"{r['p95_latency_s']:>10.3f} {r['p50_ttft_s']:>11.3f} {r['p95_ttft_s']:>11.3f} "
            f"{r['throughput_tok_s']:>8.1f} {r['per_request_tok_s_p50']:>10.1f} {r['train_steps']:>12} "
            f"{len(r['policy_versions_served']):>9}"
        )
    table = "\n".join(lines)
    print(table)
    return table


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", help="an existing model directory (default: build one for --shape)")
    parser.add_argument("--shape", choices=["tiny", "qwen3-0.6b"], default="tiny")
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--train-batch", type=int, default=8)
    parser.add_argument("--train-seq-len", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=2, help="idle/training rounds, alternated")
    parser.add_argument("--device", default=None, help="engine/trainer device (default: cuda when available)")
    parser.add_argument(
        "--out", default=None, help="JSON path (default: benchmarks/results/serving_<shape>.json)"
    )
    args = parse_args(
        parser,
        argv,
        smoke=dict(sessions=2, turns=1, max_tokens=4, train_batch=2, train_seq_len=32, repeats=1),
    )

    import torch

    from openclaw_trl.serving.app import ServerThread
    from openclaw_trl.serving.settings import ServerSettings
    from openclaw_trl.serving_stack import build_serving

    work = Path(tempfile.mkdtemp(prefix="serving-bench-"))
    model_dir = args.model_dir
    if model_dir is None:
        from openclaw_trl.testing import build_qwen3_0_6b_shaped, build_tiny_model

        model_dir = (build_tiny_model if args.shape == "tiny" else build_qwen3_0_6b_shaped)(work / "model")
    settings = ServerSettings(ui=False, default_max_tokens=args.max_tokens, max_context_len=2048)
    engine_kwargs = {"lora_config": lora_config(), "max_batch_size": max(16, args.sessions)}
    if args.device:
        engine_kwargs["device"] = args.device
    serving = build_serving(model_dir, work / "store.db", settings, engine_kwargs=engine_kwargs)
    rows = []
    try:
        with ServerThread(serving.app) as server:
            # warm-up with an adapter published, so both phases serve through the same LoRA code path
            warm = TrainingLoad(
                model_dir, serving.engine, 1, 8, start_version=1, max_steps=1, device=args.device
            )
            warm.run()
            run_workload(server.url, args.sessions, 1, args.max_tokens, "warmup")
            version = serving.engine.policy_version + 1
            for rep in range(args.repeats):  # alternate, so drifting machine load hits both phases alike
                results, wall = run_workload(
                    server.url, args.sessions, args.turns, args.max_tokens, f"idle{rep}"
                )
                rows.append(summarize("idle", results, wall, None))
                load = TrainingLoad(
                    model_dir,
                    serving.engine,
                    args.train_batch,
                    args.train_seq_len,
                    version,
                    device=args.device,
                )
                load.start()
                while load.steps < 1 and load.error is None:  # measure with updates really in flight
                    time.sleep(0.05)
                results, wall = run_workload(
                    server.url, args.sessions, args.turns, args.max_tokens, f"train{rep}"
                )
                load.stop_event.set()
                load.join(timeout=600)
                version = load.version
                rows.append(summarize("training", results, wall, load))
        stored = sum(1 for _ in serving.store.queries.iter_turns(include_private=True))
    finally:
        serving.close()
        shutil.rmtree(work, ignore_errors=True)  # the 0.6B-shaped model alone is 2.4 GB
    rows = merge_rounds(rows)
    table = print_table(rows)
    report = {
        "model": str(model_dir) if args.model_dir else args.shape,
        "sessions": args.sessions,
        "turns_per_session": args.turns,
        "max_tokens": args.max_tokens,
        "train_batch": [args.train_batch, args.train_seq_len],
        "turns_stored": stored,
        "load_average_at_end": os.getloadavg(),
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "torch": torch.__version__,
            "torch_threads": torch.get_num_threads(),
            "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        },
        "rows": rows,
        "table": table,
    }
    out = Path(args.out) if args.out else RESULTS / f"serving_{args.shape}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    expected = args.sessions * (1 + 2 * args.repeats * args.turns)
    print(f"\nturns stored: {stored} (expected {expected}); results: {out}")
    return report


if __name__ == "__main__":
    main()
