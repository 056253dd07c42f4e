"""vLLM request parameters and log-prob extraction for the vLLM engine.

Temperature convention (``engines/base.py``: ``log_softmax(logits / T)`` over the full vocabulary):

* Generation uses ``logprobs_mode="processed_logprobs"``: the sampled token's log-prob after temperature
  scaling, which is exactly the convention when no top-p/top-k truncation is requested (greedy requests:
  T = 1). vLLM *renormalises* processed log-probs over the truncated support when ``top_p < 1`` or
  ``top_k > 0``; for such requests the engine re-scores the finished completion with a prompt-log-prob pass on
  the same adapter, which gives the convention's values (at T = 1, and at any T when full-vocabulary
  log-probs are allowed). Otherwise it keeps vLLM's renormalised values and logs a warning once.
* ``score`` uses prefill-only requests (``max_tokens=1``) and reads vLLM's prompt log-probs at the completion
  positions, computed from the raw logits (T = 1). For another T they are renormalised as
  ``log_softmax(logprob / T)``, equal to ``log_softmax(logits / T)`` because log-softmax is shift invariant.
  That needs the full-vocabulary log-probs: ``max_logprobs=-1`` (or at least the vocabulary size), which costs
  a Python dict entry per position and vocabulary entry: fine for small vocabularies and tests, too slow for
  151k vocabularies. Without it, ``score(temperature != 1)`` raises a ``ValueError`` that says so.
"""

from __future__ import annotations

from openclaw_trl.engines.base import SamplingParams


def generation_params(sp: SamplingParams):
    """vLLM ``SamplingParams`` for one request: ``n`` candidates, streamed deltas, the stop text kept, the
    sampled log-prob."""
    from vllm import SamplingParams as VSamplingParams
    from vllm.sampling_params import RequestOutputKind

    greedy = sp.temperature <= 0
    return VSamplingParams(
        temperature=0.0 if greedy else sp.temperature,
        top_p=1.0 if greedy else sp.top_p,
        top_k=0 if greedy else sp.top_k,
        max_tokens=sp.max_new_tokens,
        seed=sp.seed,
        n=sp.n,
        stop=list(sp.stop) or None,
        include_stop_str_in_output=True,
        skip_special_tokens=False,
        logprobs=0,
        output_kind=RequestOutputKind.DELTA,
    )


def score_params(top_k: int, temperature: float):
    """Prefill-only vLLM ``SamplingParams`` returning prompt log-probs: the top ``top_k`` at T = 1, the full
    vocabulary (``-1``) at any other temperature."""
    from vllm import SamplingParams as VSamplingParams
    from vllm.sampling_params import RequestOutputKind

    return VSamplingParams(
        max_tokens=1,
        temperature=0.0,
        prompt_logprobs=-1 if temperature != 1.0 else top_k,
        flat_logprobs=True,  # flat arrays instead of a Logprob object per position and token
        detokenize=False,
        output_kind=RequestOutputKind.FINAL_ONLY,
    )


def completion_scores(prompt_logprobs, prompt_len: int, tokens: list[int], temperature: float, top_k: int):
    """``(logprobs, topk_ids, topk_logprobs)`` of the completion ``tokens`` that follow ``prompt_len`` prompt
    tokens, from a finished prompt-log-prob request (top-K sorted by vLLM's rank, most likely first)."""
    return scores_from_positions(
        _positions(prompt_logprobs, prompt_len, len(tokens)), tokens, temperature, top_k
    )


def scores_from_positions(positions, tokens: list[int], temperature: float, top_k: int):
    """``(logprobs, topk_ids, topk_logprobs)`` of ``tokens`` from raw (T = 1) prompt log-probs, one
    ``(token ids, log-probs, ranks)`` triple per completion position (each id at most once): read as they are
    at T = 1, renormalised as ``log_softmax(logprob / T)`` otherwise (then the triples must cover the
    vocabulary)."""
    if temperature != 1.0:
        return _renormalise(positions, tokens, temperature, top_k)
    lps, ids, vals = [], [], []
    for (keys, values, ranks), token in zip(positions, tokens):
        lps.append(float(values[keys.index(token)]))
        if top_k > 0:
            ranked = sorted(zip(ranks, keys, values))[:top_k]
            ids.append([int(k) for _, k, _ in ranked])
            vals.append([float(v) for _, _, v in ranked])
    return lps, ids, vals


def _positions(plp, start: int, n: int) -> list[tuple[list[int], list[float], list[int]]]:
    """``(token ids, log-probs, ranks)`` at prompt positions ``start .. start + n - 1``.

    Reads vLLM's ``FlatLogprobs`` arrays directly when present (``flat_logprobs=True``: no per-token objects),
    else the classic list of ``{token_id: Logprob}`` dicts.
    """
    if hasattr(plp, "start_indices"):
        out = []
        for i in range(start, start + n):
            lo, hi = plp.start_indices[i], plp.end_indices[i]
            # The realised token comes first and again inside the top-K / full-vocabulary list: keep it once
            # (a duplicate would count its probability twice when renormalising).
            seen = {}
            for k, v, r in zip(plp.token_ids[lo:hi], plp.logprobs[lo:hi], plp.ranks[lo:hi]):
                seen.setdefault(k, (v, r))
            out.append((list(seen), [v for v, _ in seen.values()], [r for _, r in seen.values()]))
        return out
    return [
        (list(d.keys()), [v.logprob for v in d.values()], [v.rank for v in d.values()])
        for d in (plp[i] for i in range(start, start + n))
    ]


def _renormalise(positions, tokens: list[int], temperature: float, top_k: int):
    """``log_softmax(logprob / T)`` from full-vocabulary raw prompt log-probs (shift invariance of log-softmax)."""
    import torch

    lps, ids, vals = [], [], []
    for (keys, values, _), token in zip(positions, tokens):
        keys_t = torch.tensor(keys, dtype=torch.long)
        scaled = torch.log_softmax(torch.tensor(values, dtype=torch.float64) / temperature, dim=-1)
        lps.append(float(scaled[keys.index(token)]))
        if top_k > 0:
            v, k = scaled.topk(min(top_k, scaled.numel()))
            ids.append(keys_t[k].tolist())
            vals.append(v.tolist())
    return lps, ids, vals
