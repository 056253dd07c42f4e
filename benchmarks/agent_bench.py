"""Cost at agent scale: an OpenClaw-shaped session (long system prompt, 12 tools, 3 turns) on the 0.6B-shaped model.

    python benchmarks/agent_bench.py            # 40,000-character system prompt (a GPU: seconds; a CPU: hours)
    python benchmarks/agent_bench.py --quick    # 2,000 characters, short tools, 2-layer training (2-core CPU: minutes)
    python benchmarks/agent_bench.py --smoke    # the tiny model, 1,000 characters: the flow in seconds

Each request is what the agent sends: the system prompt, the 12 tools, the history (user messages, assistant
replies) and a last user message holding a per-turn internal-context block, which the next request drops (so
request k + 1 extends request k only up to that block). Figures, each a ratio of two timings of this run (wall
time on a GPU; process CPU time on a CPU, where other processes share the cores):

* **turn-2 prefill with prefix reuse / without** (target <= 0.25): the HF engine's prefix cache holds turn 1's
  prompt; turn 2 computes only what follows the shared part. Greedy ids and log-probs are checked equal.
* **teacher scoring / plain prefill of the same tokens** (target >= 0.9, as ``prefill_s / score_s``): the
  hint-augmented turn-2 prompt (hint appended to the last user message) followed by the served reply, scored
  without a cached prefix ("cold": the scoring overhead) and with the served turn's prompt cached ("warm": the
  prefix up to the last user message is reused; no adapter is published here, so the served turn ran on the
  base weights, which the teacher uses too. After the first update the teacher reuses its own entry of the
  previous turn instead, shared up to that turn's hint).
* **one Combine update on 4 agent-sized samples vs 4 samples of 1k tokens** (seconds, peak memory; reported).
  The agent samples' prompts have the length of the turn-3 request. Activation checkpointing on (what an
  agent recipe uses), LoRA r = 16, micro-batches of 2. Each update runs in its own process (peak memory per
  case). On a CPU the shape is layer-reduced (same width, ``--train-layers``) and the time is also given
  scaled to 28 layers (an upper bound: the embedding and the completion-only LM head do not scale).

GPU expectation (0.6B in bf16 on one H100/H200-class GPU, 40k characters = ~11k tokens of this tokenizer): turn 2
reuses ~95% of its prompt and takes well under a quarter of a full prefill; cold scoring costs a prefill (the
LM head runs on the completion only); an update on 4 agent samples takes roughly (agent tokens / 1k) times the
1k-token update, seconds rather than minutes, and its peak memory grows by the checkpointed layer inputs
(layers x tokens x hidden x 2 bytes per sample of a micro-batch, ~0.6 GB for 11k tokens), never by prompt x
vocabulary logits. Results go to ``benchmarks/results/agent_bench_<time>.json`` (git-ignored) unless ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault(
    "OMP_WAIT_POLICY", "PASSIVE"
)  # see engine_bench.py: spinning OpenMP teams on a shared CPU
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _agent_session import session  # noqa: E402  (benchmarks/ is on sys.path from here on)
from _results import write_results  # noqa: E402

MODEL_CACHE = Path(os.environ.get("OPENCLAW_BENCH_MODELS", "/tmp/openclaw-bench-models"))
# Per size: the model; characters of the system prompt; tools and the characters of each one's description (its
# 3 arguments get an eighth of it); the scale of a turn's user message / context block / reply
# (x1 = 300 / 200 / 400 characters); tokens of the reply the teacher scores and of an agent sample's
# completion; the layers of the training shape (None: 28 on a GPU, 4 on a CPU) and the short samples.
SIZES = {
    "smoke": dict(
        model="tiny",
        system_chars=600,
        tools=4,
        tool_chars=30,
        turn_scale=0.2,
        reply_tokens=8,
        completion=32,
        layers=None,
        short=(96, 32),
    ),  # fmt: skip
    "quick": dict(
        model="qwen3-0.6b-shaped",
        system_chars=1500,
        tools=12,
        tool_chars=40,
        turn_scale=0.2,
        reply_tokens=32,
        completion=128,
        layers=2,
    ),  # fmt: skip
    "full": dict(
        model="qwen3-0.6b-shaped",
        system_chars=40000,
        tools=12,
        tool_chars=500,
        turn_scale=1.0,
        reply_tokens=64,
        completion=256,
        layers=None,
    ),  # fmt: skip
}
SHORT = (768, 256)  # the 1k-token samples: prompt, completion
TARGETS = {"turn2_reuse_over_plain": ("<=", 0.25), "prefill_over_score": (">=", 0.9)}


def model_path(label: str, layers: int | None) -> Path:
    """The cached random model: ``tiny``, the 0.6B shapes, or the 0.6B width with ``layers`` layers."""
    from _trainer_setup import model_dir

    from openclaw_trl.testing import build_model_dir, build_tiny_tokenizer, qwen3_0_6b_config_kwargs

    if layers in (None, qwen3_0_6b_config_kwargs()["num_hidden_layers"]) or label == "tiny":
        return model_dir(label)

    path = MODEL_CACHE / f"{label}-{layers}l"
    if not (path / "config.json").exists():
        shape = {**qwen3_0_6b_config_kwargs(), "num_hidden_layers": layers}
        build_model_dir(path, build_tiny_tokenizer(), shape, vocab_size=151936)
    return path


def timed(fn):
    """``(seconds, fn())``: wall seconds on a GPU; on a CPU the process CPU time (all threads): the machines
    this runs on are shared, and other processes only add wall time."""
    import torch

    if not torch.cuda.is_available():
        t0 = time.process_time()
        out = fn()
        return time.process_time() - t0, out
    t0 = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t0, out


def prefill(engine, ids, weights="policy"):
    """A request that only prefills (one greedy token): its time is the prefill's."""
    from openclaw_trl.engines import GenerationRequest, SamplingParams

    return engine.generate(
        [GenerationRequest(ids, SamplingParams(temperature=0.0, max_new_tokens=1), weights)]
    )[0]


