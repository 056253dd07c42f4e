"""Pre-train the toy world's small chat model from scratch on CPU (a few minutes), then measure it.

    python benchmarks/learning/pretrain.py [--steps 240] [--out benchmarks/results/learning_model]

A Qwen3-architecture model (``openclaw_trl.testing.build_model_dir``) with a byte-level BPE tokenizer
trained on the toy corpus, trained with plain PyTorch on chats rendered with the package's chat template
(loss on the assistant tokens only, ``<|im_end|>`` included so generation stops). See ``toy_world`` for
what the chats teach. Afterwards it measures, through the serving engine (``HFEngine``, the path the
benchmark serves from) at the serving temperature:

* P(preferred style) for a bare request (the base rate the benchmark starts from);
* P(preferred style) when the request carries the ``[user's hint / instruction]`` block (the teacher);
* P(requested style) after a "No, not like that. Please …" follow-up.

The checkpoint is cached in ``--out`` (git-ignored) together with ``toy_world.json`` (settings + these
measurements); a second call with the same settings reuses it. Deterministic for a given ``--seed``.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import toy_world  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "learning_model"
META_FILE = "toy_world.json"


@dataclass(frozen=True)
class PretrainSettings:
    """Everything that determines the checkpoint (the cache key)."""

    seed: int = 0
    steps: int = 240
    batch_size: int = 32
    learning_rate: float = 3e-3
    n_chats: int = 8000
    vocab_size: int = 1024
    hidden_size: int = 128
    intermediate_size: int = 384
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 32
    measure_n: int = 96  # samples per measured probability

    def model_kwargs(self) -> dict:
        return dict(
            hidden_size=self.hidden_size,
            intermediate_size=self.intermediate_size,
            num_hidden_layers=self.num_hidden_layers,
            num_attention_heads=self.num_attention_heads,
            num_key_value_heads=self.num_key_value_heads,
            head_dim=self.head_dim,
            max_position_embeddings=512,
            tie_word_embeddings=True,
            rope_theta=10000.0,
        )


TINY = PretrainSettings(
    steps=30,
    n_chats=600,
    vocab_size=600,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    measure_n=8,
)
"""A few-second model for the integration test: the pipeline runs, nothing is expected to be learnt."""


def build_tokenizer(chats: list[list[dict]], vocab_size: int):
    """BPE trained on the message texts (special tokens and the chat template come from ``testing``)."""
    from openclaw_trl.testing import build_tiny_tokenizer

    corpus = [m["content"] for chat in chats for m in chat] + ["user\n", "assistant\n", "system\n"]
    return build_tiny_tokenizer(vocab_size, corpus=corpus)


def encode_chat(tokenizer, messages: list[dict]) -> tuple[list[int], list[int]]:
    """Token ids of the rendered chat and labels (-100 except assistant content + ``<|im_end|>``).

    Each message is tokenised on its own: special tokens bound every segment, so the concatenation equals
    the tokenisation of the whole rendering (checked in :func:`check_encoding`).
    """
    ids, labels = [], []

    def add(text: str, learn: bool) -> None:
        piece = tokenizer.encode(text, add_special_tokens=False)
        ids.extend(piece)
        labels.extend(piece if learn else [-100] * len(piece))

    for m in messages:
        if m["role"] == "assistant":
            add("<|im_start|>assistant\n", False)
            add(m["content"] + "<|im_end|>", True)
            add("\n", False)
        else:
            add(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n", False)
    return ids, labels


def check_encoding(tokenizer, chats: list[list[dict]]) -> None:
    for chat in chats:
        whole = tokenizer.apply_chat_template(chat, tokenize=False)
        if tokenizer.encode(whole, add_special_tokens=False) != encode_chat(tokenizer, chat)[0]:
            raise AssertionError(f"segment-wise encoding differs from the chat template for {chat!r}")


def train(model, examples: list[tuple[list[int], list[int]]], settings: PretrainSettings, pad_id: int, log):
    """Plain AdamW with warm-up + cosine decay on random mini-batches; returns the last loss."""
    import torch

    gen = random.Random(settings.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=settings.learning_rate, weight_decay=0.01)
    warmup = max(1, settings.steps // 20)

    def lr_at(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, settings.steps - warmup)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    model.train()
    loss_value, started = float("nan"), time.perf_counter()
    for step in range(settings.steps):
        batch = [examples[gen.randrange(len(examples))] for _ in range(settings.batch_size)]
        width = max(len(ids) for ids, _ in batch)
        input_ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
        labels = torch.full((len(batch), width), -100, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for i, (ids, lab) in enumerate(batch):
            input_ids[i, : len(ids)] = torch.tensor(ids)
            labels[i, : len(lab)] = torch.tensor(lab)
            mask[i, : len(ids)] = 1
        loss = model(input_ids=input_ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        loss_value = float(loss.detach())
        if step % 100 == 0 or step == settings.steps - 1:
            log(
                f"  step {step:5d}/{settings.steps}  loss {loss_value:.4f}  ({time.perf_counter() - started:.0f}s)"
            )
    model.eval()
    return loss_value


def style_rates(
    engine, prompts: list[list[dict]], wanted: list[str], temperature: float, seed: int, max_tokens: int = 40
) -> dict:
    """Sample one answer per prompt (seeded) with the policy weights; the fraction in the wanted style and
    the distribution of styles seen."""
    from openclaw_trl.chat import render_prompt_ids
    from openclaw_trl.engines.base import GenerationRequest, SamplingParams

    requests = [
        GenerationRequest(
            render_prompt_ids(engine.tokenizer, p),
            SamplingParams(temperature=temperature, max_new_tokens=max_tokens, seed=seed + i),
            weights="policy",
        )
        for i, p in enumerate(prompts)
    ]
    completions = engine.generate(requests)
    texts = [engine.tokenizer.decode(c.token_ids, skip_special_tokens=True).strip() for c in completions]
    by_name = {s.name: s for s in toy_world.STYLES}
    hits = [by_name[w].matches(t) for w, t in zip(wanted, texts)]
    seen = {name: sum(s.matches(t) for t in texts) / len(texts) for name, s in by_name.items()}
    seen["none"] = sum(not any(s.matches(t) for s in toy_world.STYLES) for t in texts) / len(texts)
    out = {"rate": sum(hits) / len(texts), "styles": seen, "examples": texts[:3]}
    out["_samples"] = (requests, completions, hits)  # for teacher_gap; dropped before saving
    return out


def teacher_gap(engine, samples, hinted: list[list[dict]], temperature: float) -> dict:
    """What OPD's advantage sees: per sampled bare answer, sum over its tokens of
    ``lp_teacher - lp_student`` (teacher = the same weights on the hint-augmented prompt, scoring the
    sampled ids), averaged separately over answers in the preferred style and the others."""
    from openclaw_trl.chat import render_prompt_ids

    requests, completions, hits = samples
    teacher = engine.score(
        [render_prompt_ids(engine.tokenizer, h) for h in hinted],
        [c.token_ids for c in completions],
        weights="policy",
        temperature=temperature,
    ).logprobs
    gaps = [sum(t) - sum(c.logprobs) for t, c in zip(teacher, completions)]
    good = [g for g, h in zip(gaps, hits) if h]
    bad = [g for g, h in zip(gaps, hits) if not h]
    return {
        "preferred_style": sum(good) / len(good) if good else None,
        "other_styles": sum(bad) / len(bad) if bad else None,
    }


def measure(model_dir: Path, preferred: str = toy_world.PREFERRED, n: int = 96, temperature: float = 1.0):
    """The three probabilities of the module docstring, on ``n`` seeded samples each."""
    from openclaw_trl.engines.hf import HFEngine
    from openclaw_trl.judge import append_hint

    rng = random.Random(1234)
    topics = [toy_world.TOPICS[i % len(toy_world.TOPICS)] for i in range(n)]
    bare = [[{"role": "user", "content": toy_world.opening(t)}] for t in topics]
    hinted = [append_hint(p, toy_world.style_request(preferred)) for p in bare]
    follow, wants = [], []
    for t in topics:
        first = rng.choice(toy_world.STYLE_NAMES)
        want = rng.choice([s for s in toy_world.STYLE_NAMES if s != first])
        follow.append(
            [
                {"role": "user", "content": toy_world.opening(t)},
                {"role": "assistant", "content": toy_world.render_answer(first, t, rng)},
                {"role": "user", "content": toy_world.change_request(want)},
            ]
        )
        wants.append(want)
    engine = HFEngine(model_dir, max_batch_size=64)
    try:
        out = {
            "preferred": preferred,
            "temperature": temperature,
            "n": n,
            "bare": style_rates(engine, bare, [preferred] * n, temperature, seed=10_000),
            "hinted": style_rates(engine, hinted, [preferred] * n, temperature, seed=20_000),
            "follow_up": style_rates(engine, follow, wants, temperature, seed=30_000),
        }
        out["teacher_gap"] = teacher_gap(engine, out["bare"]["_samples"], hinted, temperature)
    finally:
        engine.close()
    for key in ("bare", "hinted", "follow_up"):
        del out[key]["_samples"]
    return out


def pretrain(
    out: str | Path = DEFAULT_OUT, settings: PretrainSettings | None = None, force: bool = False, log=print
) -> Path:
    """Build, train, save and measure the model in ``out``; reuse it when ``out`` holds the same settings."""
    import torch
    from transformers import AutoModelForCausalLM

    from openclaw_trl.testing import build_model_dir

    settings = settings or PretrainSettings()
    out = Path(out)
    meta_path = out / META_FILE
    if not force and meta_path.exists():
        meta = json.loads(meta_path.read_text())
        if meta.get("settings") == asdict(settings):
            log(f"pretrain: cached model in {out}")
            if "teacher_gap" not in meta.get("metrics", {}):  # a cache from before the gap was measured
                meta["metrics"] = measure(out, n=settings.measure_n)
                meta_path.write_text(json.dumps(meta, indent=2))
            return out
    started = time.perf_counter()
    torch.manual_seed(settings.seed)
    chats = toy_world.training_chats(settings.n_chats, seed=settings.seed)
    tokenizer = build_tokenizer(chats, settings.vocab_size)
    check_encoding(tokenizer, chats[:50])
    examples = [encode_chat(tokenizer, c) for c in chats]
    out.mkdir(parents=True, exist_ok=True)
    (out / ".gitignore").write_text("*\n")  # weights are never committed
    build_model_dir(out, tokenizer, settings.model_kwargs(), seed=settings.seed)
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    n_params = sum(p.numel() for p in model.parameters())
    log(
        f"pretrain: {n_params / 1e6:.2f}M parameters, vocab {len(tokenizer)}, {len(examples)} chats, "
        f"{settings.steps} steps of {settings.batch_size}"
    )
    last_loss = train(model, examples, settings, tokenizer.pad_token_id, log)
    model.save_pretrained(out)
    train_s = time.perf_counter() - started
    metrics = measure(out, n=settings.measure_n)
    meta = {
        "settings": asdict(settings),
        "parameters": n_params,
        "final_loss": last_loss,
        "train_seconds": round(train_s, 1),
        "metrics": metrics,
    }
    meta_path.write_text(json.dumps(meta, indent=2))
    log(report(meta))
    return out


def report(meta: dict) -> str:
    m = meta["metrics"]
    return (
        f"pretrain: loss {meta['final_loss']:.3f} after {meta['train_seconds']}s; at T={m['temperature']} "
        f"P({m['preferred']}) bare {m['bare']['rate']:.2f}, with hint {m['hinted']['rate']:.2f}; "
        f"follow-up compliance {m['follow_up']['rate']:.2f}; bare styles {m['bare']['styles']}; "
        f"teacher - student log-prob per bare answer: {m['teacher_gap']}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(DEFAULT_OUT))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=PretrainSettings.steps)
    parser.add_argument("--force", action="store_true", help="retrain even when a cached model matches")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(1)  # a shared 2-core machine: one thread is several times faster than two
    out = pretrain(args.out, PretrainSettings(seed=args.seed, steps=args.steps), force=args.force)
    print(report(json.loads((out / META_FILE).read_text())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
