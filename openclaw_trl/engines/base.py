"""The engine contract shared by the Transformers and vLLM engines.

Token ids in, token ids + log-probs out: callers render chat templates themselves (see
``openclaw_trl.chat``) and the engine never re-tokenizes text, so what is trained is exactly what
was sampled.

Temperature convention (one for the whole package: student, old policy and teacher alike): every log-prob that an
engine returns is ``log_softmax(logits / T)`` over the full vocabulary, where ``T`` is the request's
sampling temperature (``T = 1`` when the request is greedy, ``temperature == 0``). top-p / top-k
truncation is applied when *sampling* but never to the returned log-probs, which is also what the
trainer recomputes (TRL's convention). ``generate`` and ``score`` therefore agree on the same tokens
at the same temperature.

Several candidates per prompt (``SamplingParams.n``, Best-of-N serving): ``generate`` returns one flat list,
request after request, ``n`` completions for each (``n = 1``: one per request, as before), and
``on_token(index, token)`` names the flat index. Candidates of one request with a ``seed`` are drawn with
seeds ``seed, seed + 1, …`` (vLLM's rule for its child requests). Engines share the prompt's work between
the candidates: the Transformers engine prefills the prompt once and decodes the ``n`` rows from copies of
its KV cache; vLLM gets ``n`` in its own sampling parameters.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Literal, Protocol, runtime_checkable

from openclaw_trl.users import check_user_name

Weights = Literal["policy", "base"]
"""``policy`` = the current (last published) LoRA adapter; ``base`` = the adapter disabled."""


Priority = Literal["serve", "learn"]
"""Who waits for the work: ``serve`` = a chat request (a person or an agent is waiting; it always goes
first), ``learn`` = judge votes and teacher scoring, which run when no serving work waits, in bounded
pieces (one batch of decode steps or one scoring chunk), so a chat request arriving behind a long learning
queue waits for at most one such piece. Learning work can wait indefinitely under a saturating chat load."""


SEED_RANGE = (-(2**63), 2**63 - 1)
"""The seeds a request may carry: 64-bit integers. Candidate ``k`` of a Best-of-N request uses ``seed + k``, which
every engine's generator still takes (PyTorch's up to ``2**64 - 1``)."""


@dataclass
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 = no top-k truncation
    max_new_tokens: int = 256
    stop: list[str] = field(default_factory=list)  # stop strings (the stop text is kept in the ids)
    seed: int | None = None  # a 64-bit integer (``SEED_RANGE``)
    n: int = 1  # candidates sampled for the prompt (``generate`` returns them consecutively)

    @property
    def logprob_temperature(self) -> float:
        """The temperature the returned log-probs are computed at (1.0 for greedy requests)."""
        return self.temperature if self.temperature > 0 else 1.0


@dataclass
class GenerationRequest:
    prompt_ids: list[int]
    sampling: SamplingParams = field(default_factory=SamplingParams)
    weights: Weights = "policy"
    adapter: str | None = (
        None  # whose adapter ``policy`` means (a user's name); None = the run's only adapter
    )


@dataclass
class Completion:
    token_ids: list[int]  # exactly as sampled, the stop/eos token included when one ended the turn
    logprobs: list[float]  # one per token, at ``sampling.logprob_temperature``
    finish_reason: Literal["stop", "length"]
    policy_version: int  # the adapter version that produced it (for ``base`` requests as well)


@dataclass
class Scores:
    logprobs: list[list[float]]  # per pair: one log-prob per completion token
    topk_ids: list[list[list[int]]] | None = None  # per pair, per completion position: K ids
    topk_logprobs: list[list[list[float]]] | None = None

    @classmethod
    def from_pairs(cls, per_pair: list[tuple[list, list, list]], top_k: int) -> Scores:
        """Gather ``(logprobs, topk_ids, topk_logprobs)`` triples, one per pair; top-K only when ``top_k > 0``."""
        logprobs = [lps for lps, _, _ in per_pair]
        if top_k <= 0:
            return cls(logprobs)
        return cls(logprobs, [ids for _, ids, _ in per_pair], [vals for _, _, vals in per_pair])


@runtime_checkable
class Engine(Protocol):
    """What the server, the scorer and the trainer need from a generation backend."""

    tokenizer: object
    policy_version: int

    def generate(
        self,
        requests: list[GenerationRequest],
        on_token=None,
        priority: Priority = "serve",
        timeout_s: float | None = None,
    ) -> list[Completion]:
        """Sample completions for all requests in one batched pass: ``sampling.n`` per request, consecutively.

        ``on_token(index, token_id)``, when given, is called as each token is sampled (streaming); ``index``
        is the completion's position in the returned list.
        ``priority``: ``serve`` for chat turns, ``learn`` for judge votes (see ``Priority``).
        ``timeout_s``: the caller gives up after that many seconds: ``TimeoutError`` is raised and the work is
        cancelled (not started, or stopped at its next step), so an abandoned call never keeps the engine busy.
        """
        ...

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
        """Log-probs of each completion given its prompt; optionally the top-K at each position.

        ``priority``: ``learn`` for the teacher and replays, ``serve`` for a chat reply's ``top_logprobs``.
        ``timeout_s``: as for ``generate``.
        ``adapter``: whose adapter ``policy`` means (``GenerationRequest.adapter``).
        """
        ...

    def publish_adapter(self, adapter, version: int, name: str | None = None) -> None:
        """Atomically make ``adapter`` (a PEFT state dict or an adapter directory) the ``policy`` of ``name``
        (a user's name; None = the run's only adapter)."""
        ...

    def adapter_version(self, name: str | None = None) -> int:
        """The version of the adapter that serves ``policy`` for ``name`` (0 before its first publish);
        ``policy_version`` is ``adapter_version(None)``."""
        ...

    def close(self) -> None: ...


def check_adapter_name(name) -> None:
    """``ValueError`` unless ``name`` is None (the run's only adapter) or a user's name (``check_user_name``)."""
    if name is not None:
        check_user_name(name)


def check_priority(priority: str) -> None:
    """``ValueError`` unless ``priority`` is one of ``Priority``'s values."""
    if priority not in ("serve", "learn"):
        raise ValueError(f"priority must be 'serve' (chat) or 'learn' (judge/teacher), got {priority!r}")


def check_weights(weights: str) -> None:
    """``ValueError`` unless ``weights`` is one of ``Weights``' values."""
    if weights not in ("policy", "base"):
        raise ValueError(f"weights must be 'policy' (the published adapter) or 'base', got {weights!r}")


def check_sampling(sp: SamplingParams) -> None:
    """``ValueError`` unless ``temperature >= 0``, ``0 < top_p <= 1``, ``top_k >= 0``, ``max_new_tokens >= 0``,
    ``n`` is an integer >= 1 and ``seed`` is None or an integer in ``SEED_RANGE``."""
    if not (math.isfinite(sp.temperature) and sp.temperature >= 0):
        raise ValueError(f"temperature must be a finite number >= 0 (0 = greedy), got {sp.temperature}")
    if not 0 < sp.top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1] (1 = no nucleus truncation), got {sp.top_p}")
    if sp.top_k < 0:
        raise ValueError(f"top_k must be >= 0 (0 = no top-k truncation), got {sp.top_k}")
    if sp.max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be >= 0, got {sp.max_new_tokens}")
    if isinstance(sp.n, bool) or not isinstance(sp.n, int) or sp.n < 1:
        raise ValueError(f"n (candidates per prompt) must be an integer >= 1, got {sp.n!r}")
    if sp.seed is not None and (
        isinstance(sp.seed, bool)
        or not isinstance(sp.seed, int)
        or not SEED_RANGE[0] <= sp.seed <= SEED_RANGE[1]
    ):
        raise ValueError(
            f"seed must be a 64-bit integer (-2**63 to 2**63 - 1) or None, got {sp.seed!r}"[:200]
        )