def bench_engine(size: dict, requests, tool_list, repeats: int) -> dict:
    """Turn-2 prefill with and without reuse; teacher scoring cold / warm vs a plain prefill."""
    from openclaw_trl.chat import render_prompt_ids
    from openclaw_trl.engines import GenerationRequest, SamplingParams
    from openclaw_trl.engines.hf import HFEngine
    from openclaw_trl.judge import append_hint

    engine = HFEngine(model_path(size["model"], None), prefix_cache_mb=1 << 16)
    cache = engine.prefix_cache
    tok = engine.tokenizer
    ids = [render_prompt_ids(tok, m, tool_list) for m in requests]
    try:
        prefill(engine, ids[0][:64])  # warm-up
        reuse_s, plain_s, cold_reused = [], [], 0  # cold_reused: tokens reused by the runs "without" (0)
        for _ in range(repeats):
            cache.clear()
            turn1_s, _ = timed(lambda: prefill(engine, ids[0]))
            before = cache.stats["reused_tokens"]
            t, reused_out = timed(lambda: prefill(engine, ids[1]))
            reuse_s.append(t)
            reused = cache.stats["reused_tokens"] - before
            cache.clear()  # "without": nothing cached, the whole prompt is computed
            before = cache.stats["reused_tokens"]
            t, plain_out = timed(lambda: prefill(engine, ids[1]))
            plain_s.append(t)
            cold_reused += cache.stats["reused_tokens"] - before
        print(
            f"turn 2: {min(reuse_s):.2f} s reusing {reused} tokens, {min(plain_s):.2f} s without", flush=True
        )
        same = reused_out.token_ids == plain_out.token_ids
        logprob_diff = abs(reused_out.logprobs[0] - plain_out.logprobs[0])

        # the served turn 2 (its prompt cached), then the teacher on its hint-augmented prompt
        cache.clear()
        sp = SamplingParams(temperature=1.0, max_new_tokens=size["reply_tokens"], seed=0)
        reply = engine.generate([GenerationRequest(ids[1], sp)])[0].token_ids
        teacher = render_prompt_ids(
            tok, append_hint(requests[1], "Read the file before you edit it."), tool_list
        )
        shared = next(i for i, (a, b) in enumerate(zip(ids[1], teacher)) if a != b)
        before = cache.stats["reused_tokens"]
        warm_s, warm = timed(lambda: engine.score([teacher], [reply], weights="base"))
        warm_reused = cache.stats["reused_tokens"] - before
        cold_s, cold = [], None
        forward_s = []
        before = cache.stats["reused_tokens"]
        for _ in range(repeats):  # "cold" and the plain prefill: nothing cached, every token computed
            cache.clear()
            t, cold = timed(lambda: engine.score([teacher], [reply], weights="base"))
            cold_s.append(t)
            cache.clear()
            forward_s.append(timed(lambda: prefill(engine, teacher + reply, "base"))[0])
        cold_reused += cache.stats["reused_tokens"] - before
        print(
            f"teacher: scoring {min(cold_s):.2f} s cold, {warm_s:.2f} s warm; prefill {min(forward_s):.2f} s",
            flush=True,
        )
        warm_diff = max(abs(a - b) for a, b in zip(warm.logprobs[0], cold.logprobs[0]))
    finally:
        engine.close()
    return {
        "prompt_tokens": [len(x) for x in ids],
        "turn1_prefill_s": turn1_s,
        "turn2_reused_tokens": reused,
        "cold_runs_reused_tokens": cold_reused,
        "turn2_reuse_s": min(reuse_s),
        "turn2_plain_s": min(plain_s),
        "turn2_reuse_over_plain": min(reuse_s) / min(plain_s),
        "turn2_same_greedy_token": same,
        "turn2_logprob_diff": logprob_diff,
        "teacher_tokens": len(teacher) + len(reply),
        "teacher_shared_prefix": shared,
        "score_cold_s": min(cold_s),
        "score_warm_s": warm_s,
        "score_warm_reused_tokens": warm_reused,
        "plain_prefill_s": min(forward_s),
        "prefill_over_score_cold": min(forward_s) / min(cold_s),
        "prefill_over_score_warm": min(forward_s) / warm_s,
        "score_warm_vs_cold_max_logprob_diff": warm_diff,
    }


