"""The OpenAI Responses objects as typed models: the ``response`` object, its output items and usage.

``model_dump()`` gives the JSON the wire carries and the store keeps (fields in OpenAI's order; ``null`` where
OpenAI sends ``null``; ``completed_at`` and ``openclaw`` only on a finished response). The request side is
``schema``, the building of items and stream events ``output``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel

from openclaw_trl.serving.pipeline.results import OpenClawMeta, omitted_when_none


class ResponseEcho(BaseModel):
    """The request fields a response object repeats (with the temperature the turn was sampled at)."""

    model: str
    instructions: str | None
    tools: list[dict[str, Any]]
    tool_choice: str | dict[str, Any]
    temperature: int | float
    top_p: int | float
    max_output_tokens: int | None
    previous_response_id: str | None
    metadata: dict[str, str] = {}
    user: str | None = None
    store: bool = True  # False: the response is not kept for retrieval by id


class ReasoningText(BaseModel):
    type: Literal["reasoning_text"] = "reasoning_text"
    text: str


class OutputText(BaseModel):
    type: Literal["output_text"] = "output_text"
    text: str
    annotations: list[Any] = []
    logprobs: list[Any] = []


class ReasoningItem(BaseModel):
    """The model's reasoning (its text in ``content``; ``summary`` stays empty)."""

    type: Literal["reasoning"] = "reasoning"
    id: str
    summary: list[Any] = []
    content: list[ReasoningText]
    status: str


class MessageItem(BaseModel):
    """The reply's text: one ``output_text`` part (none while the item is only opened)."""

    type: Literal["message"] = "message"
    id: str
    role: Literal["assistant"] = "assistant"
    status: str
    content: list[OutputText]


class FunctionCallItem(BaseModel):
    """One tool call (``call_id`` = the chat tool-call id the client echoes in its output)."""

    type: Literal["function_call"] = "function_call"
    id: str
    call_id: str
    name: str
    arguments: str
    status: str


OutputItem = ReasoningItem | MessageItem | FunctionCallItem


class InputTokensDetails(BaseModel):
    cached_tokens: int = 0
    cache_write_tokens: int = 0


class OutputTokensDetails(BaseModel):
    reasoning_tokens: int


class ResponseUsage(BaseModel):
    input_tokens: int
    input_tokens_details: InputTokensDetails = InputTokensDetails()
    output_tokens: int
    output_tokens_details: OutputTokensDetails
    total_tokens: int

    @classmethod
    def of(cls, prompt_tokens: int, completion_tokens: int, reasoning_tokens: int) -> ResponseUsage:
        return cls(
            input_tokens=prompt_tokens,
            output_tokens=completion_tokens,
            output_tokens_details=OutputTokensDetails(reasoning_tokens=reasoning_tokens),
            total_tokens=prompt_tokens + completion_tokens,
        )


class ResponseError(BaseModel):
    code: str
    message: str


class IncompleteDetails(BaseModel):
    reason: Literal["max_output_tokens"] = "max_output_tokens"


class ReasoningConfig(BaseModel):
    effort: None = None
    summary: None = None


class TextFormat(BaseModel):
    type: Literal["text"] = "text"


class TextConfig(BaseModel):
    format: TextFormat = TextFormat()


class ResponseObject(BaseModel):
    """A Responses ``response`` object: its state, output and usage, then the echoed request fields."""

    id: str
    object: Literal["response"] = "response"
    created_at: int
    status: str
    error: ResponseError | None = None
    incomplete_details: IncompleteDetails | None = None
    output: list[OutputItem]
    parallel_tool_calls: bool = True
    reasoning: ReasoningConfig = ReasoningConfig()
    text: TextConfig = TextConfig()
    truncation: Literal["disabled"] = "disabled"
    usage: ResponseUsage | None = None
    model: str
    instructions: str | None
    tools: list[dict[str, Any]]
    tool_choice: str | dict[str, Any]
    temperature: int | float
    top_p: int | float
    max_output_tokens: int | None
    previous_response_id: str | None
    metadata: dict[str, str]
    user: str | None
    store: bool
    completed_at: int | None = omitted_when_none()
    openclaw: OpenClawMeta | None = omitted_when_none()

    @classmethod
    def of(
        cls,
        response_id: str,
        created: int,
        echo: ResponseEcho,
        status: str,
        output: list,
        usage: ResponseUsage | None = None,
        **extra,
    ) -> ResponseObject:
        """``extra``: ``completed_at``, ``error``, ``openclaw``."""
        return cls(
            id=response_id,
            created_at=created,
            status=status,
            incomplete_details=IncompleteDetails() if status == "incomplete" else None,
            output=output,
            usage=usage,
            **dict(echo),
            **extra,
        )
