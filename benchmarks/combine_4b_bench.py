"""One Combine update of a Qwen3-4B-shaped model with LoRA r = 16 beside the colocated HF engine.

    python benchmarks/combine_4b_bench.py                      # GPU: 4B shapes, bf16, 16 samples per update
    python benchmarks/combine_4b_bench.py --tiny               # the same flow on the tiny model (CPU rehearsal)
    python benchmarks/combine_4b_bench.py --load-in-4bit       # QLoRA: the trainer's base in 4 bits (bitsandbytes)

The question: does live training of a 4B model fit one 24 GB card? One process holds what the live system
holds on one GPU: the serving engine (``HFEngine``, its own bf16 copy of the base plus the published
adapter), and ``OpenClawTrainer`` (a second bf16 base, LoRA r = 16 on all linear layers, AdamW state,
activation checkpointing) publishing its adapter to the engine after every optimizer step. The random
model has the real Qwen3-4B shapes and vocabulary (the LM head and log-softmax cost what they cost in the
real model); it is built in bf16 on the GPU and cached in ``--model-cache``. The engine first answers one
batch, so its KV cache counts in the peak; then the trainer takes ``--steps`` optimizer steps on judged
Combine samples (+-1 rewards, every other sample with a hint and teacher log-probs), the first a warm-up.

Reported: median seconds per update (the steps after the first), CUDA peak memory of the whole process
(allocated and reserved, from the start: the engine, the warm-up and every step) and the fraction of a
24 GB card the reserved peak takes; on CPU the peak RSS instead. Results go to
``benchmarks/results/combine_4b_bench_<time>.json`` (git-ignored) unless ``--out`` is given.
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
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

CARD_BYTES = 24e9  # a "24 GB" card (RTX 4090 / A10 / L4 class), before the CUDA context takes its share
GEOMETRY = {
    "qwen3-4b-shaped": dict(batch=16, micro=4, prompt_len=256, completion_len=256),
    "tiny": dict(batch=8, micro=4, prompt_len=64, completion_len=32),
}


def model_dir(label: str, cache: Path) -> Path:
    """The 4B-shaped model (built in bf16 on the GPU when there is one) or the tiny model, cached."""
    from openclaw_trl.testing import build_qwen3_4b_shaped, build_tiny_model

    path = cache / label
    if not (path / "config.json").exists():
        import torch

        t0 = time.perf_counter()
        if label == "tiny":
            build_tiny_model(path)
        else:
            build_qwen3_4b_shaped(path, device="cuda" if torch.cuda.is_available() else None)
        print(f"built {label} in {time.perf_counter() - t0:.1f}s -> {path}", flush=True)
    return path


def peak_bytes() -> dict:
    """CUDA max allocated / reserved since the start of the process, or the peak RSS on CPU."""
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()
        return {
            "allocated": int(torch.cuda.max_memory_allocated()),
            "reserved": int(torch.cuda.max_memory_reserved()),
        }
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return {"rss": int(line.split()[1]) * 1024}
    return {}


def serve_one_batch(engine, vocab: int, batch: int = 8, new_tokens: int = 32) -> float:
    """One batch of generations from the engine (its KV cache counts in the peak); returns seconds."""
    import random

    from openclaw_trl.engines import GenerationRequest, SamplingParams

    rng = random.Random(0)
    reqs = [
        GenerationRequest(
            [rng.randrange(10, vocab) for _ in range(128)],
            SamplingParams(temperature=1.0, max_new_tokens=new_tokens, seed=i),
        )
        for i in range(batch)
    ]
    t0 = time.perf_counter()
    engine.generate(reqs)
    return time.perf_counter() - t0


def step_timer():
    """Wall seconds between consecutive optimizer steps (CUDA synchronised; memory peaks are left alone)."""
    import torch
    from transformers import TrainerCallback

    def sync():
        if torch.cuda.is_available():
            torch.cuda.synchronize()

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.times: list[float] = []

        def on_train_begin(self, args, state, control, **kwargs):
            sync()
            self.t = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            sync()
            now = time.perf_counter()
            self.times.append(now - self.t)
            self.t = now

    return StepTimer()


def build_trainer(path: Path, geometry: dict, steps: int, tmp: str, engine, timer, load_in_4bit: bool):
    """``OpenClawTrainer`` (Combine) on a store holding the samples of ``steps`` updates, publishing to
    ``engine``."""
    import torch
    from _trainer_setup import checkpointing_args, lora_config, make_samples, openclaw_args
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from openclaw_trl.config import OpenClawConfig
    from openclaw_trl.store import Store
    from openclaw_trl.trainer import OpenClawTrainer

    tokenizer = AutoTokenizer.from_pretrained(path)
    store = Store(Path(tmp) / "store.sqlite")
    for s in make_samples(steps * geometry["batch"], geometry, min(len(tokenizer), 2000)):
        store.queue.add_sample(s)
    args = {**openclaw_args(geometry, steps, tmp), **checkpointing_args(True)}
    cuda = torch.cuda.is_available()
    load = {"dtype": torch.bfloat16 if cuda else torch.float32}
    if load_in_4bit:
        from transformers import BitsAndBytesConfig

        load["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.bfloat16
        )
    model = AutoModelForCausalLM.from_pretrained(path, **load)
    return OpenClawTrainer(
        model=model,
        args=OpenClawConfig(**args),
        store=store,
        engine=engine,
        processing_class=tokenizer,
        peft_config=lora_config(16),
        callbacks=[timer],
        sample_timeout=30,
    )


def checkpointing_on(model) -> bool:
    """Whether the trained model really recomputes activations (the flag's name differs across releases)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):
        if name in dir(type(base)):
            return bool(getattr(base, name))
    return False


def bench(label: str, geometry: dict, steps: int, cache: Path, load_in_4bit: bool) -> dict:
    import torch
    from _trainer_setup import lora_config

    from openclaw_trl.engines.hf import HFEngine

    path = model_dir(label, cache)
    t0 = time.perf_counter()
    engine = HFEngine(path, lora_config=lora_config(16))
    engine_start_s = time.perf_counter() - t0
    timer = step_timer()
    try:
        generate_s = serve_one_batch(engine, min(len(engine.tokenizer), 2000))
        engine_peak = peak_bytes()
        with tempfile.TemporaryDirectory(prefix="combine-4b-bench-") as tmp:
            trainer = build_trainer(path, geometry, steps, tmp, engine, timer, load_in_4bit)
            trainer.train()
            trainer.store.close()
            version = engine.policy_version
            checkpointing = checkpointing_on(trainer.model)
            del trainer
        after_s = serve_one_batch(engine, min(len(engine.tokenizer), 2000))
        peak = peak_bytes()
    finally:
        engine.close()
    step_s = statistics.median(timer.times[1:] or timer.times)
    return {
        "model": label,
        "device": "cuda" if torch.cuda.is_available() else "cpu",
        "dtype": "bfloat16" if torch.cuda.is_available() else "float32",
        "load_in_4bit": load_in_4bit,
        "lora_r": 16,
        "geometry": geometry,
        "activation_checkpointing": checkpointing,
        "steps": steps,
        "step_s": step_s,
        "steps_s": timer.times,
        "engine_start_s": engine_start_s,
        "engine_generate_s": generate_s,
        "engine_generate_after_s": after_s,
        "engine_policy_version": version,
        "engine_peak": engine_peak,
        "peak": peak,
        "card_24gb_fraction": peak["reserved"] / CARD_BYTES if "reserved" in peak else None,
    }


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tiny", action="store_true", help="the tiny model instead of the 4B shapes (rehearsal)")
    ap.add_argument("--steps", type=int, default=3, help="optimizer steps (the first is a warm-up)")
    ap.add_argument("--batch", type=int, default=None, help="samples per update (default 16; tiny 8)")
    ap.add_argument("--micro", type=int, default=None, help="micro-batch (default 4)")
    ap.add_argument("--load-in-4bit", action="store_true", help="QLoRA: needs bitsandbytes and a GPU")
    ap.add_argument(
        "--model-cache", default=os.environ.get("OPENCLAW_BENCH_MODELS", "/tmp/openclaw-bench-models")
    )
    ap.add_argument("--out", default=None)
    args = parse_args(ap, argv, smoke=dict(tiny=True, steps=2, batch=4, micro=2))
    if args.steps < 1:
        ap.error("--steps must be at least 1")
    if args.load_in_4bit:
        import importlib.util

        import torch

        if importlib.util.find_spec("bitsandbytes") is None or not torch.cuda.is_available():
            ap.error("--load-in-4bit needs bitsandbytes and a CUDA GPU (pip install bitsandbytes)")

    label = "tiny" if args.tiny else "qwen3-4b-shaped"
    geometry = dict(GEOMETRY[label])
    geometry.update({k: v for k, v in (("batch", args.batch), ("micro", args.micro)) if v})
    if geometry["batch"] % geometry["micro"]:
        ap.error(f"--batch {geometry['batch']} must be a multiple of --micro {geometry['micro']}")
    result = bench(label, geometry, args.steps, Path(args.model_cache), args.load_in_4bit)
    memory = ", ".join(f"{k} {v / 2**30:.2f} GiB" for k, v in result["peak"].items())
    print(
        f"\n{label} ({result['device']}, {result['dtype']}{', 4-bit base' if args.load_in_4bit else ''}): "
        f"{result['step_s']:.2f} s per Combine update of {geometry['batch']} x "
        f"~{geometry['prompt_len']}+{geometry['completion_len']} tokens; peak {memory}"
        + (
            f" ({result['card_24gb_fraction']:.0%} of a 24 GB card)"
            if result["card_24gb_fraction"] is not None
            else ""
        )
    )
    write_results(result, "combine_4b_bench", args.out)
    return result


if __name__ == "__main__":
    main()
