"""Tensor steps of the Transformers engine: padding, shared prefills, sampling, stop strings, score packing.

Conventions (those of ``engines/base.py``): a returned log-prob is ``log_softmax(logits / T)`` over the full
vocabulary at the request's ``logprob_temperature``; top-k / top-p truncation only shapes the distribution a
token is *drawn* from. Generation batches are left-padded (every row's last prompt token sits in the last
column, positions count real tokens only); scoring batches are right-padded (real tokens keep positions
``0 .. len - 1``).
"""

from __future__ import annotations

from openclaw_trl.engines.base import SamplingParams


def padded_batch(seqs: list[list[int]], pad_id: int, device, left: bool):
    """``(ids, mask)`` ``[B, max_len]`` long tensors on ``device``; padding on the left or on the right."""
    import torch

    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for b, seq in enumerate(seqs):
        if not seq:
            continue
        cols = slice(width - len(seq), width) if left else slice(0, len(seq))
        ids[b, cols] = torch.tensor(seq, dtype=torch.long)
        mask[b, cols] = 1
    return ids.to(device), mask.to(device)


def shared_prefill(prompts: list[list[int]], weights: list | None = None) -> tuple[list[int], list[int]]:
    """Rows with the same prompt (the votes of one judged turn) share one prefill; with ``weights`` (one per
    row, a mixed batch) only rows that also have the same weights do.

    Returns ``(owner, first)``: ``owner[b]`` is the distinct prompt of row ``b``, ``first[u]`` the first row
    with distinct prompt ``u`` (the rows that are prefilled).
    """
    distinct: dict[tuple, int] = {}
    keys = (
        [tuple(p) for p in prompts] if weights is None else [(w, tuple(p)) for w, p in zip(weights, prompts)]
    )
    owner = [distinct.setdefault(key, len(distinct)) for key in keys]
    first = [owner.index(u) for u in range(len(distinct))]
    return owner, first


def sample_token(logits, sp: SamplingParams, generator) -> tuple[int, float]:
    """Sample one token from a ``[V]`` float32 logits row; return ``(token, logprob at the convention T)``.

    Greedy (``temperature == 0``) takes the argmax. Otherwise the draw is from ``softmax(logits / T)`` after
    top-k (keep the ``top_k`` largest) and top-p (drop a token once the mass strictly before it reaches
    ``top_p``) truncation.
    """
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
        drop = (probs.cumsum(-1) - probs) >= sp.top_p
        scaled = scaled.scatter(0, sorted_idx[drop], float("-inf"))
    probs = torch.softmax(scaled, dim=-1)
    token = int(torch.multinomial(probs, 1, generator=generator))
    return token, float(logp[token])


def hits_stop(tokenizer, tokens: list[int], stops: list[str]) -> bool:
    """True when the text of the last few tokens contains a stop string (which just got completed)."""
    window = 4 * max(len(s) for s in stops) + 8
    text = tokenizer.decode(tokens[-window:], skip_special_tokens=False)
    return any(s and s in text for s in stops)


def pack_score_chunks(
    prompt_ids: list[list[int]], completion_ids: list[list[int]], budget_tokens: int
) -> list[list[int]]:
    """Pair indices sorted by length and packed into chunks of at most ``budget_tokens`` padded tokens
    (``longest x rows``; a single pair longer than the budget gets a chunk of its own). Pairs with an empty
    completion are left out: they have nothing to score."""
    order = sorted(range(len(prompt_ids)), key=lambda i: len(prompt_ids[i]) + len(completion_ids[i]))
    chunks, cur, width = [], [], 0
    for i in order:
        if not completion_ids[i]:
            continue
        total = len(prompt_ids[i]) + len(completion_ids[i])
        if cur and max(width, total) * (len(cur) + 1) > budget_tokens:
            chunks.append(cur)
            cur, width = [], 0
        cur.append(i)
        width = max(width, total)
    if cur:
        chunks.append(cur)
    return chunks


def completion_positions(prompt_lens: list[int], completions: list[list[int]]):
    """``(rows, cols, targets)`` of every completion token in a right-padded batch of ``prompt + completion``.

    Completion token ``j`` of row ``b`` is predicted by the logits at position ``P - 1 + j`` (``P`` = the
    prompt length), so the first completion token is included.
    """
    rows, cols, targets = [], [], []
    for b, (p, completion) in enumerate(zip(prompt_lens, completions)):
        rows += [b] * len(completion)
        cols += range(p - 1, p + len(completion) - 1)
        targets += completion
    return rows, cols, targets


def split_flat(flat: list, lengths: list[int]) -> list[list]:
    """Cut ``flat`` into consecutive pieces of ``lengths``."""
    pieces, pos = [], 0
    for n in lengths:
        pieces.append(flat[pos : pos + n])
        pos += n
    return pieces
