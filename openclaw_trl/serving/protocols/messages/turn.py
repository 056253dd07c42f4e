"""A validated Messages request -> ``TurnRequest``: its conversation in the internal chat format (``convert``),
its function tools, sampling values and session fields, checked against the request limits, the session id's
rules and the served models (counts first, so that an oversized request is refused before its blocks are read).
"""

from __future__ import annotations

from collections.abc import Mapping

from openclaw_trl.serving.pipeline.turn import TurnRequest, check_session_types, served_model, session_fields
from openclaw_trl.serving.protocols.messages.convert import ChatConversation, to_chat
from openclaw_trl.serving.protocols.messages.schema import SESSION_FIELDS, MessagesRequest
from openclaw_trl.serving.settings import ServerSettings


def conversation(settings: ServerSettings, request: MessagesRequest) -> ChatConversation:
    """The request's chat conversation, within the limits on messages, tools and their text."""
    limits = settings.limits
    if len(request.messages) > limits.max_messages:
        raise limits.over("max_messages", len(request.messages), "messages", "The number of messages")
    if len(request.tools or []) > limits.max_tools:
        raise limits.over("max_tools", len(request.tools), "tools", "The number of tools")
    chat = to_chat(request.system, request.messages, request.tools, request.tool_choice)
    limits.check_chat({"messages": chat.messages, "tools": chat.tools or [], "stop": request.stop_sequences})
    return chat


def turn_request(
    settings: ServerSettings, request: MessagesRequest, payload: dict, headers: Mapping | None
) -> TurnRequest:
    """The turn a Messages request asks for (``metadata.user_id`` names its session as ``user`` does)."""
    chat = conversation(settings, request)
    session = session_fields(
        {"user": request.user_id, **{name: payload.get(name) for name in SESSION_FIELDS}}
    )
    check_session_types(session)
    from openclaw_trl.sessions import request_session_key

    settings.limits.check_session_id(request_session_key(headers, session))
    return TurnRequest(
        model=served_model(settings, request.model),
        messages=chat.messages,
        tools=None if chat.tool_choice == "none" else chat.tools,
        max_tokens=request.max_tokens,
        temperature=request.temperature,
        top_p=request.top_p,
        top_k=request.top_k,
        stop=tuple(request.stop_sequences or ()),
        stream=request.stream,
        headers=headers or {},
        session=session,
    )