def train_case(args) -> dict:
    """One process, one case: ``--steps`` Combine updates on 4 samples of ``prompt + completion`` tokens."""
    import torch
    from _trainer_setup import (
        Memory,
        checkpointing_args,
        lora_config,
        make_samples,
        openclaw_args,
        step_timer,
    )
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from openclaw_trl.config import OpenClawConfig
    from openclaw_trl.store import Store
    from openclaw_trl.trainer import OpenClawTrainer

    path = Path(args.train_model)
    geometry = dict(batch=4, micro=2, prompt_len=args.prompt, completion_len=args.completion)
    tokenizer = AutoTokenizer.from_pretrained(path)
    memory = Memory()
    with tempfile.TemporaryDirectory(prefix="agent-bench-") as tmp:
        store = Store(Path(tmp) / "store.sqlite")
        for s in make_samples(args.steps * 4, geometry, min(len(tokenizer), 2000)):
            s.prompt_ids, s.completion_ids = s.prompt_ids[: args.prompt], s.completion_ids[: args.completion]
            s.prompt_ids += [11] * (args.prompt - len(s.prompt_ids))  # exact lengths: the figure is per size
            s.completion_ids += [12] * (args.completion - len(s.completion_ids))
            for name in ("sampling_logprobs", "teacher_logprobs"):
                values = getattr(s, name)
                if values is not None:
                    setattr(s, name, (values + [-1.0] * args.completion)[: args.completion])
            store.queue.add_sample(s)
        config = openclaw_args(geometry, args.steps, tmp)  # Combine, no checkpoint per update
        config.update(checkpointing_args(True))
        cuda = torch.cuda.is_available()
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16 if cuda else torch.float32)
        timer = step_timer()
        trainer = OpenClawTrainer(
            model=model,
            args=OpenClawConfig(**config),
            store=store,
            processing_class=tokenizer,
            peft_config=lora_config(16),
            callbacks=[timer],
            sample_timeout=30,
        )
        memory.reset()
        trainer.train()
        peak = memory.peak_bytes()
        store.close()
    steps = timer.times if cuda else timer.cpu  # as ``timed``: process CPU time on a CPU
    # the first step includes the warm-up; its peak counts only without a later step
    return {
        "step_s": min(steps[1:] or steps),
        "steps_s": steps,
        "peak_bytes": timer.peak or peak,
        "layers": model.config.num_hidden_layers,
    }


