"""What a served turn reports, whatever the protocol: the ``openclaw`` object (``OpenClawMeta``) and the
sampling log-probs with the policy's top-K (``ChoiceLogprobs``), as typed models that serialise to the JSON
the replies carry (a field declared with ``omitted_when_none`` is absent while it is None)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


def _is_none(value: Any) -> bool:
    return value is None


def omitted_when_none():
    """A field that is absent from the JSON while its value is None (instead of ``null``)."""
    return Field(default=None, exclude_if=_is_none)


class OpenClawMeta(BaseModel):
    """The ``openclaw`` object of a reply: the stored turn it is, its session, the turn it is the next state
    of, the policy version that sampled it and the temperature it was sampled at; with Best-of-N also
    ``best_of_n`` (n, served_index, scores, group_id)."""

    turn_id: int | str | None
    session_id: str | None
    turn_type: str
    next_state_of: int | None
    policy_version: int
    temperature: float
    best_of_n: dict[str, Any] | None = omitted_when_none()


class TopLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int]


class TokenLogprob(TopLogprob):
    top_logprobs: list[TopLogprob]


class ChoiceLogprobs(BaseModel):
    """``choices[].logprobs``: one entry per completion token (its sampling log-prob, the policy's top-K)."""

    content: list[TokenLogprob]
    refusal: None = None
