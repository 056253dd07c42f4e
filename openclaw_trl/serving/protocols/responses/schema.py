"""The OpenAI Responses request: the fields honoured or refused, input items -> chat messages, function
tools -> chat tools (the response side is ``output``).

A Responses request is turned into the chat request it means (``chat_payload``), so it goes through the same
validation, limits, chat template, sessions and store as ``/v1/chat/completions``. Every field of OpenAI's
request is either honoured or refused with a 400 that says what to use instead; an unknown field is a 400 too.

Mapping of input items (consecutive assistant-side items form one assistant message, as a turn's output does):

* a string: one user message;
* ``{"role": "user"|"system"|"developer"|"assistant", "content": str | [parts]}`` (``type: "message"``
  optional): that message; parts are ``input_text`` (``output_text`` for the assistant), joined by newlines;
* ``{"type": "reasoning", "content": [{"type": "reasoning_text", "text"}]}`` (or its ``summary`` texts): the
  ``reasoning_content`` of the assistant message that follows;
* ``{"type": "function_call", "call_id", "name", "arguments"}``: a tool call of that assistant message;
* ``{"type": "function_call_output", "call_id", "output"}``: a ``tool`` message with ``tool_call_id = call_id``;
  it answers a ``function_call`` with that ``call_id`` earlier in the input or in the conversation that
  ``previous_response_id`` continues (else a 400: an output of no call is no next state of any turn).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from openclaw_trl.serving.errors import ApiError, format_validation_error
from openclaw_trl.serving.limits import INT64_MAX

Num = Annotated[float, Field(strict=True)]
Int = Annotated[int, Field(strict=True)]
Bool = Annotated[bool, Field(strict=True)]

# OpenClaw's session fields, accepted as in chat completions (the X-Session-* headers take precedence).
SESSION_FIELDS = ("session_id", "session_done", "turn_type", "session_private")

# Fields of OpenAI's request this server cannot honour: (accepted values, why and what to use instead).
_REFUSED: dict[str, tuple[tuple, str]] = {
    "background": ((False,), "responses are generated while the request waits: omit 'background'"),
    "conversation": (
        (),
        "conversations are sessions here: continue one with previous_response_id, or name it with the "
        "X-Session-Id header or 'user'",
    ),
    "prompt": ((), "stored prompt templates do not exist here: send the input and instructions themselves"),
    "prompt_cache_key": ((), "name the session with the X-Session-Id header or 'user'"),
    "prompt_cache_retention": ((), "there is no prompt cache to configure: omit it"),
    "prompt_cache_options": ((), "there is no prompt cache to configure: omit it"),
    "safety_identifier": ((), "name the session with the X-Session-Id header or 'user'"),
    "service_tier": ((), "there is one service tier: omit it"),
    "max_tool_calls": ((), "only function tools exist and the client runs them: omit it"),
    "top_logprobs": ((), "use POST /v1/chat/completions with logprobs and top_logprobs"),
    "moderation": ((), "this server does not moderate: omit it"),
    "context_management": ((), "the conversation is never compacted here: omit it"),
    "truncation": (
        ("disabled",),
        "a conversation over the context is refused, never truncated: use 'disabled'",
    ),
    "parallel_tool_calls": (
        (True,),
        "the model may call several tools in one turn and the server cannot hold it to one: omit it",
    ),
    "include": (
        ([],),
        "reasoning is returned as plain text in the reasoning item; nothing else exists to include",
    ),
    "text": (
        ({}, {"format": {"type": "text"}}),
        "only plain text output is produced (no JSON schema is enforced): use {'format': {'type': 'text'}}",
    ),
    "reasoning": (
        ({}, {"effort": None}, {"effort": None, "summary": None}),
        "the model reasons as its chat template makes it (no effort or summary setting): omit 'reasoning'",
    ),
    "stream_options": (
        ({}, {"include_obfuscation": False}),
        "stream events carry no obfuscation padding: omit stream_options",
    ),
}
_HONOURED = (
    "model",
    "input",
    "instructions",
    "tools",
    "tool_choice",
    "temperature",
    "top_p",
    "max_output_tokens",
    "stream",
    "previous_response_id",
    "metadata",
    "user",
    "store",
    *SESSION_FIELDS,
)
MAX_METADATA_PAIRS, MAX_METADATA_KEY_CHARS, MAX_METADATA_VALUE_CHARS = 16, 64, 512


class ResponsesRequest(BaseModel):
    """The Responses request fields this server honours (the others are checked by ``parse_request``)."""

    model_config = ConfigDict(extra="allow")
    model: str | None = None
    input: str | list[Any]
    instructions: str | None = None
    tools: list[dict] | None = None
    tool_choice: str | dict | None = None
    temperature: Num | None = Field(default=None, ge=0.0, le=2.0)
    top_p: Num | None = Field(default=None, gt=0.0, le=1.0)
    max_output_tokens: Int | None = Field(default=None, ge=1, le=INT64_MAX)
    stream: Bool = False
    previous_response_id: str | None = Field(default=None, min_length=1, max_length=128)
    metadata: dict[str, str] | None = None
    user: str | None = None
    store: Bool = True


def parse_request(payload: Any) -> ResponsesRequest:
    """Validate a Responses request body: unknown and refused fields, types and ranges, metadata sizes."""
    if not isinstance(payload, dict):
        raise ApiError(400, "The request body must be a JSON object", "invalid_json")
    for name, value in payload.items():
        if name in _HONOURED or value is None:
            continue
        if name not in _REFUSED:
            raise ApiError(400, f"Unknown parameter: '{name[:128]}'.", "unknown_parameter", name[:128])
        accepted, why = _REFUSED[name]
        if value not in accepted:
            raise ApiError(400, f"'{name}'={value!r} is not supported: {why}.", "unsupported_parameter", name)
    try:
        request = ResponsesRequest.model_validate(payload)
    except ValidationError as exc:
        raise format_validation_error(exc) from None
    _check_metadata(request.metadata)
    return request


def _check_metadata(metadata: dict[str, str] | None) -> None:
    """OpenAI's bounds on ``metadata``: at most 16 pairs, keys of 64 and values of 512 characters."""
    if not metadata:
        return
    if len(metadata) > MAX_METADATA_PAIRS:
        raise ApiError(
            400, f"'metadata' has {len(metadata)} pairs; at most 16 are allowed.", "invalid_value", "metadata"
        )
    for key, value in metadata.items():
        if len(key) > MAX_METADATA_KEY_CHARS or len(value) > MAX_METADATA_VALUE_CHARS:
            raise ApiError(
                400,
                f"metadata[{key[:70]!r}]: keys are at most 64 characters and values at most 512.",
                "invalid_value",
                "metadata",
            )


