"""Typed records that travel between the layers: judge votes and judged training samples.

The store returns them, the scorer writes them, the trainer reads their attributes; nothing here does I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class TrainingSample:
    """One assistant turn, judged, ready for a PPO update.

    The token ids are exactly those the engine saw and sampled (never re-tokenized text).
    ``teacher_logprobs`` is only meaningful when ``has_hint`` (the OPD term is masked off otherwise).
    """

    turn_id: int
    prompt_ids: list[int]
    completion_ids: list[int]
    sampling_logprobs: list[float]  # lp_old at sampling time, at ``temperature`` (engines/base.py)
    temperature: float
    policy_version: int  # the adapter version that sampled the completion
    reward: float = 0.0  # Binary-RL reward r in {-1, 0, +1}
    has_hint: bool = False  # opd_mask: an accepted hint and real teacher log-probs
    hint: str | None = None
    teacher_logprobs: list[float] | None = None  # lp_T, one per completion token
    topk_ids: list[list[int]] | None = None  # [T][K] teacher top-K ids (top-K distillation)
    topk_logprobs: list[list[float]] | None = None  # [T][K] teacher log-probs on those ids
    teacher_prompt_ids: list[int] | None = None  # the hint-augmented prompt the teacher scored
    finish_reason: str | None = None  # "stop" or "length" (cut at the token limit); None when unknown
    sample_id: int | None = None  # assigned by the store
    meta: dict = field(default_factory=dict)


@dataclass
class Vote:
    """One judge vote as stored: ``value`` is the parsed verdict (None = invalid, failed or timed out)."""

    kind: str  # prm / hint
    backend: str
    raw_text: str | None
    value: int | None
    hint: str | None = None
    error: str | None = None