def bench_training(size: dict, agent_prompt: int, steps: int, layers: int) -> dict:
    """The agent-sized and the 1k-token update, each in its own process."""
    path = model_path(size["model"], layers)
    short = size.get("short", SHORT)
    out = {}
    for case, (prompt, completion) in {"agent": (agent_prompt, size["completion"]), "short": short}.items():
        cmd = [sys.executable, __file__, "--train-case", "--train-model", str(path), "--prompt", str(prompt)]
        cmd += ["--completion", str(completion), "--steps", str(steps)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"training case {case} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
        out[case] = {
            **json.loads(proc.stdout.strip().splitlines()[-1]),
            "prompt": prompt,
            "completion": completion,
        }
        print(f"update, 4 x {prompt}+{completion} tokens: {out[case]['step_s']:.2f} s", flush=True)
    a, s = out["agent"], out["short"]
    scale = 28 / a["layers"] if size["model"] != "tiny" else 1.0
    return {
        **out,
        "agent_over_short_s": a["step_s"] / s["step_s"],
        "agent_over_short_peak": a["peak_bytes"] / s["peak_bytes"],
        "tokens_ratio": (a["prompt"] + a["completion"]) / (s["prompt"] + s["completion"]),
        "agent_step_s_scaled_28_layers": a["step_s"] * scale,
        "short_step_s_scaled_28_layers": s["step_s"] * scale,
    }


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="a 2,000-character system prompt, 2-layer training")
    ap.add_argument("--smoke", action="store_true", help="the tiny model and a short session (seconds)")
    ap.add_argument("--train-layers", type=int, default=None, help="layers of the training shape (default: all "
                    "28 on a GPU, 4 on a CPU; --quick 2)")  # fmt: skip
    ap.add_argument(
        "--steps", type=int, default=None, help="updates per case, the first a warm-up (default 2)"
    )
    ap.add_argument("--repeats", type=int, default=None, help="timed repeats of each prefill (best of)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--train-case", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--train-model", help=argparse.SUPPRESS)
    ap.add_argument("--prompt", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--completion", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.train_case:
        args.steps = args.steps or 2
        print(json.dumps(train_case(args)))
        return {}
    import torch

    name = "smoke" if args.smoke else ("quick" if args.quick else "full")
    size = SIZES[name]
    cuda = torch.cuda.is_available()
    layers = args.train_layers or size["layers"] or (28 if cuda else 4)
    requests, tool_list = session(size)
    t0 = time.perf_counter()
    engine = bench_engine(size, requests, tool_list, args.repeats or (1 if name != "full" else 2))
    training = bench_training(size, engine["prompt_tokens"][2], args.steps or 2, layers)
    report = {
        "size": name,
        "model": size["model"],
        "device": "cuda" if cuda else "cpu",
        "system_chars": size["system_chars"],
        "tools": len(tool_list),
        "tools_json_chars": len(json.dumps(tool_list)),
        "engine": engine,
        "training": training,
        "train_layers": layers,
        "targets": {k: f"{op} {v}" for k, (op, v) in TARGETS.items()},
        "seconds": time.perf_counter() - t0,
        "clock": "wall" if cuda else "process CPU time",
    }
    print_report(report)
    write_results(report, "agent_bench", args.out)
    return report


def print_report(r: dict) -> None:
    e, t = r["engine"], r["training"]
    gib = 2**30
    print(f"\nagent session ({r['size']}: {r['model']}, {r['device']}, seconds of {r['clock']}; system prompt {r['system_chars']} chars, "
          f"{r['tools']} tools; request tokens {e['prompt_tokens']})")  # fmt: skip
    print(f"  turn-2 prefill with prefix reuse {e['turn2_reuse_s']:.3f} s vs without {e['turn2_plain_s']:.3f} s: "
          f"{e['turn2_reuse_over_plain']:.3f}x (target <= 0.25; {e['turn2_reused_tokens']} of "
          f"{e['prompt_tokens'][1]} tokens reused; same greedy token {e['turn2_same_greedy_token']}, "
          f"log-prob diff {e['turn2_logprob_diff']:.1e}; tokens reused by the runs without a cached prefix: "
          f"{e['cold_runs_reused_tokens']})")  # fmt: skip
    print(f"  teacher scoring of {e['teacher_tokens']} tokens: plain prefill {e['plain_prefill_s']:.3f} s; score cold "
          f"{e['score_cold_s']:.3f} s (prefill/score {e['prefill_over_score_cold']:.2f}, target >= 0.9), warm "
          f"{e['score_warm_s']:.3f} s ({e['prefill_over_score_warm']:.2f}; {e['teacher_shared_prefix']} tokens "
          f"shared before the hint, {e['score_warm_reused_tokens']} reused; warm vs cold log-prob diff {e['score_warm_vs_cold_max_logprob_diff']:.1e})")  # fmt: skip
    a, s = t["agent"], t["short"]
    print(f"  Combine update, 4 x {a['prompt']}+{a['completion']} tokens: {a['step_s']:.2f} s, peak "
          f"{a['peak_bytes'] / gib:.2f} GiB; 4 x {s['prompt']}+{s['completion']}: {s['step_s']:.2f} s, peak "
          f"{s['peak_bytes'] / gib:.2f} GiB; ratio {t['agent_over_short_s']:.2f}x time, "
          f"{t['agent_over_short_peak']:.2f}x peak for {t['tokens_ratio']:.1f}x tokens ({a['layers']} layers; "
          f"scaled to 28: {t['agent_step_s_scaled_28_layers']:.1f} s vs {t['short_step_s_scaled_28_layers']:.1f} s)")  # fmt: skip


if __name__ == "__main__":
    main()