# --------------------------------------------------------------------------------------------------
# Input items and tools -> the chat request they mean
# --------------------------------------------------------------------------------------------------


def input_messages(items: str | list, history: list[dict] | None = None) -> list[dict]:
    """The chat messages that ``input`` (a string or a list of items, see the module docstring) means, after
    the chat messages of ``history`` (the conversation ``previous_response_id`` continues)."""
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    calls = {c.get("id") for m in history or [] for c in m.get("tool_calls") or [] if isinstance(c, dict)}
    if not items:
        raise ApiError(400, "'input' must be a non-empty string or list of items", "invalid_value", "input")
    messages: list[dict] = []
    turn: dict | None = None  # the assistant message being assembled from consecutive assistant-side items
    for i, item in enumerate(items):
        param = f"input[{i}]"
        if not isinstance(item, dict):
            raise ApiError(400, f"{param} must be an object", "invalid_value", param)
        kind = item.get("type") or ("message" if "role" in item else None)
        if kind == "message" and item.get("role") != "assistant":
            turn = None
            messages.append(_plain_message(item, param))
        elif kind in ("message", "reasoning", "function_call"):
            if turn is None or _starts_new_turn(turn, kind):
                turn = {"role": "assistant", "content": None}
                messages.append(turn)
            _add_to_turn(turn, kind, item, param)
            calls.update(c["id"] for c in turn.get("tool_calls") or [])
        elif kind == "function_call_output":
            turn = None
            messages.append(_tool_message(item, param, calls))
        elif kind == "item_reference":
            raise ApiError(
                400,
                f"{param}: item references are not supported: continue with previous_response_id, or send the "
                "item itself",
                "unsupported_item",
                param,
            )
        else:
            raise ApiError(
                400,
                f"{param} has type {kind!r}; this server takes message, reasoning, function_call and "
                "function_call_output items",
                "unsupported_item",
                param,
            )
    return messages


def _starts_new_turn(turn: dict, kind: str) -> bool:
    """Text or reasoning after text or tool calls (or a second reasoning) begins the next assistant message;
    a function call always joins the current one."""
    if kind == "function_call":
        return False
    said = turn["content"] is not None or bool(turn.get("tool_calls"))
    return said or (kind == "reasoning" and "reasoning_content" in turn)