def expand_candidates(requests: list[GenerationRequest]) -> list[GenerationRequest]:
    """One request per candidate (``n = 1`` each, seeds ``seed + k``), in the order ``generate`` returns them."""
    out = []
    for request in requests:
        sp = request.sampling
        for k in range(sp.n):
            seed = None if sp.seed is None else sp.seed + k
            out.append(replace(request, sampling=replace(sp, n=1, seed=seed)))
    return out


def check_generate_args(requests: list[GenerationRequest], priority: str) -> None:
    """The arguments of ``Engine.generate``: a known priority; per request prompt tokens, weights, sampling."""
    check_priority(priority)
    for request in requests:
        if not request.prompt_ids:
            raise ValueError("every request needs at least one prompt token")
        check_weights(request.weights)
        check_adapter_name(request.adapter)
        check_sampling(request.sampling)


def check_score_args(
    prompt_ids: list[list[int]],
    completion_ids: list[list[int]],
    weights: str,
    top_k: int,
    temperature: float,
    priority: str,
    adapter: str | None = None,
) -> None:
    """The arguments of ``Engine.score``: one prompt per completion, each with at least one token when its
    completion is not empty; known weights and priority; ``top_k >= 0``; a finite ``temperature > 0``."""
    check_priority(priority)
    check_weights(weights)
    check_adapter_name(adapter)
    if len(prompt_ids) != len(completion_ids):
        raise ValueError("prompt_ids and completion_ids must have the same length")
    if not (math.isfinite(temperature) and temperature > 0):
        raise ValueError("score temperature must be > 0 (use 1.0 for greedy turns)")
    if top_k < 0:
        raise ValueError(f"top_k must be >= 0 (0 = no top-K), got {top_k}")
    if any(c and not p for p, c in zip(prompt_ids, completion_ids)):
        raise ValueError("score needs at least one prompt token per pair")
