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
* A request that fails on its own (its generator cannot be seeded, its sampling step raises) fails alone: its
  caller gets the error and the other requests of the batch decode on. A failed forward fails the batch.
* ``score`` runs in the calling thread, in chunks of at most ``score_batch_tokens`` padded tokens. Every
  forward (a decode step or a score chunk) holds the model lock and selects its weights right before
  running; a ``learn`` chunk (the teacher) first waits until no ``serve`` generation is queued or running,
  so a chat request waits for at most one scoring chunk.
* Prefix reuse (``prefix_cache``): with ``prefix_cache_mb > 0`` a prompt of at least
  ``prefix_cache_min_tokens`` tokens (generation or scoring) starts from the KV of the longest prefix it shares
  with a prompt computed before on the same weights, and its own KV is kept for the next one (bounded, LRU).
  Each such prompt is then prefilled on its own (a batch gathers the prompts' caches, left-padded); shorter
  prompts keep the batched prefill.
* ``publish_adapter`` never touches weights that are in use: the engine owns its own model copy with two
  adapter slots (a double buffer, ``hf_model.SlottedModel``); requests in flight finish on the weights they
  started with. The trainer trains its own model copy; nothing is shared with it.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from openclaw_trl.engines.base import (
    Completion,
    GenerationRequest,
    Priority,
    Scores,
    Weights,
    check_generate_args,
    check_score_args,
    expand_candidates,
)
from openclaw_trl.engines.hf_decode import (
    completion_positions,
    hits_stop,
    pack_score_chunks,
    padded_batch,
    sample_token,
    shared_prefill,
    split_flat,
)
from openclaw_trl.engines.hf_model import SlottedModel
from openclaw_trl.engines.prefix_cache import (
    DEFAULT_PREFIX_CACHE_MB,
    DEFAULT_PREFIX_CACHE_MIN_TOKENS,
    PrefixCache,
    cache_layers,
    left_padded_cache,
    restored_cache,
    supported,
)
from openclaw_trl.engines.worker import EngineWorker, Job, Pending

logger = logging.getLogger(__name__)


@dataclass
class _Row:
    """Decoding state of one request inside a batch."""

    job: Job
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
        prefix_cache_mb: memory of the prompt KV cache in MiB (0 = off; see ``prefix_cache``).
        prefix_cache_min_tokens: shortest prompt that uses the prefix cache.
    """

    def __init__(
        self,
        model_path: str | Path,
        *,
        lora_config=None,
        device: str | None = None,
        dtype=None,
        max_batch_size: int = 16,
        batch_wait_s: float = 0.005,
        score_batch_tokens: int = 8192,
        score_logits_elems: int = 1 << 26,
        tokenizer=None,
        prefix_cache_mb: int = DEFAULT_PREFIX_CACHE_MB,
        prefix_cache_min_tokens: int = DEFAULT_PREFIX_CACHE_MIN_TOKENS,
    ) -> None:
        import torch

        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        if dtype is None:
            dtype = torch.float32 if self.device.type == "cpu" else torch.bfloat16
        elif isinstance(dtype, str):  # "float32", "bfloat16", … as written in recipes
            dtype = getattr(torch, dtype)
        self.dtype = dtype
        self.model_path = str(model_path)
        self.model = SlottedModel(self.model_path, self.device, dtype, tokenizer)
        self.tokenizer = self.model.tokenizer
        if lora_config is not None:
            self.model.wrap(lora_config)
        self.max_batch_size = max(1, int(max_batch_size))
        self.batch_wait_s = batch_wait_s
        self.score_batch_tokens = score_batch_tokens
        self.score_logits_elems = score_logits_elems
        self.stats = {
            "batches": 0,
            "requests": 0,
            "decode_steps": 0,
            "prefill_rows": 0,
            "prefill_tokens": 0,  # prompt tokens run through the model (prefills and scoring forwards)
        }  # for tests, benchmarks
        self.prefix_cache = PrefixCache(int(prefix_cache_mb) * 2**20, prefix_cache_min_tokens)
        if self.prefix_cache.enabled and not supported(self._new_cache()):
            logger.info("prefix cache off: this model's KV cache has sliding-window or recurrent layers")
            self.prefix_cache.disable()
        self._pending = Pending()  # rows admitted by the worker, not decoded yet (worker thread only)
        self._serving = 0  # serve generate calls queued or decoding (under _serve_cond)
        self._serve_cond = threading.Condition()
        self._closing = False
        self._worker = EngineWorker("HFEngine")
        self._worker.start(self._worker_loop)

    @property
    def policy_version(self) -> int:
        """The version of the adapter that serves ``policy`` (0 before the first publish)."""
        return self.model.policy_version

    @property
    def lora_config(self):
        return self.model.lora_config

    @property
    def pad_id(self) -> int:
        return self.model.pad_id

    def publish_adapter(self, adapter, version: int) -> None:
        """Make ``adapter`` (a PEFT state dict or a ``save_pretrained`` directory) the ``policy`` atomically:
        blocks until the inactive slot is free (at most one batch or score chunk) and the copy is done."""
        self.model.publish(adapter, version)
        self.prefix_cache.retain(self.model.served_keys())

    # ------------------------------------------------------------------ generation
    def generate(
        self, requests: list[GenerationRequest], on_token=None, priority: Priority = "serve"
    ) -> list[Completion]:
        """Sample completions; blocks until done. Thread-safe; concurrent callers share batches.

        ``on_token(index, token_id)`` is called from the engine's worker thread right after each token of
        ``requests[index]`` is sampled, so it must be cheap and thread-safe (e.g. ``loop.call_soon_threadsafe``).
        ``priority``: ``serve`` (chat) requests are decoded ahead of ``learn`` (judge) ones.
        ``sampling.n > 1``: the request becomes ``n`` rows with the same prompt, queued together, so they are
        decoded in one batch (when ``n <= max_batch_size``) after one prefill of the prompt (``_decode``).
        """
        if not requests:
            return []
        check_generate_args(requests, priority)
        rows = expand_candidates(requests)
        job = Job("gen", rows, size=len(rows), on_token=on_token, priority=priority)
        self._count_serving(job, +1)
        try:
            return self._worker.submit(job).results
        finally:
            self._count_serving(job, -1)

    def _count_serving(self, job: Job, delta: int) -> None:
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
                self._serve_cond.wait_for(lambda: self._serving == 0 or self._worker.closed)
            self.model.lock.acquire()
            if self._serving == 0 or self._worker.closed:
                return
            self.model.lock.release()

    def _worker_loop(self) -> None:
        while not self._closing:
            if not len(self._pending) and not self._admit(self._worker.next_job()):
                return
            if not self._collect(self.batch_wait_s):
                return
            self._run_next(self._pending.first())

    def _admit(self, job: Job | None) -> bool:
        """Queue the rows of ``job`` by priority; ``None`` (close) fails every pending row and returns False."""
        if job is None:
            self._closing = True
            self._pending.fail_all(RuntimeError("HFEngine closed"))
            return False
        self._pending.add(job)
        return True

    def _collect(self, wait_s: float) -> bool:
        """Admit every queued job; wait up to ``wait_s`` for more while less than a batch is pending."""
        deadline = time.monotonic() + wait_s
        while True:
            short = len(self._pending) < self.max_batch_size
            job = self._worker.next_job(deadline - time.monotonic() if short else 0)
            if job is False:
                return True
            if not self._admit(job):
                return False

    def _run_next(self, priority: Priority) -> None:
        """Decode one batch: the first pending row's weights, up to ``max_batch_size`` rows of ``priority``."""
        batch = self._pending.take(priority, self.max_batch_size, key=lambda job, i: job.payload[i].weights)
        if not batch:
            return
        try:
            self._run_batch(batch, batch[0][0].payload[batch[0][1]].weights)
        except BaseException as exc:  # noqa: BLE001 - the callers must see it, the worker must live on
            logger.exception("generation batch failed")
            for job, _ in batch:
                job.fail(exc)

    def _serve_first(self) -> None:
        """Between two decode steps of a ``learn`` batch: decode every ``serve`` request that arrived."""
        if self._collect(0.0):
            while self._pending.rows["serve"]:
                self._run_next("serve")

    def _make_generator(self, seed: int | None):
        import torch

        gen = torch.Generator(device=self.device)
        gen.manual_seed(seed if seed is not None else secrets.randbits(63))
        return gen

    def _run_batch(self, items: list[tuple[Job, int]], weights: Weights) -> None:
        rows = []
        for job, i in items:
            try:
                rows.append(_Row(job, i, job.payload[i], self._make_generator(job.payload[i].sampling.seed)))
            except Exception as exc:  # noqa: BLE001 - one request's bad input fails that request alone
                self._fail_row(job, exc)
        rows = [row for row in rows if not row.job.done.is_set()]
        if not rows:
            return
        self.stats["batches"] += 1
        self.stats["requests"] += len(rows)
        selected, version = self.model.pin(weights)
        try:
            self._decode(rows, selected, yield_to_serving=items[0][0].priority == "learn")
        finally:
            self.model.unpin(selected)
        for row in rows:
            if row.job.error is not None:  # failed alone (``_fail_row``): its caller has its error already
                continue
            finish = row.finish_reason or "length"
            row.job.finish_one(row.index, Completion(row.tokens, row.logprobs, finish, version))  # type: ignore[arg-type]

    @staticmethod
    def _fail_row(job: Job, exc: BaseException) -> None:
        """Fail the request of one row and only it: the other rows of the batch decode on (a request's own
        bad input, e.g. a seed no generator takes, never fails the requests batched with it)."""
        logger.warning("a generation request failed alone: %r", exc)
        job.fail(exc)

    def _decode(self, rows: list[_Row], selected: str, yield_to_serving: bool = False) -> None:
        """The batched decode loop: prefill the left-padded prompts, then one token per row per step.

        Rows with the same prompt share one prefill (``shared_prefill``): each distinct prompt is prefilled
        once, then every row gets a copy of its prompt's cache and last hidden state.
        ``yield_to_serving``: after every step, decode the ``serve`` requests that arrived (``_serve_first``).
        """
        import torch

        ids, mask = padded_batch([r.request.prompt_ids for r in rows], self.pad_id, self.device, left=True)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        for row in rows:
            if row.request.sampling.max_new_tokens <= 0:
                row.finish_reason = "length"
        owner, first = shared_prefill([r.request.prompt_ids for r in rows])
        self.stats["prefill_rows"] += len(first)
        cache, step_ids, step_pos = None, None, positions
        for step in range(max(r.request.sampling.max_new_tokens for r in rows)):
            if all(r.finish_reason is not None for r in rows):
                break
            self.stats["decode_steps"] += 1
            if step == 0:
                prompts = [rows[u].request.prompt_ids for u in first]
                cache, hidden = self._prefill(
                    selected, prompts, owner, ids[first], mask[first], positions[first]
                )
            else:
                hidden = self.model.forward_hidden(
                    selected,
                    input_ids=step_ids,
                    attention_mask=mask,
                    position_ids=step_pos,
                    use_cache=True,
                    **{self.model.cache_kw: cache},
                )[:, -1, :]
            with torch.inference_mode():
                logits = self.model.logits(hidden)
            step_ids = torch.tensor(self._sample_step(rows, logits), dtype=torch.long, device=self.device)[
                :, None
            ]
            step_pos = step_pos[:, -1:] + 1
            mask = torch.cat([mask, torch.ones((len(rows), 1), dtype=mask.dtype, device=self.device)], dim=1)
            if yield_to_serving and any(r.finish_reason is None for r in rows):
                self._serve_first()
                if self._closing:
                    raise RuntimeError("HFEngine closed")

    def _new_cache(self):
        from transformers import DynamicCache

        return DynamicCache(config=self.model.lm.config)

    def _prefill(self, selected: str, prompts: list[list[int]], owner: list[int], ids, mask, positions):
        """``(KV cache of the batch, last hidden state of each row [B, H])`` for the distinct ``prompts``
        (row ``b`` holds ``prompts[owner[b]]``; ``ids``, ``mask`` and ``positions`` are the left-padded
        distinct prompts): one batched forward, or with the prefix cache one forward per prompt on top of
        its longest cached prefix."""
        import torch

        if any(self.prefix_cache.applies(p) for p in prompts):
            per_prompt = [self._forward_on_prefix(selected, p, len(p) - 1) for p in prompts]
            self.stats["prefill_tokens"] += sum(
                len(p) - reused for p, (_, _, reused) in zip(prompts, per_prompt)
            )
            layers = [layers for layers, _, _ in per_prompt]
            cache = left_padded_cache(self.model.lm.config, layers, ids.shape[1], owner)
            index = torch.tensor(owner, device=self.device)
            return cache, torch.cat([hidden[:, -1, :] for _, hidden, _ in per_prompt])[index]
        self.stats["prefill_tokens"] += sum(len(p) for p in prompts)
        cache = self._new_cache()
        hidden = self.model.forward_hidden(
            selected,
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            use_cache=True,
            **{self.model.cache_kw: cache},
        )[:, -1, :]
        if len(prompts) < len(owner):
            index = torch.tensor(owner, device=self.device)
            cache.batch_select_indices(index)
            hidden = hidden[index]
        return cache, hidden

    def _forward_on_prefix(self, selected: str, seq: list[int], limit: int, learn: bool = False):
        """``(per-layer KV of seq, hidden states of seq[reused:], reused)``: ``seq`` run alone on top of its
        longest prefix (at most ``limit`` tokens) cached for the weights ``selected`` holds, and kept in the
        prefix cache for the next sequences; ``learn`` waits for its turn first (``_learn_turn``)."""
        import torch

        key = self.model.weights_key(selected)
        reused, layers = self.prefix_cache.lookup(key, seq, limit)
        cache = restored_cache(self.model.lm.config, layers)
        if learn:
            self._learn_turn()
        try:
            hidden = self.model.forward_hidden(
                selected,
                input_ids=torch.tensor([seq[reused:]], dtype=torch.long, device=self.device),
                attention_mask=torch.ones((1, len(seq)), dtype=torch.long, device=self.device),
                position_ids=torch.arange(reused, len(seq), device=self.device)[None],
                use_cache=True,
                **{self.model.cache_kw: cache},
            )
        finally:
            if learn:
                self.model.lock.release()
        layers = cache_layers(cache)
        self.prefix_cache.store(key, seq, layers)
        return layers, hidden, reused

    def _sample_step(self, rows: list[_Row], logits) -> list[int]:
        """Sample the next token of every live row, stream it and check its end; the next input ids."""
        next_ids = []
        for b, row in enumerate(rows):
            if row.finish_reason is None and row.job.error is not None:  # a row of its job failed
                row.finish_reason = "length"
            if row.finish_reason is not None:
                next_ids.append(self.pad_id)
                continue
            try:
                token, logprob = sample_token(logits[b], row.request.sampling, row.generator)
            except Exception as exc:  # noqa: BLE001 - this request alone fails
                self._fail_row(row.job, exc)
                row.finish_reason = "length"
                next_ids.append(self.pad_id)
                continue
            row.tokens.append(token)
            row.logprobs.append(logprob)
            next_ids.append(token)
            row.job.stream(row.index, token)
            self._check_finished(row)
        return next_ids

    def _check_finished(self, row: _Row) -> None:
        sp = row.request.sampling
        if row.tokens[-1] in self.model.eos_ids:
            row.finish_reason = "stop"
        elif sp.stop and hits_stop(self.tokenizer, row.tokens, sp.stop):
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

        Logits are only computed for completion positions (``completion_positions``). ``top_k > 0`` adds the K
        most likely ids and their log-probs at every completion position. Pairs are sorted by length and packed
        into forwards of at most ``score_batch_tokens`` padded tokens. A ``learn`` call waits before each forward
        until no ``serve`` generation is queued or running. With the prefix cache, a pair whose prompt uses it
        is run alone on top of the longest cached prefix of its prompt (the teacher's hint-augmented prompt
        shares everything before its last user message with the turns before), and its prompt is cached.
        """
        check_score_args(prompt_ids, completion_ids, weights, top_k, temperature, priority)
        per_pair: list[tuple[list, list, list]] = [([], [], []) for _ in prompt_ids]
        cached = [
            i
            for i, (p, c) in enumerate(zip(prompt_ids, completion_ids))
            if c and self.prefix_cache.applies(p)
        ]
        rest = sorted(set(range(len(prompt_ids))) - set(cached))
        selected, _ = self.model.pin(weights)
        try:
            for i in cached:
                per_pair[i] = self._score_cached(
                    selected, list(prompt_ids[i]), list(completion_ids[i]), top_k, temperature, priority
                )
            packed = pack_score_chunks(
                [prompt_ids[i] for i in rest], [completion_ids[i] for i in rest], self.score_batch_tokens
            )
            for chunk in ([rest[j] for j in part] for part in packed):
                prompts = [prompt_ids[i] for i in chunk]
                completions = [list(completion_ids[i]) for i in chunk]
                hidden = self._score_forward(selected, prompts, completions, priority)
                for i, scores in zip(
                    chunk, self._completion_scores(hidden, prompts, completions, top_k, temperature)
                ):
                    per_pair[i] = scores
        finally:
            self.model.unpin(selected)
        return Scores.from_pairs(per_pair, top_k)

    def _score_cached(
        self, selected: str, prompt: list[int], completion: list[int], top_k, temperature, priority
    ):
        """One pair's ``(logprobs, topk_ids, topk_logprobs)``, its prompt starting from the prefix cache (and
        the whole sequence cached: the next turn's prompt may go on from it)."""
        _, hidden, reused = self._forward_on_prefix(
            selected, prompt + completion, len(prompt) - 1, learn=priority == "learn"
        )
        return self._completion_scores(hidden, [prompt[reused:]], [completion], top_k, temperature)[0]

    def _score_forward(self, selected: str, prompts: list[list[int]], completions: list[list[int]], priority):
        """Hidden states of the right-padded ``prompt + completion`` rows; ``learn`` waits for its turn."""
        seqs = [list(p) + c for p, c in zip(prompts, completions)]
        ids, mask = padded_batch(seqs, self.pad_id, self.device, left=False)
        if priority == "learn":
            self._learn_turn()
        try:
            return self.model.forward_hidden(selected, input_ids=ids, attention_mask=mask, use_cache=False)
        finally:
            if priority == "learn":
                self.model.lock.release()

    def _completion_scores(self, hidden, prompts, completions, top_k: int, temperature: float):
        """Per row ``(logprobs, topk_ids, topk_logprobs)`` of its completion tokens, computing the logits in
        pieces of at most ``score_logits_elems`` elements."""
        import torch

        rows, cols, targets = completion_positions([len(p) for p in prompts], completions)
        with torch.inference_mode():
            h = hidden[torch.tensor(rows, device=self.device), torch.tensor(cols, device=self.device)]
            tgt = torch.tensor(targets, device=self.device)
            vocab = self.model.vocab_size
            step = max(1, self.score_logits_elems // vocab)
            lps, tids, tlps = [], [], []
            for s in range(0, h.shape[0], step):
                logp = torch.log_softmax(self.model.logits(h[s : s + step]) / temperature, dim=-1)
                lps.append(logp.gather(-1, tgt[s : s + step, None])[:, 0])
                if top_k > 0:
                    v, k = logp.topk(min(top_k, logp.shape[-1]), dim=-1)
                    tlps.append(v)
                    tids.append(k)
            lengths = [len(c) for c in completions]
            out_lp = split_flat(torch.cat(lps).cpu().tolist(), lengths)
            if top_k <= 0:
                return [(lp, [], []) for lp in out_lp]
            out_ids = split_flat(torch.cat(tids).cpu().tolist(), lengths)
            out_tlp = split_flat(torch.cat(tlps).cpu().tolist(), lengths)
        return list(zip(out_lp, out_ids, out_tlp))

    def close(self) -> None:
        """Stop the worker (queued requests fail with an error)."""
        self._worker.close(join_timeout_s=30)
        with self._serve_cond:
            self._serve_cond.notify_all()

    def __enter__(self) -> HFEngine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
