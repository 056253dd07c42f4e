"""A validated Responses request -> ``TurnRequest``: its chat messages (``schema.input_messages`` after the
conversation ``previous_response_id`` continues) in the internal chat format, its function tools, sampling
values and session fields, checked against the request limits, the session id's rules and the served models."""

from __future__ import annotations

import json
from collections.abc import Mapping

from openclaw_trl.serving.errors import ApiError
from openclaw_trl.serving.pipeline.turn import TurnRequest, check_session_types, served_model, session_fields
from openclaw_trl.serving.protocols.responses.schema import (
    SESSION_FIELDS,
    ResponsesRequest,
    chat_tool_choice,
    chat_tools,
)
from openclaw_trl.serving.settings import ServerSettings

MAX_TOOL_NAME_CHARS = 128
"""A function tool's name, as on a chat-completions request."""


def turn_request(
    settings: ServerSettings,
    request: ResponsesRequest,
    payload: dict,
    headers: Mapping | None,
    messages: list[dict],
    session_key: str | None,
) -> TurnRequest:
    """The turn of ``messages`` (history, instructions and input, as chat messages); ``session_key``: the
    session of the conversation ``previous_response_id`` continues (None: the request's own)."""
    tools = chat_tools(request.tools)
    tool_choice = chat_tool_choice(request.tool_choice, request.tools)
    session = {"user": request.user, **{name: payload.get(name) for name in SESSION_FIELDS}}
    if not request.store and not settings.learn_unstored_responses:
        session["session_private"] = True
    session = session_fields(session)
    if session_key is not None:
        session.setdefault("session_id", session_key)
    for i, tool in enumerate(tools or []):
        if len(tool["function"]["name"]) > MAX_TOOL_NAME_CHARS:
            param = f"tools.{i}.function.name"
            raise ApiError(
                400,
                f"Invalid value for '{param}': String should have at most {MAX_TOOL_NAME_CHARS} characters",
                "invalid_value",
                param,
            )
    check_session_types(session)
    limits = settings.limits
    limits.check_chat({"messages": messages, "tools": tools})
    from openclaw_trl.sessions import request_session_key

    limits.check_session_id(request_session_key(headers, session))
    return TurnRequest(
        model=served_model(settings, request.model),
        messages=internal_messages(messages),
        tools=None if tool_choice == "none" else tools,
        max_tokens=request.max_output_tokens,
        temperature=request.temperature,
        top_p=request.top_p,
        stream=request.stream,
        headers=headers or {},
        session=session,
    )


def internal_messages(messages: list[dict]) -> list[dict]:
    """Chat messages (from input items and stored turns) in the internal chat format: ``developer`` ->
    ``system``, string content, tool calls with string arguments; an assistant message that says nothing
    (neither text nor tool calls) is a 400."""
    out = []
    for i, m in enumerate(messages):
        role = "system" if m["role"] == "developer" else m["role"]
        if role == "assistant" and m.get("content") is None and not m.get("tool_calls"):
            raise ApiError(
                400,
                f"messages[{i}] (assistant) needs a content or tool_calls",
                "invalid_value",
                f"messages[{i}]",
            )
        msg = {"role": role, "content": m.get("content") or ""}
        if role == "assistant":
            if m.get("reasoning_content"):
                msg["reasoning_content"] = m["reasoning_content"]
            if m.get("tool_calls"):
                msg["tool_calls"] = [_tool_call(c, i, j) for j, c in enumerate(m["tool_calls"])]
        if role == "tool" and m.get("tool_call_id"):
            msg["tool_call_id"] = m["tool_call_id"]
        if m.get("name") and role != "tool":
            msg["name"] = m["name"]
        out.append(msg)
    return out


def _tool_call(call: dict, i: int, j: int) -> dict:
    function = call["function"]
    arguments = function.get("arguments", "{}")
    return {
        "id": call.get("id") or f"call_{i}_{j}",
        "type": "function",
        "function": {
            "name": function["name"],
            "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
        },
    }