def _add_to_turn(turn: dict, kind: str, item: dict, param: str) -> None:
    if kind == "message":
        turn["content"] = _text_of(item.get("content"), param, ("output_text", "input_text"))
    elif kind == "reasoning":
        turn["reasoning_content"] = _reasoning_text(item, param)
    else:
        call_id, name, arguments = (item.get(k) for k in ("call_id", "name", "arguments"))
        if not all(isinstance(v, str) and v for v in (call_id, name)) or not isinstance(arguments, str):
            raise ApiError(
                400,
                f"{param}: a function_call needs call_id, name and arguments (strings)",
                "invalid_value",
                param,
            )
        call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
        turn.setdefault("tool_calls", []).append(call)


def _plain_message(item: dict, param: str) -> dict:
    role = item.get("role")
    if role not in ("user", "system", "developer"):
        raise ApiError(
            400,
            f"{param}.role must be user, system, developer or assistant, got {role!r}",
            "invalid_value",
            param,
        )
    return {"role": role, "content": _text_of(item.get("content"), f"{param}.content", ("input_text",))}


def _tool_message(item: dict, param: str, calls: set) -> dict:
    call_id = item.get("call_id")
    if not isinstance(call_id, str) or not call_id:
        raise ApiError(400, f"{param}: a function_call_output needs its call_id", "invalid_value", param)
    if call_id not in calls:
        raise ApiError(
            400,
            f"{param}: no function_call with call_id {call_id[:128]!r} precedes this function_call_output, in "
            "the input or in the response previous_response_id names: send the output of a call the model made.",
            "unknown_call_id",
            param,
        )
    return {
        "role": "tool",
        "tool_call_id": call_id,
        "content": _text_of(item.get("output"), f"{param}.output", ("input_text",)),
    }


def _text_of(content, param: str, part_types: tuple[str, ...]) -> str:
    """A string, or text parts of the given types joined by newlines; any other part is refused."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise ApiError(400, f"{param} must be a string or a list of text parts", "invalid_value", param)
    texts = []
    for j, part in enumerate(content):
        if (
            not isinstance(part, dict)
            or part.get("type") not in part_types
            or not isinstance(part.get("text"), str)
        ):
            kind = part.get("type") if isinstance(part, dict) else type(part).__name__
            raise ApiError(
                400,
                f"Only text parts ({', '.join(part_types)}) are supported; {param}[{j}] has type {kind!r}",
                "unsupported_content",
                f"{param}[{j}]",
            )
        texts.append(part["text"])
    return "\n".join(texts)


def _reasoning_text(item: dict, param: str) -> str:
    parts = item.get("content") or item.get("summary") or []
    texts = [p.get("text") for p in parts if isinstance(p, dict)] if isinstance(parts, list) else [None]
    if not texts or not all(isinstance(t, str) for t in texts):
        raise ApiError(
            400,
            f"{param}: a reasoning item needs its text in 'content' (reasoning_text parts) or 'summary' "
            "(encrypted reasoning is never produced here and cannot be read)",
            "invalid_value",
            param,
        )
    return "\n".join(texts)


def chat_tools(tools: list[dict] | None) -> list[dict] | None:
    """Responses function tools -> chat tools. ``strict`` is accepted and not enforced: the arguments are the
    JSON the model wrote. Other tool types (web search, files, ...) are refused: the client runs every tool."""
    if not tools:
        return None
    out = []
    for i, tool in enumerate(tools):
        if tool.get("type") != "function":
            raise ApiError(
                400,
                f"tools[{i}] has type {tool.get('type')!r}: only function tools are supported (the client runs "
                "them and sends their output back as function_call_output)",
                "unsupported_tool",
                f"tools[{i}]",
            )
        if not isinstance(tool.get("name"), str) or not tool["name"]:
            raise ApiError(400, f"tools[{i}] needs a name", "invalid_value", f"tools[{i}].name")
        function = {k: tool[k] for k in ("name", "description", "parameters") if tool.get(k) is not None}
        out.append({"type": "function", "function": function})
    return out


def chat_tool_choice(tool_choice, tools: list[dict] | None = None) -> str | None:
    """``auto`` (the default) lets the model decide, ``none`` renders no tools; forcing a tool is refused,
    naming a function that is not among ``tools`` (the request's Responses tools) first."""
    if tool_choice in (None, "auto"):
        return None
    name = tool_choice.get("name") if isinstance(tool_choice, dict) else None
    known = [t.get("name") for t in tools or [] if isinstance(t, dict)]
    if isinstance(name, str) and name not in known:
        raise ApiError(
            400,
            f"tool_choice names the function {name[:128]!r}, which is not among the request's tools.",
            "unknown_function",
            "tool_choice",
        )
    if tool_choice == "none":
        return "none"
    raise ApiError(
        400,
        f"tool_choice={tool_choice!r} is not supported: the model decides whether to call a tool; use 'auto' "
        "or 'none'",
        "unsupported_parameter",
        "tool_choice",
    )
