"""Pre-train the toy world's small chat model from scratch on CPU (a few minutes), then measure it.

A Qwen3-architecture model (``openclaw_trl.testing.build_model_dir``) with a byte-level BPE tokenizer
trained on the toy corpus, trained with plain PyTorch on chats rendered with the package's chat template
(loss on the assistant tokens only, ``<|im_end|>`` included so generation stops). See
:mod:`openclaw_trl.toy.world` for what the chats teach and :mod:`openclaw_trl.toy.measure` for what is
measured afterwards (the rates of the taught behaviours, saved in ``world.json``).

:func:`toy_model` returns the default settings' checkpoint shipped with the package (:data:`PACKAGED_DIR`,
written by ``python benchmarks/learning/pretrain.py --package``), so the demo starts without pre-training.
For any other :class:`PretrainSettings` it keeps one checkpoint in the user cache directory
(:func:`cache_root`): ``toy-model-<settings hash>`` holds the model, the tokenizer and ``world.json``
(settings + these measurements). The first call pre-trains (a progress bar on stderr), later calls reuse
it. The directory is written beside its final name and renamed when complete, so a process killed during
pre-training leaves nothing that a later start would use. Deterministic for a given seed.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from openclaw_trl.toy import measure, world

META_FILE = "world.json"
CACHE_ENV = "OPENCLAW_TRL_CACHE"
PACKAGED_DIR = Path(__file__).parent / "model"
"""The default settings' checkpoint, shipped with the package (produced by
``python benchmarks/learning/pretrain.py --package``); read-only at runtime."""


@dataclass(frozen=True)
class PretrainSettings:
    """Everything that determines the checkpoint (the cache key)."""

    seed: int = 0
    steps: int = 1200
    batch_size: int = 32
    learning_rate: float = 3e-3
    n_chats: int = 16000
    vocab_size: int = 1024
    hidden_size: int = 128
    intermediate_size: int = 384
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 32
    measure_n: int = 96  # samples per measured probability

    def digest(self) -> str:
        """A short hash of every field: the cache key."""
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:12]

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


def train(
    model,
    examples: list[tuple[list[int], list[int]]],
    settings: PretrainSettings,
    pad_id: int,
    log,
    progress: bool = False,
):
    """Plain AdamW with warm-up + cosine decay on random mini-batches; returns the last loss.

    ``progress`` shows a tqdm bar on stderr instead of a log line every 100 steps.
    """
    import torch
    from tqdm.auto import tqdm

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
    bar = tqdm(total=settings.steps, desc="pre-training the toy model", unit="step", disable=not progress)
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
        bar.update(1)
        bar.set_postfix(loss=f"{loss_value:.3f}", refresh=False)
        if not progress and (step % 100 == 0 or step == settings.steps - 1):
            log(
                f"  step {step:5d}/{settings.steps}  loss {loss_value:.4f}  ({time.perf_counter() - started:.0f}s)"
            )
    bar.close()
    model.eval()
    return loss_value


def pretrain(
    out: str | Path,
    settings: PretrainSettings | None = None,
    force: bool = False,
    log=print,
    progress: bool = False,
    ignored: bool = True,
) -> Path:
    """Build, train, save and measure the model in ``out``; reuse it when ``out`` holds the same settings.

    The model is written to a directory beside ``out`` that replaces it only once complete. ``ignored``
    puts a ``.gitignore`` in it, so that a checkpoint written inside a git checkout is never committed by
    accident (off only for :data:`PACKAGED_DIR`).
    """
    from openclaw_trl.fsutil import staged_directory

    settings = settings or PretrainSettings()
    out = Path(out)
    if not force and cached_settings(out) == asdict(settings):
        log(f"pretrain: cached model in {out}")
        return out
    with staged_directory(out, "pretrain") as staging:
        meta = _build(staging, settings, log, progress)
        if ignored:
            (staging / ".gitignore").write_text("*\n")
    log(report(meta))
    return out


def cached_settings(out: Path) -> dict | None:
    """The settings a complete checkpoint in ``out`` was trained with (None when there is none)."""
    meta_path = Path(out) / META_FILE
    if not meta_path.exists():
        return None
    return json.loads(meta_path.read_text()).get("settings")


def _build(out: Path, settings: PretrainSettings, log, progress: bool) -> dict:
    """Pre-train into the empty directory ``out`` and measure; returns the metadata written there."""
    import torch
    from transformers import AutoModelForCausalLM

    from openclaw_trl.testing import build_model_dir

    started = time.perf_counter()
    torch.manual_seed(settings.seed)
    chats = world.training_chats(settings.n_chats, seed=settings.seed)
    tokenizer = build_tokenizer(chats, settings.vocab_size)
    check_encoding(tokenizer, chats[:50])
    examples = [encode_chat(tokenizer, c) for c in chats]
    build_model_dir(out, tokenizer, settings.model_kwargs(), seed=settings.seed)
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    n_params = sum(p.numel() for p in model.parameters())
    log(
        f"pretrain: {n_params / 1e6:.2f}M parameters, vocab {len(tokenizer)}, {len(examples)} chats, "
        f"{settings.steps} steps of {settings.batch_size}"
    )
    last_loss = train(model, examples, settings, tokenizer.pad_token_id, log, progress)
    model.save_pretrained(out)
    train_s = time.perf_counter() - started
    log(f"pretrain: measuring the styles the model answers in ({settings.measure_n} samples each)")
    metrics = measure.measure(out, n=settings.measure_n)
    meta = {
        "settings": asdict(settings),
        "parameters": n_params,
        "final_loss": last_loss,
        "chats_digest": chats_digest(chats),
        "train_seconds": round(train_s, 1),
        "metrics": metrics,
    }
    (out / META_FILE).write_text(json.dumps(meta, indent=2))
    return meta


def chats_digest(chats: list[list[dict]]) -> str:
    """A short hash of the pre-training chats: a checkpoint is stale when the world teaches other chats."""
    return hashlib.sha256(json.dumps(chats, sort_keys=True).encode()).hexdigest()[:12]


def report(meta: dict) -> str:
    m = meta["metrics"]
    return (
        f"pretrain: loss {meta['final_loss']:.3f} after {meta['train_seconds']}s; at T={m['temperature']} "
        f"P({m['preferred']}) bare {m['bare']['rate']:.2f}, with hint {m['hinted']['rate']:.2f}; "
        f"follow-up compliance {m['follow_up']['rate']:.2f}; off-topic compliance {m['off_topic']['rate']:.2f}; "
        f"P(brief) bare {m['bare_brief']['rate']:.2f}, with hint {m['hinted_brief']['rate']:.2f}; "
        f"P({m['preferred']} and brief) with both hinted {m['hinted_both']['rate']:.2f}; "
        f"follow-up compliance brief {m['follow_up_brief']['rate']:.2f}, both {m['follow_up_both']['rate']:.2f}; "
        f"bare fidelity {m['bare_fidelity']['rate']:.2f}; "
        f"bare styles {m['bare']['styles']}; "
        f"teacher - student log-prob per bare answer: {m['teacher_gap']}"
    )


# ---------------------------------------------------------------------------------------------- the cache
def cache_root() -> Path:
    """Where pre-trained toy models are kept: ``$OPENCLAW_TRL_CACHE`` when set, else
    ``$XDG_CACHE_HOME/openclaw-trl`` (``~/.cache/openclaw-trl`` when ``XDG_CACHE_HOME`` is unset)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "openclaw-trl"


