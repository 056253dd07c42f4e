"""The OpenAI chat-completions request: its models, limits, validation and message normalisation.

Everything a request must satisfy before it reaches the collector or the engine is checked here, so a
rejected request is a 4xx ``ApiError`` (``serving.errors``) and never touches the store. The reply side is
``serving.openai_response``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from openclaw_trl.serving.errors import ApiError

# --------------------------------------------------------------------------------------------------
# Request schema (strict numbers: "0.7" or true is not a temperature)
# --------------------------------------------------------------------------------------------------

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
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


# --------------------------------------------------------------------------------------------------
# Limits: what one request may carry (each over-limit request is a 400, the body size a 413)
# --------------------------------------------------------------------------------------------------

_LIMIT_CODES = {
    "max_request_bytes": "request_too_large",
    "max_messages": "array_above_max_length",
    "max_tools": "array_above_max_length",
    "max_stop": "array_above_max_length",
    "max_prompt_tokens": "context_length_exceeded",
}
SESSION_ID_PATTERN = re.compile(r"[A-Za-z0-9._:@+=/~-]+")
"""Characters a session id may use: it is echoed in the ``x-openclaw-session-id`` response header."""


@dataclass(frozen=True)
class RequestLimits:
    """What one request may carry; ``OpenClawConfig`` exposes every field (same names, same defaults).

    Parameters:
        max_request_bytes: raw body size (413 above it, checked before parsing). 4 MiB holds the largest
            conversation the other limits allow (``max_total_chars`` of text + tools) with JSON escaping.
        max_messages: messages in one request; 256 is far beyond any real chat and bounds per-message work.
        max_message_chars: text of one message (content + reasoning + tool-call arguments); 100,000 characters
            is ~25k tokens, more than the served context, so no real message is refused for it.
        max_total_chars: text of all messages together (400,000 characters, ~100k tokens).
        max_tools: tool definitions in one request (64; OpenAI's limit is 128, agents send tens).
        max_tools_chars: the tools' JSON size (64 KiB): they are rendered into every prompt.
        max_stop: stop strings (4, OpenAI's limit); each is checked after every token.
        max_stop_chars: length of one stop string (64): the decoder re-reads ~4x that per token.
        max_session_id_chars: a session id's length (128), from ``SESSION_ID_PATTERN``'s characters
            (letters, digits and ``._:@+=/~-``), since it is echoed in a response header.
        max_feedback_chars: the correction text of ``POST /v1/feedback`` / the UI (8,000 characters): it
            becomes a judge's next state and a teacher hint.
        max_prompt_tokens: prompt tokens after rendering the chat template; ``None`` (the default): whatever
            the context leaves (``max_context_len`` minus the reply's minimum room, see ``ServerSettings``).
    """

    max_request_bytes: int = 4 * 1024 * 1024
    max_messages: int = 256
    max_message_chars: int = 100_000
    max_total_chars: int = 400_000
    max_tools: int = 64
    max_tools_chars: int = 65_536
    max_stop: int = 4
    max_stop_chars: int = 64
    max_session_id_chars: int = 128
    max_feedback_chars: int = 8000
    max_prompt_tokens: int | None = None

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if name == "max_prompt_tokens" and value is None:
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")

    def over(self, name: str, value: int, param: str | None, what: str) -> ApiError:
        """The error for ``what`` of size ``value`` above the limit ``name`` (413 for the body, else 400)."""
        limit = getattr(self, name)
        return ApiError(
            413 if name == "max_request_bytes" else 400,
            f"{what} is {value}, above the limit {name}={limit}.",
            _LIMIT_CODES.get(name, "string_above_max_length"),
            param,
        )

    def check_chat(self, payload: dict) -> None:
        """Counts and sizes of a chat request body (a dict that passed ``ChatRequest`` validation)."""
        messages = payload["messages"]
        if len(messages) > self.max_messages:
            raise self.over("max_messages", len(messages), "messages", "The number of messages")
        total = 0
        for i, message in enumerate(messages):
            chars = _message_chars(message, f"messages[{i}]")
            if chars > self.max_message_chars:
                raise self.over(
                    "max_message_chars", chars, f"messages[{i}]", f"The text of messages[{i}] (characters)"
                )
            total += chars
        if total > self.max_total_chars:
            raise self.over("max_total_chars", total, "messages", "The text of all messages (characters)")
        self._check_tools(payload.get("tools") or [])
        self._check_stop(payload.get("stop"))

    def _check_tools(self, tools: list) -> None:
        if len(tools) > self.max_tools:
            raise self.over("max_tools", len(tools), "tools", "The number of tools")
        size = len(json.dumps(tools, ensure_ascii=False))
        if size > self.max_tools_chars:
            raise self.over("max_tools_chars", size, "tools", "The JSON size of the tools (characters)")

    def _check_stop(self, stop) -> None:
        stops = [stop] if isinstance(stop, str) else list(stop or [])
        if len(stops) > self.max_stop:
            raise self.over("max_stop", len(stops), "stop", "The number of stop strings")
        for i, s in enumerate(stops):
            if len(s) > self.max_stop_chars:
                raise self.over("max_stop_chars", len(s), f"stop[{i}]", f"The length of stop[{i}]")

    def check_session_id(self, key: str | None) -> None:
        """A session id is short and header-safe (it is echoed in ``x-openclaw-session-id``)."""
        if key is None:
            return
        if len(key) > self.max_session_id_chars:
            raise self.over("max_session_id_chars", len(key), "session_id", "The length of the session id")
        if not SESSION_ID_PATTERN.fullmatch(key):
            raise ApiError(
                400,
                "The session id may only use letters, digits and the characters ._:@+=/~- "
                "(it is echoed in a response header); send another X-Session-Id.",
                "invalid_session",
                "session_id",
            )

    def check_feedback(self, text: str | None) -> None:
        if text and len(text) > self.max_feedback_chars:
            raise self.over("max_feedback_chars", len(text), "text", "The length of the feedback text")


# --------------------------------------------------------------------------------------------------
# Reasoning: one field, two names on the wire
# --------------------------------------------------------------------------------------------------


def message_reasoning(message: dict, param: str) -> str | None:
    """The reasoning text of an input message, given as ``reasoning_content`` or ``reasoning``.

    Clients name the reasoning part of an assistant message ``reasoning_content`` (DeepSeek, older vLLM) or
    ``reasoning`` (current vLLM, OpenRouter); both mean the same. Either may be sent, or both with the same
    text; both with different texts is a 400 (there is no precedence to guess: one of them is a client bug).
    """
    content, alias = message.get("reasoning_content"), message.get("reasoning")
    if content is not None and alias is not None and content != alias:
        raise ApiError(
            400,
            f"{param} has 'reasoning_content' and 'reasoning' with different texts: they are two names of one "
            "field, so send one of them (or the same text in both).",
            "invalid_value",
            param,
        )
    return content if content is not None else alias


def _message_chars(message: dict, param: str) -> int:
    """Characters of a message's text: content (string or text parts), reasoning and tool-call arguments."""
    content = message.get("content")
    if isinstance(content, list):
        chars = sum(len(p["text"]) for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    else:
        chars = len(content or "")
    chars += len(message_reasoning(message, param) or "")
    for call in message.get("tool_calls") or []:
        arguments = (call.get("function") or {}).get("arguments") if isinstance(call, dict) else None
        chars += len(arguments if isinstance(arguments, str) else json.dumps(arguments or {}))
    return chars


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
