"""Transformers + PEFT engine (CPU, or GPU without vLLM): the serving path and the scorer in one model copy.

Why a hand-written decode loop instead of ``model.generate``: we need the exact log-prob of every sampled
token at the package's temperature convention (``log_softmax(logits / T)`` over the full vocabulary, no
top-p/top-k renormalisation, see ``engines/base.py``), a per-request ``torch.Generator`` so that seeds are
reproducible inside a shared batch, per-request sampling parameters and stop strings, and a per-token
callback for streaming. The loop runs over a left-padded batch with a KV cache (attention mask + explicit
position ids), so one decode step serves every queued request.

Concurrency model:

* ``generate`` may be called from any thread. Requests are queued; one background worker collects what
  arrives within a short window (up to ``max_batch_size``), groups it by ``weights`` and decodes each group
  as one batch. The caller blocks until its own completions are ready.
* Serving goes ahead of learning (``priority``, see ``engines/base.py``): the worker decodes ``serve``
  requests first; a ``learn`` batch (judge votes, at most ``max_batch_size`` rows) looks for newly arrived
  ``serve`` requests after every decode step and decodes them to the end before its next step. So a chat
  request waits for at most one decode step of learning work.
* ``score`` runs in the calling thread, in chunks of at most ``score_batch_tokens`` padded tokens. Every
  forward (a decode step or a score chunk) holds the model lock and selects its weights right before
  running; a ``learn`` chunk (the teacher) first waits until no ``serve`` generation is queued or running,
  so a chat request waits for at most one scoring chunk.
* ``publish_adapter`` never touches weights that are in use: the engine owns its own PEFT-wrapped model copy
  with two adapter slots (a double buffer). The new weights are copied into the inactive slot, then the active
  slot flips. A batch pins the slot that was active when it started, and a publisher waits until the slot it
  wants to overwrite is no longer pinned. So requests in flight finish on the weights they started with, and
  nobody ever sees half-copied weights. The trainer trains its own model copy; nothing is shared with it.
"""

from __future__ import annotations

import inspect
import logging
import queue
import secrets
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from openclaw_trl.engines.adapters import load_adapter_dir
from openclaw_trl.engines.base import (
    Completion,
    GenerationRequest,
    Priority,
    SamplingParams,
    Scores,
    Weights,
    check_priority,
)

logger = logging.getLogger(__name__)

SLOTS = ("slot0", "slot1")
BASE = "base"


@dataclass
class _Job:
    """One ``generate`` call: its requests, its streaming callback and where its results go."""

    requests: list[GenerationRequest]
    on_token: Any
    results: list[Completion | None] = field(default_factory=list)
    remaining: int = 0
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)
    priority: Priority = "serve"


@dataclass
class _Row:
    """Decoding state of one request inside a batch."""

    job: _Job
    index: int  # position of the request in its job (the ``on_token`` index)
    request: GenerationRequest
    generator: Any
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str | None = None


