"""The OpenAI chat-completions reply: typed models of ``chat.completion``, ``chat.completion.chunk``, usage and
the assistant message (the ``openclaw`` object and the log-probs are ``pipeline.results``; the request side is
``schema``).

A model serialises (``model_dump()``) to the exact JSON the wire carries: fields in OpenAI's order, ``null``
where OpenAI sends ``null`` (``logprobs``, ``finish_reason``, a tool-call message's ``content``), and a field
declared with ``omitted_when_none`` left out entirely while it is None (a message's reasoning and tool calls,
a chunk's ``usage`` and ``openclaw``, ``openclaw.best_of_n``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel

from openclaw_trl.serving.pipeline.results import ChoiceLogprobs, OpenClawMeta, omitted_when_none


def with_reasoning_aliases(fields: dict) -> dict:
    """An outgoing assistant message or stream delta with its reasoning under both names.

    Internally the reasoning part is ``reasoning_content``; on the wire, wherever it exists, it is sent as
    ``reasoning_content`` and as ``reasoning`` (same text), so clients that read either name see it.
    """
    if fields.get("reasoning_content") is None:
        return fields
    return {**fields, "reasoning": fields["reasoning_content"]}


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int

    @classmethod
    def of(cls, n_prompt: int, n_completion: int) -> Usage:
        return cls(
            prompt_tokens=n_prompt, completion_tokens=n_completion, total_tokens=n_prompt + n_completion
        )


class AssistantMessage(BaseModel):
    """The assistant message of a reply, or one delta of a stream (every field but ``content`` optional)."""

    role: Literal["assistant"] | None = omitted_when_none()
    content: str | None = omitted_when_none()
    reasoning_content: str | None = omitted_when_none()
    tool_calls: list[dict[str, Any]] | None = omitted_when_none()
    reasoning: str | None = omitted_when_none()  # ``reasoning_content`` under its other name

    @classmethod
    def of(cls, fields: dict) -> AssistantMessage:
        """From a message or delta dict (``reasoning_content`` internally), its reasoning under both names."""
        return cls.model_validate(with_reasoning_aliases(fields))


class Reply(AssistantMessage):
    """A whole reply's message: ``role`` and ``content`` always present (``content`` null with tool calls)."""

    role: Literal["assistant"] = "assistant"
    content: str | None


class Choice(BaseModel):
    index: int = 0
    message: Reply
    logprobs: ChoiceLogprobs | None
    finish_reason: str


class ChatCompletion(BaseModel):
    """The non-streaming reply (``POST /v1/chat/completions``)."""

    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    system_fingerprint: str
    choices: list[Choice]
    usage: Usage
    openclaw: OpenClawMeta


class ChunkChoice(BaseModel):
    index: int = 0
    delta: AssistantMessage
    logprobs: ChoiceLogprobs | None = None
    finish_reason: str | None = None


class ChatCompletionChunk(BaseModel):
    """One event of a streamed reply: a delta; the final one has ``finish_reason`` and ``openclaw``; with
    ``stream_options.include_usage`` one more chunk has no choices and the ``usage``."""

    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    system_fingerprint: str
    choices: list[ChunkChoice]
    usage: Usage | None = omitted_when_none()
    openclaw: OpenClawMeta | None = omitted_when_none()


def fingerprint(version: int) -> str:
    """``system_fingerprint``: the policy version that sampled the reply."""
    return f"openclaw-v{version}"