def toy_model_dir(settings: PretrainSettings | None = None) -> Path:
    """The cache directory of the checkpoint for ``settings`` (it may not exist yet)."""
    return cache_root() / f"toy-model-{(settings or PretrainSettings()).digest()}"


@contextmanager
def torch_threads(n: int):
    """Run the block with ``n`` torch threads: a model this small trains fastest on one."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def toy_model(settings: PretrainSettings | None = None, log=print) -> Path:
    """The pre-trained toy model's directory.

    For the default settings this is :data:`PACKAGED_DIR`, shipped with the package: returned at once,
    nothing is trained or written. For other settings (``TINY``, another seed, ...) it is the checkpoint in
    the user cache (:func:`toy_model_dir`), pre-trained on first use (with a progress bar on stderr; about
    11 minutes for a model of the default size on one CPU core, seconds for ``TINY``) and reused afterwards.
    """
    settings = settings or PretrainSettings()
    if cached_settings(PACKAGED_DIR) == asdict(settings):
        return PACKAGED_DIR
    out = toy_model_dir(settings)
    if cached_settings(out) != asdict(settings):
        log(f"pretrain: this toy model is not cached yet: pre-training it into {out} (a few minutes)")
        with torch_threads(1):
            pretrain(out, settings, log=log, progress=True)
    return out
