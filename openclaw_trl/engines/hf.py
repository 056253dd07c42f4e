"""Transformers + PEFT engine (CPU, or GPU without vLLM): the serving path and the scorer in one model copy.

Why a hand-written decode loop instead of ``model.generate``: we need the exact log-prob of every sampled
token at the package's temperature convention (``log_softmax(logits / T)`` over the full vocabulary, no
top-p/top-k renormalisation, see ``engines/base.py``), a per-request ``torch.Generator`` so that seeds are
reproducible inside a shared batch, per-request sampling parameters and stop strings, and a per-token
callback for streaming. The computations are in ``hf_runner``; this module schedules them.

Concurrency model: one owner thread runs every computation on the model.

* ``generate`` and ``score`` may be called from any thread. Each call becomes a job on the engine's queue
  (``worker.EngineWorker``) and the caller waits for it. The owner thread collects what arrives within a short
  window (``batch_wait_s``, up to ``max_batch_size`` rows) and decodes the generation rows as one batch, whatever
  their weights (see below); a scoring job runs on its own, so while only scoring jobs wait the window is
  skipped (nothing could join them: waiting would only add its length to every ``score`` call).
* Serving goes ahead of learning (``priority``, see ``engines/base.py``). ``serve`` work runs to its end.
  ``learn`` work (judge votes, teacher scoring) runs one bounded piece at a time — one decode step of its batch,
  or one scoring forward — and before each piece the thread takes in new jobs and runs every waiting ``serve``
  job first. So a chat request waits for at most one piece of learning work. Learning is never starved: when
  chat requests keep arriving back to back (several users, an agent's parallel calls), learning work that has
  waited ``learn_max_wait_s`` gets one piece between two serve batches, so the judge and the teacher keep
  turning replies into samples at a bounded cost to serving (one piece per serve batch while overdue).
* A caller that gives up (``timeout_s``) cancels its job: rows not started are dropped, rows in progress stop at
  the next step, a scoring job stops before its next forward; the caller gets ``TimeoutError``.
* A request that fails on its own (its generator cannot be seeded, its sampling step raises) fails alone: its
  caller gets the error and the other requests of the batch decode on. A failed forward fails its batch, except
  when it ran out of memory: the prompt KV cache is emptied and each request of the batch is decoded on its own
  (one that had streamed tokens already, or runs out of memory alone, fails alone).
* ``publish_adapter`` never touches weights that are in use: the engine owns its own model copy with
  ``max_adapters + 1`` adapter slots (``hf_model.SlottedModel``, rules in ``hf_slots``); work in flight finishes
  on the weights it started with. The trainer trains its own model copy; nothing is shared with it.

One adapter per user: a request's ``adapter`` names whose adapter ``policy`` means (``None``: the run's only
adapter; one engine may serve ``None`` next to named users, it is one more name). Every adapter's latest
publish is kept on the CPU; the ``max_adapters`` most recently used are resident on the device, and work for
another one first refills a slot from its CPU copy (``hf_slots``: least recently used unpinned slot; the
worker never waits on a pin). Rows of different adapters, and ``base`` rows, are decoded in one batch
(``mix_adapters``): each row pins its own adapter's slot (``hf_slots``: several pins per task; a row whose
adapter would need a wait for a slot goes back to the head of the queue, for the next batch), every forward
runs the base projections once for all rows and adds each row's own LoRA delta (``hf_model``: mixed batches),
and each row reports its own adapter's version. Rows with the same prompt share a prefill only on the same
weights. With a LoRA setup ``hf_mixed`` does not mix (DoRA, a LoRA bias, …) or ``mix_adapters=False``, each batch has one
set of weights (``base`` rows of several adapters still share one). An adapter with no publish serves the base
weights at version 0. The prefix cache keys entries by publish, so a user's entries survive an eviction and a
refill of the same weights, and a row only reuses prompt KV computed on its own weights.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from openclaw_trl.engines.base import (
    Completion,
    GenerationRequest,
    Priority,
    Scores,
    Weights,
    check_adapter_name,
    check_generate_args,
    check_score_args,
    expand_candidates,
)
from openclaw_trl.engines.hf_model import SlottedModel
from openclaw_trl.engines.hf_runner import HFRunner, Row, Steps, fail_row
from openclaw_trl.engines.hf_schedule import OwnerSchedule
from openclaw_trl.engines.memory_budget import fit_budget
from openclaw_trl.engines.out_of_memory import free_cached_memory, is_out_of_memory
from openclaw_trl.engines.prefix_cache import (
    DEFAULT_PREFIX_CACHE_MB,
    DEFAULT_PREFIX_CACHE_MIN_TOKENS,
    PrefixCache,
    supported,
)
from openclaw_trl.engines.worker import EngineWorker, Job, Pending

logger = logging.getLogger(__name__)


@dataclass
class _ScoreSpec:
    """What a ``score`` job computes."""

    prompt_ids: list[list[int]]
    completion_ids: list[list[int]]
    weights: Weights
    top_k: int
    temperature: float
    adapter: str | None = None


def _group(row: Row) -> tuple:
    """The weights a row asks for: ``(weights, adapter)``; its pin gives the slot and the version it reports."""
    return row.request.weights, row.request.adapter


class HFEngine(OwnerSchedule):
    """Generation and scoring with a Transformers model and (optionally) LoRA policy adapters, one per user.

    Args:
        model_path: a directory (or Hub id) loadable by ``AutoModelForCausalLM``.
        lora_config: the ``peft.LoraConfig`` of the adapters that will be published. ``None``: take it from the
            first adapter directory published; until then ``policy`` serves the base weights.
        device: ``"cpu"``, ``"cuda"``, … (default: CUDA when available).
        dtype: model dtype, a ``torch.dtype`` or its name (default float32 on CPU, where bf16 is ~160x slower,
            bfloat16 on GPU).
        max_batch_size: most requests decoded together.
        batch_wait_s: how long the worker waits for more requests after the first generation request arrives
            (a scoring job runs on its own: it does not wait).
        score_batch_tokens: padded tokens per scoring forward (bounds activation memory).
        score_logits_elems: most ``positions x vocab`` logits materialised at once while scoring.
        tokenizer: an already loaded tokenizer (default: loaded from ``model_path``).
        prefix_cache_mb: memory of the prompt KV cache in MiB (0 = off; see ``prefix_cache``).
        prefix_cache_min_tokens: shortest prompt that uses the prefix cache.
        max_adapters: adapters resident on the device at once (``K``; one slot more is allocated as the double
            buffer). More users than that share the slots, least recently used first (module docstring).
        mix_adapters: decode rows of different adapters (and ``base`` rows) in one batch (module docstring);
            ``False``: one batch per weights. Ignored (one batch per weights) for LoRA setups ``hf_mixed`` does not mix.
        learn_max_wait_s: the longest learning work waits behind back-to-back serving before it gets one piece
            between two serve batches (module docstring).
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
        max_adapters: int = 1,
        mix_adapters: bool = True,
        learn_max_wait_s: float = 0.5,
    ) -> None:
        import torch

        if not isinstance(mix_adapters, bool):
            raise ValueError(f"mix_adapters must be True or False, got {mix_adapters!r}")
        if isinstance(max_adapters, bool) or not isinstance(max_adapters, int) or max_adapters < 1:
            raise ValueError(f"max_adapters must be an integer >= 1, got {max_adapters!r}")
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        if dtype is None:
            dtype = torch.float32 if self.device.type == "cpu" else torch.bfloat16
        elif isinstance(dtype, str):  # "float32", "bfloat16", … as written in recipes
            dtype = getattr(torch, dtype)
        self.dtype = dtype
        self.model_path = str(model_path)
        self.model = SlottedModel(self.model_path, self.device, dtype, tokenizer, max_adapters)
        self.tokenizer = self.model.tokenizer
        if lora_config is not None:
            self.model.wrap(lora_config)
        self.mix_adapters = mix_adapters
        self.max_batch_size = max(1, int(max_batch_size))
        self.batch_wait_s = batch_wait_s
        self.learn_max_wait_s = float(learn_max_wait_s)
        self._learn_clock: float | None = None  # since when learning work has waited (None: none waits)
        self.prefix_cache_budget = fit_budget("prefix_cache_mb", int(prefix_cache_mb) * 2**20, self.device)
        self._runner = HFRunner(
            self.model,
            self.device,
            PrefixCache(self.prefix_cache_budget.granted, prefix_cache_min_tokens),
            score_batch_tokens,
            score_logits_elems,
        )
        self.stats = self._runner.stats  # for tests, benchmarks
        if self.prefix_cache.enabled and not supported(self._runner.new_cache()):
            logger.info("prefix cache off: this model's KV cache has sliding-window or recurrent layers")
            self.prefix_cache.disable()
        self._pending = Pending()  # rows taken off the queue, not started yet (owner thread only)
        self._closing = False
        self._worker = EngineWorker("HFEngine")
        self._worker.start(self._worker_loop)

    @property
    def prefix_cache(self) -> PrefixCache:
        """The prompt KV cache the owner thread uses (read-only: its ``clear()`` empties it, its ``stats``
        count the reuse)."""
        return self._runner.prefix_cache

    def memory(self) -> dict:
        """What each memory budget holds (``/v1/status``'s ``memory``): the prompt KV cache's bytes against its
        budget (``prefix_cache_mb``, capped to the machine: ``memory_budget``), and the adapters' CPU copies (one
        per adapter, the authoritative weights: held whole, never evicted)."""
        budget = self.prefix_cache_budget
        adapters, copy_bytes = self.model.adapter_copies()
        return {
            "prefix_cache": {
                "bytes": self.prefix_cache.nbytes,
                "budget_bytes": self.prefix_cache.max_bytes,
                "requested_bytes": budget.requested,
                "capped_by": budget.capped_by,
                "entries": len(self.prefix_cache),
            },
            "adapter_copies": {"bytes": copy_bytes, "adapters": adapters},
        }

    @property
    def policy_version(self) -> int:
        """The version of the adapter that serves ``policy`` (0 before the first publish): ``adapter_version()``."""
        return self.model.adapter_version(None)

    def adapter_version(self, name: str | None = None) -> int:
        """The version of ``name``'s adapter (0 before its first publish; ``None``: the run's only adapter)."""
        check_adapter_name(name)
        return self.model.adapter_version(name)

    @property
    def max_adapters(self) -> int:
        return self.model.max_adapters

    @property
    def lora_config(self):
        return self.model.lora_config

    @property
    def pad_id(self) -> int:
        return self.model.pad_id

    def publish_adapter(self, adapter, version: int, name: str | None = None) -> None:
        """Make ``adapter`` (a PEFT state dict or a ``save_pretrained`` directory) the ``policy`` of ``name``
        atomically. Its CPU copy is taken at once; when ``name`` is resident the weights are also copied into a
        free slot, which may wait for the work pinned on the slot it needs. Returns once new work uses them."""
        check_adapter_name(name)
        self.model.publish(adapter, version, name)
        self.prefix_cache.retain(self.model.served_keys())

    # ------------------------------------------------------------------ the callers' side
    def generate(
        self,
        requests: list[GenerationRequest],
        on_token=None,
        priority: Priority = "serve",
        timeout_s: float | None = None,
    ) -> list[Completion]:
        """Sample completions; blocks until done. Thread-safe; concurrent callers share batches.

        ``on_token(index, token_id)`` is called from the engine's thread right after each token of
        ``requests[index]`` is sampled, so it must be cheap and thread-safe (e.g. ``loop.call_soon_threadsafe``).
        ``priority``: ``serve`` (chat) requests are decoded ahead of ``learn`` (judge) ones.
        ``sampling.n > 1``: the request becomes ``n`` rows with the same prompt, queued together, so they are
        decoded in one batch (when ``n <= max_batch_size``) after one prefill of the prompt.
        ``timeout_s``: give up after that many seconds (the work is cancelled, ``TimeoutError`` raised).
        """
        if not requests:
            return []
        check_generate_args(requests, priority)
        rows = expand_candidates(requests)
        job = Job("gen", rows, size=len(rows), on_token=on_token, priority=priority)
        return self._worker.submit(job, timeout_s).results

    def score(
        self,
        prompt_ids: list[list[int]],
        completion_ids: list[list[int]],
        weights: Weights = "base",
        top_k: int = 0,
        temperature: float = 1.0,
        priority: Priority = "learn",
        timeout_s: float | None = None,
        adapter: str | None = None,
    ) -> Scores:
        """Per-token log-probs of each completion given its prompt (``log_softmax(logits / T)``, full vocab);
        ``top_k > 0`` adds the K most likely ids and their log-probs at every completion position.

        A ``learn`` job yields to serving between two forwards. With the prefix cache, a pair whose prompt uses
        it is run alone on top of the longest cached prefix of its prompt (the teacher's hint-augmented prompt
        shares everything before its last user message with the turns before), and its sequence is cached.
        ``timeout_s``: as for ``generate``. ``adapter``: whose adapter ``policy`` means.
        """
        check_score_args(prompt_ids, completion_ids, weights, top_k, temperature, priority, adapter)
        if not prompt_ids:
            return Scores.from_pairs([], top_k)
        spec = _ScoreSpec(
            [list(p) for p in prompt_ids],
            [list(c) for c in completion_ids],
            weights,
            top_k,
            temperature,
            adapter,
        )
        job = Job("score", spec, priority=priority)
        return self._worker.submit(job, timeout_s).results[0]

    def close(self) -> None:
        """Stop the owner thread (work queued or in progress fails with an error)."""
        self._worker.close(join_timeout_s=30)

    def __enter__(self) -> HFEngine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _make_generator(self, seed: int | None):
        return self._runner.make_generator(seed)

    def _decode_steps(self, items: list[tuple[Job, int]], priority: Priority = "serve") -> Steps:
        """Decode one batch, each row on its own adapter's weights (``_pin_rows``), then hand every row's
        completion to its job."""
        rows = []
        for job, i in items:
            try:
                rows.append(Row(job, i, job.payload[i], self._make_generator(job.payload[i].sampling.seed)))
            except Exception as exc:  # noqa: BLE001 - one request's bad input fails that request alone
                fail_row(job, exc)
        rows = [row for row in rows if not row.job.cancelled]
        if not rows:
            return
        pins = self._pin_rows(rows, priority)
        try:
            kept = [row for row in rows if _group(row) in pins]
            deferred = [(row.job, row.index) for row in rows if _group(row) not in pins]
            if (
                deferred
            ):  # their adapters get a slot in the next batch (whose first row is pinned unconditionally)
                self.stats["deferred_rows"] += len(deferred)
                self._pending.rows[priority].extendleft(reversed(deferred))
            try:
                yield from self._runner.decode(kept, [pins[_group(row)][0] for row in kept])
            except Exception as exc:
                if len(kept) < 2 or not is_out_of_memory(exc):
                    raise
                kept = yield from self._decode_alone(kept, pins, exc)
        finally:
            for selected, _ in pins.values():
                self.model.unpin(selected)
        for row in kept:
            if not row.job.cancelled:
                finish = row.finish_reason or "length"
                done = Completion(row.tokens, row.logprobs, finish, pins[_group(row)][1])  # type: ignore[arg-type]
                row.job.finish_one(row.index, done)

    def _decode_alone(self, rows: list[Row], pins: dict, exc: BaseException) -> Steps:
        """After a batch ran out of memory: free the prompt KV cache (and CUDA's cached blocks), then decode
        each row again on its own, from its prompt (a seeded row samples the same tokens again). A row whose
        caller already received streamed tokens fails with the error instead (a restart would repeat them);
        a row that runs out of memory alone fails alone. Returns the rows decoded."""
        logger.warning(
            "a batch of %d requests ran out of memory (%s): the prompt KV cache is emptied and each request is "
            "decoded on its own",
            len(rows),
            exc,
        )
        self.prefix_cache.clear()
        free_cached_memory(self.device)
        done = []
        for row in rows:
            if row.tokens and row.job.on_token is not None:
                fail_row(row.job, exc)
                continue
            alone = Row(row.job, row.index, row.request, self._make_generator(row.request.sampling.seed))
            try:
                yield from self._runner.decode([alone], [pins[_group(row)][0]])
            except Exception as err:  # noqa: BLE001 - out of memory alone: this request fails alone
                if not is_out_of_memory(err):
                    raise
                fail_row(row.job, err)
                continue
            done.append(alone)
        return done

    def _pin_rows(self, rows: list[Row], priority: Priority) -> dict[tuple, tuple[str, int]]:
        """``(selected, version)`` per ``(weights, adapter)`` group of ``rows``, each slot pinned; the groups left
        out wait for the next batch.

        The first row's group is pinned unconditionally (as a lone batch would be: it may refill a slot, and
        waits only for a publisher's copy). The others are pinned only when that needs no wait and, for
        ``learn`` work, leaves a slot unpinned for a ``serve`` batch that starts meanwhile (``hf_slots``: several
        pins per task). Resident adapters are pinned before any refill, so a refill never evicts an adapter
        this batch is about to use. Without mixing, only groups on the first group's weights are kept.
        """
        groups = list(dict.fromkeys(_group(row) for row in rows))
        resident = set(self.model.resident())
        first, spare = groups[0], (0 if priority == "serve" else 1)

        def needs_refill(group) -> bool:
            weights, name = group
            return weights == "policy" and name not in resident and self.model.adapter_version(name) > 0

        plan = [(g, spare) for g in groups[1:] if not needs_refill(g)]
        if not self._mixing:
            plan = [(first, None)] + [(g, spare) for g in groups[1:]]
        elif needs_refill(first):  # the resident ones first, leaving a slot for the first group's refill
            plan = [(g, max(spare, 1)) for g, _ in plan] + [(first, None)]
        else:
            plan.insert(0, (first, None))
        plan += [(g, spare) for g in groups[1:] if needs_refill(g) and self._mixing]
        pins: dict[tuple, tuple[str, int]] = {}
        try:
            for group, keep in plan:
                got = self.model.pin(*group, spare=keep)
                if got is None:
                    continue
                if group != first and not self._mixing and got[0] != pins[first][0]:
                    self.model.unpin(got[0])
                    continue
                pins[group] = got
        except BaseException:
            for selected, _ in pins.values():
                self.model.unpin(selected)
            raise
        return pins

    def _score_steps(self, job: Job) -> Steps:
        """Score one job's pairs, one forward per piece."""
        spec: _ScoreSpec = job.payload
        selected, _ = self.model.pin(spec.weights, spec.adapter)
        try:
            per_pair = yield from self._runner.score(
                selected,
                spec.prompt_ids,
                spec.completion_ids,
                spec.top_k,
                spec.temperature,
                lambda: job.cancelled,
            )
        finally:
            self.model.unpin(selected)
        if per_pair is not None:
            job.finish_one(0, Scores.from_pairs(per_pair, spec.top_k))
