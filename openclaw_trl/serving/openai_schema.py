"""The OpenAI chat-completions wire format: request models, validation, and OpenAI-style errors.

Everything a request must satisfy before it reaches the collector or the engine is checked here, so a
rejected request is a 4xx with ``{"error": {"message", "type", "param", "code"}}`` and never touches the store.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

# --------------------------------------------------------------------------------------------------
# Errors (OpenAI format: {"error": {"message", "type", "param", "code"}})
# --------------------------------------------------------------------------------------------------

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
}


class ApiError(Exception):
    """An error answered to the client in OpenAI's format, never a crash."""

    def __init__(self, status: int, message: str, code: str | None = None, param: str | None = None):
        super().__init__(message)
        self.status, self.message, self.code, self.param = status, message, code, param

    def body(self) -> dict:
        kind = _ERROR_TYPES.get(
            self.status, "server_error" if self.status >= 500 else "invalid_request_error"
        )
        return {"error": {"message": self.message, "type": kind, "param": self.param, "code": self.code}}


def error_response(err: ApiError):
    from fastapi.responses import JSONResponse

    headers = {"WWW-Authenticate": "Bearer"} if err.status == 401 else None
    return JSONResponse(err.body(), status_code=err.status, headers=headers)


# --------------------------------------------------------------------------------------------------
# Request schema (strict numbers: "0.7" or true is not a temperature)
# --------------------------------------------------------------------------------------------------

Num = Annotated[float, Field(strict=True)]
Int = Annotated[int, Field(strict=True)]
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
    top_k: Int | None = Field(default=None, ge=0)
    max_tokens: Int | None = Field(default=None, ge=1)
    max_completion_tokens: Int | None = Field(default=None, ge=1)
    stop: str | list[str] | None = None
    seed: Int | None = None
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
        if stops is not None and (len(stops) > 16 or any(not s for s in stops)):
            raise ValueError("stop takes at most 16 non-empty strings")
        return stops


def format_validation_error(exc: ValidationError) -> ApiError:
    first = exc.errors()[0]
    loc = [
        str(p) for p in first.get("loc", ()) if not str(p).startswith(("function-", "list[", "str", "dict"))
    ]
    param = ".".join(loc) or None
    msg = first.get("msg", "invalid request").removeprefix("Value error, ")
    if first.get("type") == "missing":
        msg = "field required"
    return ApiError(400, f"Invalid value for '{param}': {msg}" if param else msg, "invalid_value", param)


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
            if m.reasoning_content:
                msg["reasoning_content"] = m.reasoning_content
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
