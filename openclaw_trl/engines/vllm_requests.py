"""The requests ``VLLMEngine`` has in vLLM: what each one carries, and how its outputs become completions.

A generation, a score and the re-score of a truncated-sampling generation are each one vLLM request, tracked
by a :class:`LiveRequest`. A generation with ``n > 1`` candidates is one vLLM request (vLLM's own ``n``) whose
candidates are one ``LiveRequest`` each; the request's result slot is filled once all ``n`` are complete.
Nothing here talks to vLLM: the engine adds and steps the requests, these functions build and fill them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from openclaw_trl.engines.base import Completion, GenerationRequest
from openclaw_trl.engines.worker import Job


@dataclass
class LiveRequest:
    """One vLLM request in flight and what its caller needs back.

    A generation with ``n > 1`` candidates is one vLLM request (``n`` in its sampling parameters); its
    ``candidates`` are one ``LiveRequest`` each (``candidate`` = vLLM's output index, ``stream_index`` = the
    flat position ``on_token`` names), and ``gathered`` collects their completions until all ``n`` are done.
    """

    kind: str  # "gen" | "score" | "rescore"
    job: Job
    index: int  # the request's result slot in its job
    lora: Any  # the LoRARequest it runs on (None = base weights)
    version: int
    request: GenerationRequest | None = None
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str = "length"
    prompt_len: int = 0
    top_k: int = 0
    temperature: float = 1.0
    candidate: int = 0
    stream_index: int = 0
    candidates: list[LiveRequest] = field(default_factory=list)
    gathered: dict[int, Completion] | None = None  # the parent's, shared by its candidates


def generation_request(job: Job, i: int, lora, version: int) -> LiveRequest:
    """Row ``i`` of a ``gen`` job as a live request on ``lora`` (with one candidate each when ``n > 1``)."""
    req = job.payload[i]
    live = LiveRequest("gen", job, i, lora, version, request=req)
    live.stream_index = sum(r.sampling.n for r in job.payload[:i])
    if req.sampling.n > 1:
        live.gathered = {}
        live.candidates = [
            LiveRequest(
                "gen",
                job,
                i,
                lora,
                version,
                request=req,
                candidate=k,
                stream_index=live.stream_index + k,
                gathered=live.gathered,
            )
            for k in range(req.sampling.n)
        ]
    return live


def take_generation_output(live: LiveRequest, out) -> None:
    """Append the tokens and log-probs of one vLLM step to the candidates that advanced, streaming each token."""
    for comp in out.outputs:  # one per candidate that advanced (n > 1: its ``index`` says which)
        cand = live.candidates[comp.index] if live.candidates else live
        for j, token in enumerate(comp.token_ids):
            cand.tokens.append(int(token))
            entry = comp.logprobs[j] if comp.logprobs is not None else None
            cand.logprobs.append(float(entry[token].logprob) if entry is not None else math.nan)
            live.job.stream(cand.stream_index, int(token))
        if comp.finish_reason is not None:
            cand.finish_reason = "length" if comp.finish_reason == "length" else "stop"


def rescore_request(live: LiveRequest) -> LiveRequest:
    """The re-score of a finished generation candidate (same adapter, its own temperature), which completes it."""
    again = LiveRequest(
        "rescore",
        live.job,
        live.index,
        live.lora,
        live.version,
        request=live.request,
        candidate=live.candidate,
        gathered=live.gathered,
    )
    again.tokens, again.finish_reason = live.tokens, live.finish_reason
    again.prompt_len, again.temperature = len(live.request.prompt_ids), live.request.sampling.temperature
    return again


def complete(live: LiveRequest) -> None:
    """Fill the request's result slot: its completion, or (``n > 1``) the list of its candidates once
    the last one is complete."""
    if live.gathered is None:
        live.job.finish_one(live.index, completion(live))
        return
    live.gathered[live.candidate] = completion(live)
    n = live.request.sampling.n
    if len(live.gathered) == n:
        live.job.finish_one(live.index, [live.gathered[k] for k in range(n)])


def completion(live: LiveRequest) -> Completion:
    return Completion(
        token_ids=list(live.tokens),
        logprobs=list(live.logprobs),
        finish_reason=live.finish_reason,  # type: ignore[arg-type]
        policy_version=live.version,
    )


class InVLLM:
    """The requests added to vLLM and not finished yet, under their vLLM request ids.

    Each one holds its LoRA adapter (``LoraRegistry.use``) while it runs, and the ``learn`` ones are counted
    (``learning``) so that the engine admits at most ``max_learn_requests`` of them. Only the engine's owner
    thread calls these methods.
    """

    def __init__(self, engine, loras, stats: dict) -> None:
        self._engine = engine  # vLLM's LLMEngine
        self._loras = loras
        self._stats = stats
        self._live: dict[str, LiveRequest] = {}
        self._next_rid = 0
        self.learning = 0

    def __bool__(self) -> bool:
        return bool(self._live)

    def add(self, live: LiveRequest, prompt: list[int], params) -> None:
        rid = f"r{self._next_rid}"
        self._next_rid += 1
        self._loras.use(live.lora, +1)
        self._live[rid] = live
        self.learning += live.job.priority == "learn"
        self._engine.add_request(rid, {"prompt_token_ids": list(prompt)}, params, lora_request=live.lora)
        self._stats["requests"] += 1

    def step(self, on_finished: Callable[[LiveRequest, Any], None]) -> None:
        """One vLLM step: generated tokens go to their requests, and ``on_finished(live, output)`` is called
        for each request that finished (after it left this table)."""
        outputs = self._engine.step()
        self._stats["steps"] += 1
        for out in outputs:
            live = self._live.get(out.request_id)
            if live is None:
                continue
            if live.kind == "gen":
                take_generation_output(live, out)
            if out.finished:
                self._drop(out.request_id)
                on_finished(live, out)

    def abort_cancelled(self) -> None:
        """Abort the requests whose job was cancelled (its caller gave up, or another row failed it)."""
        for rid, live in list(self._live.items()):
            if live.job.cancelled:
                try:
                    self._engine.abort_request([rid])
                except Exception:  # noqa: BLE001 - already finished inside vLLM
                    pass
                self._drop(rid)

    def abort_all(self) -> list[Job]:
        """Abort every request in vLLM; returns their jobs (each once), for the caller to fail."""
        jobs = {id(live.job): live.job for live in self._live.values()}
        for rid in list(self._live):
            try:
                self._engine.abort_request([rid])
            except Exception:  # noqa: BLE001
                pass
        self._live.clear()
        self.learning = 0
        self._loras.forget_users()
        return list(jobs.values())

    def _drop(self, rid: str) -> None:
        live = self._live.pop(rid)
        self.learning -= live.job.priority == "learn"
        self._loras.use(live.lora, -1)
