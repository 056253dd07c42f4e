"""What ``VLLMServerEngine`` sends to a vLLM OpenAI-compatible server and how it reads the answers.

* A generation streams ``/v1/completions`` with the prompt as token ids (``return_token_ids``; ``logprobs=0``:
  the sampled token's log-prob); a continuation after a switch of server sends prompt + the tokens so far and
  asks for the tokens left (:func:`completion_body`, :func:`take_chunk`, :class:`Sampled`).
* A score sends ``prompt + completion`` with ``max_tokens=1`` and reads ``prompt_logprobs`` at the completion
  positions: the requested top-K at temperature 1, the full vocabulary (``-1``) at another temperature
  (:func:`score_body`, :func:`prompt_logprob_scores`).
* A request with ``n`` candidates is sent as ``n`` single draws (:func:`single_draws`); the rows of one call
  are awaited together, and cancelled together when the caller stops waiting (:func:`results_in_order`).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from concurrent.futures import Future, wait
from dataclasses import dataclass, field

from openclaw_trl.engines.base import GenerationRequest
from openclaw_trl.engines.server_pool import ServerFailure
from openclaw_trl.engines.vllm_scores import scores_from_positions

logger = logging.getLogger(__name__)


@dataclass
class Sampled:
    """What one generation has produced so far (kept across a switch of server)."""

    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str | None = None
    gave_up: threading.Event | None = None  # set when the caller stopped waiting: end the stream


def results_in_order(futures: list[Future], timeout_s: float | None, gave_up: threading.Event) -> list:
    """The futures' results in order; after ``timeout_s`` seconds the rest is cancelled (queued rows never start,
    running streams end at their next chunk) and ``TimeoutError`` raised."""
    if timeout_s is not None and not timeout_s > 0:
        raise ValueError(f"timeout_s must be > 0 or None, got {timeout_s!r}")
    _, late = wait(futures, timeout=timeout_s)
    if late:
        gave_up.set()
        for future in late:
            future.cancel()
        raise TimeoutError(f"VLLMServerEngine: no result within {timeout_s} s; the work was cancelled")
    return [f.result() for f in futures]


def single_draws(request: GenerationRequest) -> list[GenerationRequest]:
    """``request`` as ``sampling.n`` requests of one draw each (the seed advanced per draw when seeded)."""
    sp = request.sampling
    if sp.n == 1:
        return [request]
    return [
        dataclasses.replace(
            request,
            sampling=dataclasses.replace(sp, n=1, seed=None if sp.seed is None else sp.seed + k),
        )
        for k in range(sp.n)
    ]


def completion_body(model: str, request: GenerationRequest, tokens: list[int], remaining: int) -> dict:
    """The streamed ``/v1/completions`` body of ``request`` on ``model``, continuing after ``tokens``."""
    sp = request.sampling
    greedy = sp.temperature <= 0
    return {
        "model": model,
        "prompt": list(request.prompt_ids) + tokens,
        "max_tokens": remaining,
        "temperature": 0.0 if greedy else sp.temperature,
        "top_p": 1.0 if greedy else sp.top_p,
        "top_k": 0 if greedy else sp.top_k,
        "seed": sp.seed,
        "stop": list(sp.stop),
        "include_stop_str_in_output": True,
        "skip_special_tokens": False,
        "logprobs": 0,
        "return_token_ids": True,
        "stream": True,
    }


def take_chunk(choice: dict, sampled: Sampled, index: int, on_token) -> None:
    """Append one streamed chunk's token ids and log-probs to ``sampled``, calling ``on_token`` for each; a
    chunk whose ids and log-probs disagree in number is a server failure."""
    ids = choice.get("token_ids") or []
    logprobs = (choice.get("logprobs") or {}).get("token_logprobs") or []
    if len(ids) != len(logprobs):
        raise ServerFailure(f"a chunk has {len(ids)} token ids but {len(logprobs)} log-probs")
    for token, logprob in zip(ids, logprobs):
        sampled.tokens.append(int(token))
        sampled.logprobs.append(float(logprob))
        if on_token is not None:
            try:
                on_token(index, int(token))
            except Exception:  # noqa: BLE001 - a broken stream consumer must not stop the generation
                logger.exception("on_token callback failed")
    if choice.get("finish_reason"):
        sampled.finish_reason = choice["finish_reason"]


def score_body(model: str, prompt: list[int], completion: list[int], top_k: int, temperature: float) -> dict:
    """The ``/v1/completions`` body that returns the prompt log-probs of ``prompt + completion``."""
    return {
        "model": model,
        "prompt": list(prompt) + list(completion),
        "max_tokens": 1,
        "temperature": 0.0,
        "prompt_logprobs": top_k if temperature == 1.0 else -1,
        "skip_special_tokens": False,
    }


def prompt_logprob_scores(plp: list, prompt_len: int, completion: list[int], temperature: float, top_k: int):
    """The completion's ``(logprobs, topk_ids, topk_logprobs)`` from a server's ``prompt_logprobs`` list."""
    positions = []
    for entry in plp[prompt_len : prompt_len + len(completion)]:
        keys = [int(k) for k in entry]
        positions.append((keys, [v["logprob"] for v in entry.values()], [v["rank"] for v in entry.values()]))
    return scores_from_positions(positions, completion, temperature, top_k)