class HFEngine:
    """Generation and scoring with a Transformers model and (optionally) a LoRA policy adapter.

    Args:
        model_path: a directory (or Hub id) loadable by ``AutoModelForCausalLM``.
        lora_config: the ``peft.LoraConfig`` of the adapters that will be published. ``None``: take it from the
            first adapter directory published; until then ``policy`` serves the base weights.
        device: ``"cpu"``, ``"cuda"``, … (default: CUDA when available).
        dtype: model dtype, a ``torch.dtype`` or its name (default float32 on CPU, where bf16 is ~160x slower,
            bfloat16 on GPU).
        max_batch_size: most requests decoded together.
        batch_wait_s: how long the worker waits for more requests after the first one arrives.
        score_batch_tokens: padded tokens per scoring forward (bounds activation memory).
        score_logits_elems: most ``positions x vocab`` logits materialised at once while scoring.
        tokenizer: an already loaded tokenizer (default: loaded from ``model_path``).
    """

    def __init__(
        self,
        model_path: str | Path,
        lora_config=None,
        device: str | None = None,
        dtype=None,
        max_batch_size: int = 16,
        batch_wait_s: float = 0.005,
        score_batch_tokens: int = 8192,
        score_logits_elems: int = 1 << 26,
        tokenizer=None,
    ) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        if dtype is None:
            dtype = torch.float32 if self.device.type == "cpu" else torch.bfloat16
        elif isinstance(dtype, str):  # "float32", "bfloat16", … as written in recipes
            dtype = getattr(torch, dtype)
        self.dtype = dtype
        self.model_path = str(model_path)
        self.tokenizer = tokenizer or AutoTokenizer.from_pretrained(self.model_path)
        model = AutoModelForCausalLM.from_pretrained(self.model_path, dtype=dtype)
        model.to(self.device).eval()
        model.requires_grad_(False)
        self._lm = model  # the causal LM (with LoRA layers injected in place once wrapped)
        self._peft = None
        self._tuner_layers: list = []
        self._param_maps: dict[str, dict[str, Any]] = {}
        self.lora_config = None

        self.max_batch_size = max(1, int(max_batch_size))
        self.batch_wait_s = batch_wait_s
        self.score_batch_tokens = score_batch_tokens
        self.score_logits_elems = score_logits_elems
        self.eos_ids = self._eos_ids()
        pad = self.tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else (sorted(self.eos_ids)[0] if self.eos_ids else 0)
        self._cache_kw = (
            "cache" if "cache" in inspect.signature(self._body().forward).parameters else "past_key_values"
        )

        # Slot bookkeeping (all under _cond): which slot serves `policy`, its version, and pins by running work.
        self._cond = threading.Condition()
        self._active: str | None = None  # None = no adapter yet, `policy` serves the base weights
        self._slot_version = dict.fromkeys(SLOTS, 0)
        self._pins = dict.fromkeys(SLOTS, 0)
        self.policy_version = 0
        self._publish_lock = threading.Lock()
        self._model_lock = threading.RLock()
        self._selected: str | None = None  # weights currently switched on in the model (under _model_lock)

        if lora_config is not None:
            self._wrap(lora_config)

        self.stats = {
            "batches": 0,
            "requests": 0,
            "decode_steps": 0,
            "prefill_rows": 0,
        }  # counters, for tests and benchmarks
        self._queue: queue.Queue = queue.Queue()
        self._pending: dict[str, deque] = {"serve": deque(), "learn": deque()}  # (job, index), worker only
        self._serving = 0  # serve generate calls queued or decoding (under _serve_cond)
        self._serve_cond = threading.Condition()
        self._closed = self._closing = False
        self._worker = threading.Thread(target=self._worker_loop, name="hf-engine-worker", daemon=True)
        self._worker.start()

    # ------------------------------------------------------------------ model plumbing
    def _eos_ids(self) -> set[int]:
        ids: set[int] = set()
        eos = getattr(self._lm.generation_config, "eos_token_id", None)
        for value in [eos, self.tokenizer.eos_token_id]:
            if isinstance(value, int):
                ids.add(value)
            elif isinstance(value, (list, tuple)):
                ids.update(int(v) for v in value)
        return ids

    def _body(self):
        """The transformer stack without the LM head (hidden states in, so we can pick positions first)."""
        return self._lm.get_decoder()

    def _logits(self, hidden):
        """LM head on selected hidden states, plus the output scalings some architectures apply."""
        logits = self._lm.get_output_embeddings()(hidden)
        cfg = self._lm.config
        scale = getattr(cfg, "logit_scale", None)
        if isinstance(scale, (int, float)) and scale != 1:
            logits = logits * scale
        cap = getattr(cfg, "final_logit_softcapping", None)
        if cap:
            logits = (logits / cap).tanh() * cap
        return logits.float()

    def _wrap(self, lora_config) -> None:
        """Inject two LoRA slots with ``lora_config`` into the model (done once, under the model lock)."""
        from peft import get_peft_model
        from peft.tuners.tuners_utils import BaseTunerLayer

        with self._model_lock:
            if self._peft is not None:
                return
            peft_model = get_peft_model(self._lm, lora_config, adapter_name=SLOTS[0])
            peft_model.add_adapter(SLOTS[1], lora_config)
            peft_model.eval()
            peft_model.requires_grad_(False)
            self._peft = peft_model
            self._lm = peft_model.base_model.model
            self._tuner_layers = [m for m in peft_model.modules() if isinstance(m, BaseTunerLayer)]
            named = dict(peft_model.named_parameters())
            for slot in SLOTS:
                # PEFT state dicts drop the adapter name from parameter names; map those keys to this slot.
                self._param_maps[slot] = {
                    name.replace(f".{slot}", ""): param for name, param in named.items() if f".{slot}" in name
                }
            self.lora_config = lora_config
            self._selected = None

    def _select(self, weights: str) -> None:
        """Switch the model to ``weights`` (``base`` or a slot). Caller holds the model lock."""
        if weights == self._selected:
            return
        for layer in self._tuner_layers:
            if weights == BASE:
                layer.enable_adapters(False)
            else:
                layer.enable_adapters(True)
                layer.set_adapter(weights)
        self._selected = weights

    def _pin(self, weights: Weights) -> tuple[str, int]:
        """Choose the concrete weights for new work and pin its slot so no publish overwrites it."""
        with self._cond:
            slot = self._active if weights == "policy" else None
            if slot is not None:
                self._pins[slot] += 1
            return (slot or BASE), self.policy_version if slot is None else self._slot_version[slot]

    def _unpin(self, selected: str) -> None:
        if selected != BASE:
            with self._cond:
                self._pins[selected] -= 1
                self._cond.notify_all()

    def _forward_hidden(self, selected: str, **kwargs):
        """One forward of the transformer body on ``selected`` weights; returns the last hidden states."""
        import torch

        with self._model_lock, torch.inference_mode():
            self._select(selected)
            return self._body()(**kwargs).last_hidden_state

    # ------------------------------------------------------------------ publishing
    def publish_adapter(self, adapter, version: int) -> None:
        """Make ``adapter`` the ``policy`` atomically (see the module docstring for the double buffer).

        ``adapter`` is a PEFT state dict (``peft.get_peft_model_state_dict``) or a ``save_pretrained`` directory.
        Blocks until the inactive slot is free (at most one batch or score chunk) and the copy is done.
        """
        import torch

        config = None
        if isinstance(adapter, (str, Path)):
            state_dict, config = load_adapter_dir(adapter)
        else:
            state_dict = adapter
        with self._publish_lock:
            if self._peft is None:
                if self.lora_config is None and config is None:
                    raise ValueError(
                        "HFEngine has no LoraConfig: pass lora_config= to the constructor or publish an adapter "
                        "directory that contains adapter_config.json"
                    )
                self._wrap(self.lora_config or config)
            with self._cond:
                target = SLOTS[1] if self._active == SLOTS[0] else SLOTS[0]
                while self._pins[target] > 0:
                    self._cond.wait()
            params = self._param_maps[target]
            missing = []
            with torch.no_grad():
                for key, value in state_dict.items():
                    param = params.get(key) if key in params else params.get("base_model.model." + key)
                    if param is None:
                        missing.append(key)
                        continue
                    if param.shape != value.shape:
                        raise ValueError(
                            f"adapter tensor {key}: shape {tuple(value.shape)} != {tuple(param.shape)}"
                        )
                    param.copy_(value.to(device=param.device, dtype=param.dtype))
            if missing:
                raise KeyError(f"adapter keys not in the engine's LoRA layout: {missing[:5]} …")
            with self._cond:
                self._slot_version[target] = int(version)
                self._active = target
                self.policy_version = int(version)

    # ------------------------------------------------------------------ generation
    def generate(
        self, requests: list[GenerationRequest], on_token=None, priority: Priority = "serve"
    ) -> list[Completion]:
        """Sample completions; blocks until done. Thread-safe; concurrent callers share batches.

        ``on_token(index, token_id)`` is called from the engine's worker thread right after each token of
        ``requests[index]`` is sampled, so it must be cheap and thread-safe (e.g. ``loop.call_soon_threadsafe``).
        ``priority``: ``serve`` (chat) requests are decoded ahead of ``learn`` (judge) ones.
        """
        if not requests:
            return []
        if self._closed:
            raise RuntimeError("HFEngine is closed")
        if any(not r.prompt_ids for r in requests):
            raise ValueError("every request needs at least one prompt token")
        check_priority(priority)
        job = _Job(list(requests), on_token, [None] * len(requests), len(requests), priority=priority)
        self._count_serving(job, +1)
        try:
            self._queue.put(job)
            job.done.wait()
        finally:
            self._count_serving(job, -1)
        if job.error is not None:
            raise RuntimeError(f"generation failed: {job.error!r}") from job.error
        return job.results  # type: ignore[return-value]

    def _count_serving(self, job: _Job, delta: int) -> None:
        if job.priority == "serve":
            with self._serve_cond:
                self._serving += delta
                self._serve_cond.notify_all()

    def _learn_turn(self) -> None:
        """Take the model lock for one ``learn`` forward once no ``serve`` generation is queued or decoding.

        The check is made under the lock, so a chat request that arrives waits for at most the forward in
        progress, not for every learning thread that queued on the lock meanwhile. The caller releases it.
        """
        while True:
            with self._serve_cond:
                self._serve_cond.wait_for(lambda: self._serving == 0 or self._closed)
            self._model_lock.acquire()
            if self._serving == 0 or self._closed:
                return
            self._model_lock.release()

    def _worker_loop(self) -> None:
        while not self._closing:
            if not (self._pending["serve"] or self._pending["learn"]):
                if not self._admit(self._queue.get()):
                    return
            if not self._collect(self.batch_wait_s):
                return
            self._run_next("serve" if self._pending["serve"] else "learn")

    def _admit(self, job: _Job | None) -> bool:
        """Queue the rows of ``job`` by priority; ``None`` (close) fails every pending row and returns False."""
        if job is None:
            self._closing = True
            for rows in self._pending.values():
                self._fail(rows, RuntimeError("HFEngine closed"))
                rows.clear()
            return False
        self._pending[job.priority].extend((job, i) for i in range(len(job.requests)))
        return True

    def _collect(self, wait_s: float) -> bool:
        """Admit every queued job; wait up to ``wait_s`` for more while less than a batch is pending."""
        deadline = time.monotonic() + wait_s
        while True:
            timeout = deadline - time.monotonic()
            short = sum(len(rows) for rows in self._pending.values()) < self.max_batch_size
            try:
                job = self._queue.get(timeout=timeout) if timeout > 0 and short else self._queue.get_nowait()
            except queue.Empty:
                return True
            if not self._admit(job):
                return False

    def _run_next(self, priority: Priority) -> None:
        """Decode one batch: the first pending row's weights, up to ``max_batch_size`` rows of ``priority``."""
        pending = self._pending[priority]
        weights = pending[0][0].requests[pending[0][1]].weights
        batch, rest = [], deque()
        for item in pending:
            same = item[0].requests[item[1]].weights == weights
            (batch if same and len(batch) < self.max_batch_size else rest).append(item)
        self._pending[priority] = rest
        try:
            self._run_batch(batch, weights)
        except BaseException as exc:  # noqa: BLE001 - the callers must see it, the worker must live on
            logger.exception("generation batch failed")
            self._fail(batch, exc)

    def _serve_first(self) -> None:
        """Between two decode steps of a ``learn`` batch: decode every ``serve`` request that arrived."""
        if self._collect(0.0):
            while self._pending["serve"]:
                self._run_next("serve")

    @staticmethod
    def _fail(items, exc: BaseException) -> None:
        for job, _ in items:
            job.error = exc
            job.done.set()

    def _make_generator(self, seed: int | None):
        import torch

        gen = torch.Generator(device=self.device)
        gen.manual_seed(seed if seed is not None else secrets.randbits(63))
        return gen

    def _run_batch(self, items, weights: Weights) -> None:
        rows = [
            _Row(job, i, job.requests[i], self._make_generator(job.requests[i].sampling.seed))
            for job, i in items
        ]
        self.stats["batches"] += 1
        self.stats["requests"] += len(rows)
        selected, version = self._pin(weights)
        try:
            self._decode(rows, selected, yield_to_serving=items[0][0].priority == "learn")
        finally:
            self._unpin(selected)
        for row in rows:
            row.job.results[row.index] = Completion(
                token_ids=row.tokens,
                logprobs=row.logprobs,
                finish_reason=row.finish_reason or "length",  # type: ignore[arg-type]
                policy_version=version,
            )
            row.job.remaining -= 1
            if row.job.remaining == 0:
                row.job.done.set()

    def _decode(self, rows: list[_Row], selected: str, yield_to_serving: bool = False) -> None:
        """The batched decode loop: prefill the left-padded prompts, then one token per row per step.

        ``yield_to_serving``: after every step, decode the ``serve`` requests that arrived (``_serve_first``).
        """
        import torch
        from transformers import DynamicCache

        lengths = [len(r.request.prompt_ids) for r in rows]
        width = max(lengths)
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for b, row in enumerate(rows):
            if lengths[b]:
                ids[b, width - lengths[b] :] = torch.tensor(row.request.prompt_ids, dtype=torch.long)
                mask[b, width - lengths[b] :] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        cache = DynamicCache(config=self._lm.config)
        budget = max(r.request.sampling.max_new_tokens for r in rows)
        for row in rows:
            if row.request.sampling.max_new_tokens <= 0:
                row.finish_reason = "length"
        live = [r.finish_reason is None for r in rows]
        # Rows with the same prompt (the m votes of one judged turn) share one prefill: prefill each distinct
        # prompt once, then give every row a copy of its prompt's cache and last hidden state.
        distinct: dict[tuple, int] = {}
        owner = [distinct.setdefault(tuple(r.request.prompt_ids), len(distinct)) for r in rows]
        first = [owner.index(u) for u in range(len(distinct))]
        step_ids, step_mask, step_pos = ids[first], mask[first], positions[first]
        self.stats["prefill_rows"] += len(first)
        for step in range(budget):
            if not any(live):
                break
            self.stats["decode_steps"] += 1
            hidden = self._forward_hidden(
                selected,
                input_ids=step_ids,
                attention_mask=step_mask,
                position_ids=step_pos,
                use_cache=True,
                **{self._cache_kw: cache},
            )
            if step == 0 and len(first) < len(rows):
                index = torch.tensor(owner, device=self.device)
                cache.batch_select_indices(index)
                hidden, step_pos = hidden[index], positions
            with torch.inference_mode():
                logits = self._logits(hidden[:, -1, :])
            next_ids = []
            for b, row in enumerate(rows):
                if not live[b]:
                    next_ids.append(self.pad_id)
                    continue
                token, logprob = _sample(logits[b], row.request.sampling, row.generator)
                row.tokens.append(token)
                row.logprobs.append(logprob)
                next_ids.append(token)
                if row.job.on_token is not None:
                    try:
                        row.job.on_token(row.index, token)
                    except Exception:  # noqa: BLE001 - a broken stream consumer must not kill the batch
                        logger.exception("on_token callback failed")
                self._check_finished(row)
                live[b] = row.finish_reason is None
            step_ids = torch.tensor(next_ids, dtype=torch.long, device=self.device)[:, None]
            step_pos = step_pos[:, -1:] + 1
            mask = torch.cat([mask, torch.ones((len(rows), 1), dtype=mask.dtype, device=self.device)], dim=1)
            step_mask = mask
            if yield_to_serving and any(live):
                self._serve_first()
                if self._closing:
                    raise RuntimeError("HFEngine closed")

    def _check_finished(self, row: _Row) -> None:
        sp = row.request.sampling
        if row.tokens[-1] in self.eos_ids:
            row.finish_reason = "stop"
        elif sp.stop and _hits_stop(self.tokenizer, row.tokens, sp.stop):
            row.finish_reason = "stop"
        elif len(row.tokens) >= sp.max_new_tokens:
            row.finish_reason = "length"

    # ------------------------------------------------------------------ scoring
    def score(
        self,
        prompt_ids: list[list[int]],
        completion_ids: list[list[int]],
        weights: Weights = "base",
        top_k: int = 0,
        temperature: float = 1.0,
        priority: Priority = "learn",
    ) -> Scores:
        """Per-token log-probs of each completion given its prompt (``log_softmax(logits / T)``, full vocab).

        The log-prob of completion token ``j`` comes from the logits at position ``P - 1 + j`` of the
        concatenated sequence (``P`` = prompt length), so the first completion token is included. Logits are
        only computed for completion positions. ``top_k > 0`` adds the K most likely ids and their log-probs at
        every completion position. Pairs are sorted by length and packed into forwards of at most
        ``score_batch_tokens`` padded tokens. A ``learn`` call waits before each forward until no ``serve``
        generation is queued or running.
        """
        import torch

        check_priority(priority)

        if len(prompt_ids) != len(completion_ids):
            raise ValueError("prompt_ids and completion_ids must have the same length")
        if temperature <= 0:
            raise ValueError("score temperature must be > 0 (use 1.0 for greedy turns)")
        n = len(prompt_ids)
        out_lp: list[list[float]] = [[] for _ in range(n)]
        out_ids: list[list[list[int]]] = [[] for _ in range(n)]
        out_tlp: list[list[list[float]]] = [[] for _ in range(n)]
        order = sorted(range(n), key=lambda i: len(prompt_ids[i]) + len(completion_ids[i]))
        chunks, cur, cur_w = [], [], 0
        for i in order:
            if not completion_ids[i]:
                continue
            if not prompt_ids[i]:
                raise ValueError("score needs at least one prompt token per pair")
            total = len(prompt_ids[i]) + len(completion_ids[i])
            if cur and max(cur_w, total) * (len(cur) + 1) > self.score_batch_tokens:
                chunks.append(cur)
                cur, cur_w = [], 0
            cur.append(i)
            cur_w = max(cur_w, total)
        if cur:
            chunks.append(cur)

        selected, _ = self._pin(weights)
        try:
            for chunk in chunks:
                seqs = [list(prompt_ids[i]) + list(completion_ids[i]) for i in chunk]
                width = max(len(s) for s in seqs)
                ids = torch.full((len(seqs), width), self.pad_id, dtype=torch.long)
                mask = torch.zeros((len(seqs), width), dtype=torch.long)
                for b, s in enumerate(seqs):  # right padding: real tokens keep positions 0..len-1
                    ids[b, : len(s)] = torch.tensor(s, dtype=torch.long)
                    mask[b, : len(s)] = 1
                ids, mask = ids.to(self.device), mask.to(self.device)
                if priority == "learn":
                    self._learn_turn()
                try:
                    hidden = self._forward_hidden(
                        selected, input_ids=ids, attention_mask=mask, use_cache=False
                    )
                finally:
                    if priority == "learn":
                        self._model_lock.release()
                rows_idx, cols_idx, targets = [], [], []
                for b, i in enumerate(chunk):
                    p, r = len(prompt_ids[i]), len(completion_ids[i])
                    rows_idx += [b] * r
                    cols_idx += range(p - 1, p + r - 1)
                    targets += completion_ids[i]
                with torch.inference_mode():
                    h = hidden[
                        torch.tensor(rows_idx, device=self.device), torch.tensor(cols_idx, device=self.device)
                    ]
                    tgt = torch.tensor(targets, device=self.device)
                    vocab = self._lm.get_output_embeddings().weight.shape[0]
                    step = max(1, self.score_logits_elems // vocab)
                    lps, tids, tlps = [], [], []
                    for s in range(0, h.shape[0], step):
                        logp = torch.log_softmax(self._logits(h[s : s + step]) / temperature, dim=-1)
                        lps.append(logp.gather(-1, tgt[s : s + step, None])[:, 0])
                        if top_k > 0:
                            v, k = logp.topk(min(top_k, logp.shape[-1]), dim=-1)
                            tlps.append(v)
                            tids.append(k)
                    flat_lp = torch.cat(lps).cpu().tolist()
                    flat_ids = torch.cat(tids).cpu().tolist() if top_k > 0 else None
                    flat_tlp = torch.cat(tlps).cpu().tolist() if top_k > 0 else None
                pos = 0
                for i in chunk:
                    r = len(completion_ids[i])
                    out_lp[i] = flat_lp[pos : pos + r]
                    if top_k > 0:
                        out_ids[i] = flat_ids[pos : pos + r]
                        out_tlp[i] = flat_tlp[pos : pos + r]
                    pos += r
        finally:
            self._unpin(selected)
        if top_k > 0:
            return Scores(out_lp, out_ids, out_tlp)
        return Scores(out_lp)

    def close(self) -> None:
        """Stop the worker (queued requests fail with an error)."""
        if not self._closed:
            self._closed = True
            with self._serve_cond:
                self._serve_cond.notify_all()
            self._queue.put(None)
            self._worker.join(timeout=30)
            _fail_queued(self._queue, "HFEngine closed")

    def __enter__(self) -> HFEngine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _fail_queued(q: queue.Queue, message: str) -> None:
    """Release callers whose jobs were still queued when the worker stopped."""
    while True:
        try:
            job = q.get_nowait()
        except queue.Empty:
            return
        if job is not None:
            job.error = RuntimeError(message)
            job.done.set()


def _sample(logits, sp: SamplingParams, generator) -> tuple[int, float]:
    """Sample one token from a ``[V]`` float32 logits row; return ``(token, logprob at the convention T)``."""
    import torch

    logp = torch.log_softmax(logits / sp.logprob_temperature, dim=-1)
    if sp.temperature <= 0:
        token = int(torch.argmax(logits))
        return token, float(logp[token])
    scaled = logits / sp.temperature
    if sp.top_k and 0 < sp.top_k < scaled.shape[-1]:
        kth = torch.topk(scaled, sp.top_k).values[-1]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    if sp.top_p < 1.0:
        sorted_vals, sorted_idx = torch.sort(scaled, descending=True)
        probs = torch.softmax(sorted_vals, dim=-1)
        # drop a token once the mass of the tokens strictly before it already reaches top_p
        drop = (probs.cumsum(-1) - probs) >= sp.top_p
        scaled = scaled.scatter(0, sorted_idx[drop], float("-inf"))
    probs = torch.softmax(scaled, dim=-1)
    token = int(torch.multinomial(probs, 1, generator=generator))
    return token, float(logp[token])


def _hits_stop(tokenizer, tokens: list[int], stops: list[str]) -> bool:
    """True when the text of the last few tokens contains a stop string (which just got completed)."""
    window = 4 * max(len(s) for s in stops) + 8
    text = tokenizer.decode(tokens[-window:], skip_special_tokens=False)
    return any(s and s in text for s in stops)
