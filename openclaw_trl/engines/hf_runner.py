"""The Transformers engine's computations: batched decoding and scoring, as steps the engine's thread runs.

Everything here runs on the engine's one owner thread (``hf.HFEngine``), which decides what runs next. Both
kinds of work are generators that ``yield`` after each bounded piece — one decode step of a batch, one scoring
chunk — so the owner can put a newly arrived chat request ahead of learning work between two pieces, and can
drop work whose caller gave up (``Job.cancelled``).

Decoding (``decode``): a left-padded batch with a KV cache (attention mask + explicit position ids), so one step
serves every row. Each row names its own weights (``base`` or a slot): a batch may mix users' adapters, each
forward then adds every row's own LoRA delta to one shared base projection (``hf_mixed``). Rows
with the same prompt and the same weights share one prefill (``shared_prefill``). Every sampled token's
log-prob is ``log_softmax(logits / T)`` over the full vocabulary (``engines/base.py``). A row whose own
sampling raises fails alone; the other rows decode on.

Scoring (``score``): per-token log-probs of each completion given its prompt, with logits computed only at
completion positions. Pairs are sorted by length and packed into forwards of at most ``score_batch_tokens``
padded tokens; logits are materialised in pieces of at most ``score_logits_elems`` elements.

Prefix reuse (``prefix_cache``): a prompt of at least ``prefix_cache_min_tokens`` tokens (generation or
scoring) starts from the KV of the longest prefix it shares with a prompt computed before on the same weights,
and its own KV is kept for the next one (bounded, LRU). Each such prompt is then run on its own (a batch
gathers the prompts' caches, left-padded); shorter prompts keep the batched prefill.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

from openclaw_trl.engines.base import GenerationRequest
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
    PrefixCache,
    cache_layers,
    left_padded_cache,
    restored_cache,
)
from openclaw_trl.engines.worker import Job

logger = logging.getLogger(__name__)

Steps = Generator[None, None, Any]
"""Work run one bounded piece per ``next()``; its return value (``StopIteration.value``) is the result."""


@dataclass
class Row:
    """Decoding state of one request inside a batch."""

    job: Job
    index: int  # position of the request in its job (the ``on_token`` index)
    request: GenerationRequest
    generator: Any
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str | None = None


def fail_row(job: Job, exc: BaseException) -> None:
    """Fail the request of one row and only it: the other rows of the batch decode on (a request's own bad
    input, e.g. a seed no generator takes, never fails the requests batched with it)."""
    logger.warning("a generation request failed alone: %r", exc)
    job.fail(exc)


class HFRunner:
    """Decode and score steps on a ``SlottedModel``; ``stats`` counts the work (tests, benchmarks)."""

    def __init__(
        self,
        model: SlottedModel,
        device,
        prefix_cache: PrefixCache,
        score_batch_tokens: int,
        score_logits_elems: int,
    ) -> None:
        self.model = model
        self.device = device
        self.prefix_cache = prefix_cache
        self.score_batch_tokens = score_batch_tokens
        self.score_logits_elems = score_logits_elems
        self.stats = {
            "batches": 0,
            "requests": 0,
            "decode_steps": 0,
            "prefill_rows": 0,
            "prefill_tokens": 0,  # prompt tokens run through the model (prefills and scoring forwards)
            "mixed_batches": 0,  # decode batches whose rows use more than one set of weights
            "deferred_rows": 0,  # rows sent back to wait for a slot for their adapter (``hf._pin_rows``)
        }

    def new_cache(self):
        from transformers import DynamicCache

        return DynamicCache(config=self.model.lm.config)

    def make_generator(self, seed: int | None):
        import torch

        gen = torch.Generator(device=self.device)
        gen.manual_seed(seed if seed is not None else secrets.randbits(63))
        return gen

    # ------------------------------------------------------------------ decoding
    def decode(self, rows: list[Row], selected: str | list[str]) -> Steps:
        """Prefill the left-padded prompts, then one token per live row per step; yields after every step.

        ``selected``: the weights of every row (one for all, or one per row). A row stops at its end token, a
        stop string, ``max_new_tokens``, or when its job was cancelled.
        """
        import torch

        self.stats["batches"] += 1
        self.stats["requests"] += len(rows)
        model = self.model
        ids, mask = padded_batch([r.request.prompt_ids for r in rows], model.pad_id, self.device, left=True)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        for row in rows:
            if row.request.sampling.max_new_tokens <= 0:
                row.finish_reason = "length"
        if isinstance(selected, str):
            selected = [selected] * len(rows)
        if len(selected) != len(rows):
            raise ValueError(f"decode needs one selection per row: {len(selected)} for {len(rows)} rows")
        mixed = len(set(selected)) > 1
        owner, first = shared_prefill([r.request.prompt_ids for r in rows], selected if mixed else None)
        if mixed:
            self.stats["mixed_batches"] += 1
        self.stats["prefill_rows"] += len(first)
        cache, step_ids, step_pos = None, None, positions
        for step in range(max(r.request.sampling.max_new_tokens for r in rows)):
            if all(r.finish_reason is not None or r.job.cancelled for r in rows):
                break
            self.stats["decode_steps"] += 1
            if step == 0:
                prompts = [rows[u].request.prompt_ids for u in first]
                cache, hidden = self._prefill(
                    [selected[u] for u in first], prompts, owner, ids[first], mask[first], positions[first]
                )
            else:
                hidden = model.forward_hidden(
                    selected,
                    input_ids=step_ids,
                    attention_mask=mask,
                    position_ids=step_pos,
                    use_cache=True,
                    **{model.cache_kw: cache},
                )[:, -1, :]
            with torch.inference_mode():
                logits = model.logits(hidden)
            next_ids = self._sample_step(rows, logits)
            step_ids = torch.tensor(next_ids, dtype=torch.long, device=self.device)[:, None]
            step_pos = step_pos[:, -1:] + 1
            mask = torch.cat([mask, torch.ones((len(rows), 1), dtype=mask.dtype, device=self.device)], dim=1)
            yield

    def _prefill(self, selected: list[str], prompts: list[list[int]], owner: list[int], ids, mask, positions):
        """``(KV cache of the batch, last hidden state of each row [B, H])`` for the distinct ``prompts``, run on
        ``selected[u]`` weights each (row ``b`` holds ``prompts[owner[b]]``; ``ids``, ``mask`` and ``positions``
        are the left-padded distinct prompts): one batched forward, or with the prefix cache one forward per
        prompt on top of its longest prefix cached for the same weights."""
        import torch

        if any(self.prefix_cache.applies(p) for p in prompts):
            per_prompt = [self.forward_on_prefix(s, p, len(p) - 1) for s, p in zip(selected, prompts)]
            self.stats["prefill_tokens"] += sum(
                len(p) - reused for p, (_, _, reused) in zip(prompts, per_prompt)
            )
            layers = [layers for layers, _, _ in per_prompt]
            cache = left_padded_cache(self.model.lm.config, layers, ids.shape[1], owner)
            index = torch.tensor(owner, device=self.device)
            return cache, torch.cat([hidden[:, -1, :] for _, hidden, _ in per_prompt])[index]
        self.stats["prefill_tokens"] += sum(len(p) for p in prompts)
        cache = self.new_cache()
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

    def forward_on_prefix(self, selected: str, seq: list[int], limit: int):
        """``(per-layer KV of seq, hidden states of seq[reused:], reused)``: ``seq`` run alone on top of its
        longest prefix (at most ``limit`` tokens) cached for the weights ``selected`` holds, and kept in the
        prefix cache for the next sequences."""
        import torch

        key = self.model.weights_key(selected)
        reused, layers = self.prefix_cache.lookup(key, seq, limit)
        cache = restored_cache(self.model.lm.config, layers)
        hidden = self.model.forward_hidden(
            selected,
            input_ids=torch.tensor([seq[reused:]], dtype=torch.long, device=self.device),
            attention_mask=torch.ones((1, len(seq)), dtype=torch.long, device=self.device),
            position_ids=torch.arange(reused, len(seq), device=self.device)[None],
            use_cache=True,
            **{self.model.cache_kw: cache},
        )
        layers = cache_layers(cache)
        self.prefix_cache.store(key, seq, layers)
        return layers, hidden, reused

    def _sample_step(self, rows: list[Row], logits) -> list[int]:
        """Sample the next token of every live row, stream it and check its end; the next input ids."""
        next_ids = []
        for b, row in enumerate(rows):
            if row.finish_reason is None and row.job.cancelled:  # failed, or its caller gave up
                row.finish_reason = "length"
            if row.finish_reason is not None:
                next_ids.append(self.model.pad_id)
                continue
            try:
                token, logprob = sample_token(logits[b], row.request.sampling, row.generator)
            except Exception as exc:  # noqa: BLE001 - this request alone fails
                fail_row(row.job, exc)
                row.finish_reason = "length"
                next_ids.append(self.model.pad_id)
                continue
            row.tokens.append(token)
            row.logprobs.append(logprob)
            next_ids.append(token)
            row.job.stream(row.index, token)
            self._check_finished(row)
        return next_ids

    def _check_finished(self, row: Row) -> None:
        sp = row.request.sampling
        if row.tokens[-1] in self.model.eos_ids:
            row.finish_reason = "stop"
        elif sp.stop and hits_stop(self.model.tokenizer, row.tokens, sp.stop):
            row.finish_reason = "stop"
        elif len(row.tokens) >= sp.max_new_tokens:
            row.finish_reason = "length"

    # ------------------------------------------------------------------ scoring
    def score(
        self,
        selected: str,
        prompt_ids: list[list[int]],
        completion_ids: list[list[int]],
        top_k: int,
        temperature: float,
        cancelled: Callable[[], bool],
    ) -> Steps:
        """Per pair ``(logprobs, topk_ids, topk_logprobs)``, one forward (a pair on the prefix cache, or a packed
        chunk) per step; stops early, returning None, once ``cancelled()``."""
        per_pair: list[tuple[list, list, list]] = [([], [], []) for _ in prompt_ids]
        cached = [
            i
            for i, (p, c) in enumerate(zip(prompt_ids, completion_ids))
            if c and self.prefix_cache.applies(p)
        ]
        rest = sorted(set(range(len(prompt_ids))) - set(cached))
        for i in cached:
            if cancelled():
                return None
            prompt, completion = list(prompt_ids[i]), list(completion_ids[i])
            _, hidden, reused = self.forward_on_prefix(selected, prompt + completion, len(prompt) - 1)
            per_pair[i] = self._completion_scores(
                hidden, [prompt[reused:]], [completion], top_k, temperature
            )[0]
            yield
        packed = pack_score_chunks(
            [prompt_ids[i] for i in rest], [completion_ids[i] for i in rest], self.score_batch_tokens
        )
        for chunk in ([rest[j] for j in part] for part in packed):
            if cancelled():
                return None
            prompts = [prompt_ids[i] for i in chunk]
            completions = [list(completion_ids[i]) for i in chunk]
            seqs = [list(p) + c for p, c in zip(prompts, completions)]
            ids, mask = padded_batch(seqs, self.model.pad_id, self.device, left=False)
            hidden = self.model.forward_hidden(selected, input_ids=ids, attention_mask=mask, use_cache=False)
            for i, scores in zip(
                chunk, self._completion_scores(hidden, prompts, completions, top_k, temperature)
            ):
                per_pair[i] = scores
            yield
        return per_pair

    def _completion_scores(self, hidden, prompts, completions, top_k: int, temperature: float):
        """Per row ``(logprobs, topk_ids, topk_logprobs)`` of its completion tokens, computing the logits in
        pieces of at most ``score_logits_elems`` elements."""
        import torch

        rows, cols, targets = completion_positions([len(p) for p in prompts], completions)
        with torch.inference_mode():
            h = hidden[torch.tensor(rows, device=self.device), torch.tensor(cols, device=self.device)]
            tgt = torch.tensor(targets, device=self.device)
            step = max(1, self.score_logits_elems // self.model.vocab_size)
            lps, tids, tlps = [], [], []
            for s in range(0, h.shape[0], step):
                logits = self.model.logits(h[s : s + step])
                if temperature != 1:  # x / 1 == x exactly: at T = 1 skip a copy of the logits (2% of a call)
                    logits = logits / temperature
                logp = torch.log_softmax(logits, dim=-1)
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
