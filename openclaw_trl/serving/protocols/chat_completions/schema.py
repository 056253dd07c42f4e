"""The OpenAI chat-completions request: its models, validation and message normalisation (OpenAI's chat
messages -> the internal chat format of ``pipeline.turn``).

Everything a request must satisfy before it reaches the collector or the engine is checked here or in
``serving.limits``, so a rejected request is a 4xx ``ApiError`` (``serving.errors``) and never touches the
store. The reply side is ``replies``.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from openclaw_trl.serving.errors import ApiError
from openclaw_trl.serving.limits import INT64_MAX, INT64_MIN, message_reasoning

# --------------------------------------------------------------------------------------------------
# Request schema (strict numbers: "0.7" or true is not a temperature)
# --------------------------------------------------------------------------------------------------

Num = Annotated[float, Field(strict=True)]
Int = Annotated[int, Field(strict=True)]  # every integer field has bounds a 64-bit engine and store can hold
Bool = Annotated[bool, Field(strict=True)]
ROLES = ("system", "developer", "user", "assistant", "tool")


class _Function(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str = Field(min_length=1, max_length=128)
    description: str | None = None
    parameters: dict | None = None


class _Tool(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["function"] = "function"
    function: _Function


class _CallFunction(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str = Field(min_length=1)
    arguments: str | dict = "{}"


class _ToolCall(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: str | None = None
    type: Literal["function"] = "function"
    function: _CallFunction


class _Message(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: str
    content: str | list[dict] | None = None
    name: str | None = None
    tool_calls: list[_ToolCall] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None  # the same field under vLLM's newer name (see ``message_reasoning``)

    @field_validator("role")
    @classmethod
    def _known_role(cls, role: str) -> str:
        if role not in ROLES:
            raise ValueError(f"unknown role {role!r}; expected one of {', '.join(ROLES)}")
        return role


class ChatRequest(BaseModel):
    """The subset of OpenAI's chat-completions request we honour (unknown fields are ignored)."""

    model_config = ConfigDict(extra="allow")
    model: str | None = None
    messages: list[_Message] = Field(min_length=1)
    tools: list[_Tool] | None = None
    tool_choice: str | dict | None = None
    temperature: Num | None = Field(default=None, ge=0.0, le=2.0)
    top_p: Num | None = Field(default=None, gt=0.0, le=1.0)
    top_k: Int | None = Field(default=None, ge=0, le=2**31 - 1)
    max_tokens: Int | None = Field(default=None, ge=1, le=INT64_MAX)
    max_completion_tokens: Int | None = Field(default=None, ge=1, le=INT64_MAX)
    stop: str | list[str] | None = None
    seed: Int | None = Field(default=None, ge=INT64_MIN, le=INT64_MAX)  # what the engines' generators take
    stream: Bool = False
    stream_options: dict | None = None
    logprobs: Bool = False
    top_logprobs: Int | None = Field(default=None, ge=0, le=20)
    n: Int = Field(default=1, ge=1, le=1)
    presence_penalty: Num | None = Field(default=None, ge=-2.0, le=2.0)  # accepted, not applied
    frequency_penalty: Num | None = Field(default=None, ge=-2.0, le=2.0)  # accepted, not applied
    # OpenClaw extensions (the X-Session-Id / X-Turn-Type headers take precedence)
    session_id: str | None = None
    user: str | None = None
    session_done: bool | str | int | None = None
    turn_type: str | None = None

    @field_validator("stop")
    @classmethod
    def _stop_strings(cls, stop):
        stops = [stop] if isinstance(stop, str) else stop
        if stops is not None and any(not s for s in stops):
            raise ValueError("stop strings must be non-empty")
        return stops


TOOL_CHOICES = ("auto", "none", "required")


def check_tool_choice(tool_choice, tool_names: list[str]) -> None:
    """A chat ``tool_choice``: ``auto``, ``none``, ``required`` or ``{"type": "function", "function": {"name"}}``
    naming one of the request's tools; anything else is a 400 (a forced function the model cannot see would
    be a promise the reply cannot keep)."""
    if tool_choice is None or tool_choice in TOOL_CHOICES:
        return
    function = tool_choice.get("function") if isinstance(tool_choice, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if (
        not isinstance(tool_choice, dict)
        or tool_choice.get("type") != "function"
        or not isinstance(name, str)
    ):
        raise ApiError(
            400,
            "tool_choice must be 'auto', 'none', 'required' or {'type': 'function', 'function': {'name': ...}}",
            "invalid_value",
            "tool_choice",
        )
    if name not in tool_names:
        known = ", ".join(repr(n) for n in tool_names[:20]) or "none"
        raise ApiError(
            400,
            f"tool_choice names the function {name[:128]!r}, which is not among the request's tools "
            f"(tools: {known}).",
            "unknown_function",
            "tool_choice",
        )


def _flatten_content(content, param: str) -> str:
    """OpenAI content parts -> text (text parts joined by newlines); other parts are refused, not dropped."""
    if content is None or isinstance(content, str):
        return content or ""
    texts = []
    for i, part in enumerate(content):
        if part.get("type") == "text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
        else:
            raise ApiError(
                400,
                f"Only text content parts are supported; {param}[{i}] has type {part.get('type')!r}",
                "unsupported_content",
                f"{param}[{i}]",
            )
    return "\n".join(texts)


def normalize_messages(messages: list[_Message]) -> list[dict]:
    """Validated messages -> plain dicts for the chat template (``developer`` -> ``system``)."""
    out = []
    for i, m in enumerate(messages):
        content = _flatten_content(m.content, f"messages[{i}].content")
        role = "system" if m.role == "developer" else m.role
        if role in ("system", "user", "tool") and m.content is None:
            raise ApiError(
                400, f"messages[{i}] ({m.role}) needs a content", "invalid_value", f"messages[{i}].content"
            )
        if role == "assistant" and m.content is None and not m.tool_calls:
            raise ApiError(
                400,
                f"messages[{i}] (assistant) needs a content or tool_calls",
                "invalid_value",
                f"messages[{i}]",
            )
        msg: dict[str, Any] = {"role": role, "content": content}
        if role == "assistant":
            reasoning = message_reasoning(
                {"reasoning_content": m.reasoning_content, "reasoning": m.reasoning}, f"messages[{i}]"
            )
            if reasoning:
                msg["reasoning_content"] = reasoning
            if m.tool_calls:
                msg["tool_calls"] = [
                    {
                        "id": c.id or f"call_{i}_{j}",
                        "type": "function",
                        "function": {
                            "name": c.function.name,
                            "arguments": c.function.arguments
                            if isinstance(c.function.arguments, str)
                            else json.dumps(c.function.arguments),
                        },
                    }
                    for j, c in enumerate(m.tool_calls)
                ]
        if role == "tool" and m.tool_call_id:
            msg["tool_call_id"] = m.tool_call_id
        if m.name and role != "tool":
            msg["name"] = m.name
        out.append(msg)
    return out
