"""Engine throughput: generate / score / plain forward tokens per second and adapter publish time.

    python benchmarks/engine_bench.py --quick              # tiny model + a small Qwen3-0.6B-shaped run (HF)
    .venv-vllm/bin/python benchmarks/engine_bench.py       # adds VLLMEngine where vLLM imports

Why "plain forward" next to ``score``: scoring should cost no more than the forward pass it needs
(the performance target is score/forward >= 0.9). For HF the plain forward is ``model(ids).logits`` over the
whole padded batch; for vLLM it is a prefill-only request (``max_tokens=1``) without prompt log-probs.
Random-init models: the numbers measure compute, not text quality. Results go to
``benchmarks/results/engine_bench_<time>.json`` (git-ignored).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

# Must precede `import torch`. With the default (spinning) OpenMP wait policy, the engine's worker thread and
# any other thread that ran torch ops keep OpenMP teams spinning against each other: on the shared 2-core
# machine HF decoding measured ~10x slower (2.3 s vs 0.2 s for 8x32 tokens on the tiny model).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# vLLM on CPU reserves 90% of the machine's RAM for its KV cache unless given a size, and refuses to start
# when less is free; 1 GiB holds what these batches need (a GPU ignores this variable).
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _results import write_results  # noqa: E402  (benchmarks/ is on sys.path from here on)
from _smoke import parse_args  # noqa: E402


def _best_time(fn, repeats: int) -> float:
    """Best of ``repeats`` timed runs after a warm-up. The best, not the median: the CPU machines this runs on
    are shared, and other processes only ever add time."""
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def _best_times_interleaved(fns, repeats: int) -> list[float]:
    """``_best_time`` of each of ``fns``, their timed runs taken in turns (a, b, a, b, ...) so that a burst of
    load from other processes hits them alike: timed one after the other, a ratio of two such times on the
    shared 2-core machine swung by +-20% from run to run."""
    for fn in fns:
        fn()  # warm-up
    times = [[] for _ in fns]
    for _ in range(repeats):
        for fn, own in zip(fns, times):
            t0 = time.perf_counter()
            fn()
            own.append(time.perf_counter() - t0)
    return [min(own) for own in times]


def _prompts(n: int, length: int, vocab: int, seed: int = 0) -> list[list[int]]:
    import random

    rng = random.Random(seed)
    return [[rng.randrange(10, min(vocab, 2000)) for _ in range(length)] for _ in range(n)]


def _adapter(model_dir: Path, r: int):
    """A random r-rank LoRA on all linear projections, as a PEFT state dict, plus its config."""
    import torch
    from peft import LoraConfig, get_peft_model, get_peft_model_state_dict
    from transformers import AutoModelForCausalLM

    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    cfg = LoraConfig(r=r, lora_alpha=2 * r, target_modules=targets, task_type="CAUSAL_LM")
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32), cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.normal_(0, 0.01)
    sd = {k: v.detach().clone() for k, v in get_peft_model_state_dict(model).items()}
    del model
    return sd, cfg


def _hf_forward(engine, prompts, comps):
    """The plain batched forward the score path is compared with: full logits for every position."""
    import torch

    seqs = [p + c for p, c in zip(prompts, comps)]
    width = max(map(len, seqs))
    ids = torch.full((len(seqs), width), engine.pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for b, s in enumerate(seqs):
        ids[b, : len(s)] = torch.tensor(s)
        mask[b, : len(s)] = 1
    model = engine.model
    selected, _ = model.pin("policy")  # same weights as score(weights="policy")
    try:
        with model.lock, torch.inference_mode():
            model.select(selected)
            model.lm(input_ids=ids.to(engine.device), attention_mask=mask.to(engine.device)).logits.float()
    finally:
        model.unpin(selected)


def _vllm_forward(engine, prompts, comps):
    """Prefill-only requests. Called directly on ``engine.llm``: safe here because the engine's worker thread is
    idle (blocked on its queue) while the benchmark issues nothing else."""
    from vllm import SamplingParams as VSP

    reqs = [{"prompt_token_ids": p + c} for p, c in zip(prompts, comps)]
    engine.llm.generate(reqs, VSP(max_tokens=1, temperature=0.0, detokenize=False), use_tqdm=False)


def bench(kind: str, model_dir: Path, label: str, cfg: dict, lora_r: int) -> dict:
    from openclaw_trl.engines import GenerationRequest, SamplingParams, create_engine

    sd, lora_cfg = _adapter(model_dir, lora_r)
    kwargs = dict(lora_config=lora_cfg)
    if kind == "vllm":
        kwargs.update(max_model_len=1024, max_logprobs=20)
    t0 = time.perf_counter()
    engine = create_engine(kind, model_dir, **kwargs)
    start_s = time.perf_counter() - t0
    try:
        vocab = len(engine.tokenizer)
        version = iter(range(1, 1000))
        publish_s = _best_time(lambda: engine.publish_adapter(sd, next(version)), cfg["repeats"])

        prompts = _prompts(cfg["batch"], cfg["prompt_len"], vocab)
        sp = SamplingParams(temperature=1.0, max_new_tokens=cfg["new_tokens"], seed=0)
        reqs = [
            GenerationRequest(p, SamplingParams(**{**sp.__dict__, "seed": i})) for i, p in enumerate(prompts)
        ]
        produced = []

        def gen():
            produced[:] = engine.generate(reqs)

        gen_s = _best_time(gen, cfg["repeats"])
        gen_tokens = sum(len(c.token_ids) for c in produced)

        comps = _prompts(cfg["batch"], cfg["score_len"], vocab, seed=1)
        score_prompts = _prompts(cfg["batch"], cfg["score_len"], vocab, seed=2)
        score_tokens = sum(len(p) + len(c) for p, c in zip(score_prompts, comps))
        fwd = _hf_forward if kind == "hf" else _vllm_forward
        score_s, fwd_s = _best_times_interleaved(
            [
                lambda: engine.score(score_prompts, comps, weights="policy"),
                lambda: fwd(engine, score_prompts, comps),
            ],
            cfg["repeats"],
        )
    finally:
        engine.close()
    return {
        "engine": kind,
        "model": label,
        "start_s": round(start_s, 2),
        "generate": {
            "batch": cfg["batch"],
            "tokens": gen_tokens,
            "seconds": gen_s,
            "tok_per_s": gen_tokens / gen_s,
        },
        "score": {"tokens": score_tokens, "seconds": score_s, "tok_per_s": score_tokens / score_s},
        "forward": {"tokens": score_tokens, "seconds": fwd_s, "tok_per_s": score_tokens / fwd_s},
        "score_over_forward": (score_tokens / score_s) / (score_tokens / fwd_s),
        "publish_s": publish_s,
        "lora_r": lora_r,
    }


def _have_vllm() -> bool:
    try:
        from vllm import LLM  # noqa: F401
    except Exception:  # noqa: BLE001
        return False
    return True


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--quick", action="store_true", help="small batches; keeps the 0.6B HF run to about a minute"
    )
    ap.add_argument(
        "--engines", default="hf,vllm", help="comma list; vllm is skipped where it does not import"
    )
    ap.add_argument("--models", default="tiny,qwen3-0.6b-shaped")
    ap.add_argument("--vllm-large", action="store_true", help="also run vLLM on the 0.6B-shaped model")
    ap.add_argument("--model-cache", default="/tmp/openclaw-bench-models", help="where built models are kept")
    ap.add_argument("--lora-r", type=int, default=16)
    ap.add_argument("--out", default=None)
    args = parse_args(ap, argv, smoke=dict(models="tiny"))

    import torch

    from openclaw_trl.testing import build_qwen3_0_6b_shaped, build_tiny_model

    cache = Path(args.model_cache)
    builders = {"tiny": build_tiny_model, "qwen3-0.6b-shaped": build_qwen3_0_6b_shaped}
    sizes = {
        "tiny": dict(batch=8, prompt_len=64, new_tokens=32, score_len=64, repeats=5),
        "qwen3-0.6b-shaped": dict(batch=4, prompt_len=32, new_tokens=16, score_len=64, repeats=2),
    }
    if args.quick or args.smoke:
        sizes["tiny"].update(repeats=3)
        sizes["qwen3-0.6b-shaped"] = dict(batch=2, prompt_len=16, new_tokens=4, score_len=32, repeats=1)
    if args.smoke:
        sizes["tiny"] = dict(batch=2, prompt_len=16, new_tokens=4, score_len=16, repeats=1)
    engines = [e for e in args.engines.split(",") if e]
    if "vllm" in engines and not _have_vllm():
        print(
            "vllm is not importable in this interpreter: skipping VLLMEngine (run with .venv-vllm/bin/python)"
        )
        engines.remove("vllm")

    rows = []
    for label in args.models.split(","):
        path = cache / label
        if not (path / "config.json").exists():
            t0 = time.perf_counter()
            builders[label](path)
            print(f"built {label} in {time.perf_counter() - t0:.1f}s -> {path}")
        for kind in engines:
            if kind == "vllm" and label != "tiny" and not args.vllm_large:
                continue
            print(f"benchmarking {kind} on {label} ...", flush=True)
            rows.append(bench(kind, path, label, sizes[label], args.lora_r))

    header = "| engine | model | generate tok/s (batch) | score tok/s | plain forward tok/s | score/forward | publish r={} s |"
    print()
    print(header.format(args.lora_r))
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['engine']} | {r['model']} | {r['generate']['tok_per_s']:.1f} ({r['generate']['batch']}) | "
            f"{r['score']['tok_per_s']:.0f} | {r['forward']['tok_per_s']:.0f} | {r['score_over_forward']:.2f} | "
            f"{r['publish_s']:.3f} |"
        )
    meta = {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "machine": platform.machine(),
        "quick": args.quick,
    }
    write_results({"meta": meta, "results": rows}, "engine_bench", args.out)


if __name__ == "__main__":
    main()
