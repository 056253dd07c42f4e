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
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

Weights = Literal["policy", "base"]
"""``policy`` = the current (last published) LoRA adapter; ``base`` = the adapter disabled."""


Priority = Literal["serve", "learn"]
"""Who waits for the work: ``serve`` = a chat request (a person or an agent is waiting; it always goes
first), ``learn`` = judge votes and teacher scoring, which run when no serving work waits, in bounded
pieces (one batch of decode steps or one scoring chunk), so a chat request arriving behind a long learning
queue waits for at most one such piece. Learning work can wait indefinitely under a saturating chat load."""


def check_priority(priority: str) -> None:
    """``ValueError`` unless ``priority`` is one of ``Priority``'s values."""
    if priority not in ("serve", "learn"):
        raise ValueError(f"priority must be 'serve' (chat) or 'learn' (judge/teacher), got {priority!r}")


@dataclass
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 = no top-k truncation
    max_new_tokens: int = 256
    stop: list[str] = field(default_factory=list)  # stop strings (the stop text is kept in the ids)
    seed: int | None = None

    @property
    def logprob_temperature(self) -> float:
        """The temperature the returned log-probs are computed at (1.0 for greedy requests)."""
        return self.temperature if self.temperature > 0 else 1.0


@dataclass
class GenerationRequest:
    prompt_ids: list[int]
    sampling: SamplingParams = field(default_factory=SamplingParams)
    weights: Weights = "policy"


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


@runtime_checkable
class Engine(Protocol):
    """What the server, the scorer and the trainer need from a generation backend."""

    tokenizer: object
    policy_version: int

    def generate(
        self, requests: list[GenerationRequest], on_token=None, priority: Priority = "serve"
    ) -> list[Completion]:
        """Sample completions for all requests in one batched pass.

        ``on_token(index, token_id)``, when given, is called as each token is sampled (streaming).
        ``priority``: ``serve`` for chat turns, ``learn`` for judge votes (see ``Priority``).
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
    ) -> Scores:
        """Log-probs of each completion given its prompt; optionally the top-K at each position.

        ``priority``: ``learn`` for the teacher and replays, ``serve`` for a chat reply's ``top_logprobs``.
        """
        ...

    def publish_adapter(self, adapter, version: int) -> None:
        """Atomically make ``adapter`` (a PEFT state dict or an adapter directory) the ``policy``."""
        ...

    def close(self) -> None: ...
