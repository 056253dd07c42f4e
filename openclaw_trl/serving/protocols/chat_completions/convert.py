"""An OpenAI chat-completions body -> ``TurnRequest``: its schema, limits, session id, model and options are
checked here (every refusal an ``ApiError`` 4xx, before anything is stored), its messages normalised to the
internal chat format (``schema.normalize_messages``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from openclaw_trl.serving.errors import ApiError, format_validation_error
from openclaw_trl.serving.pipeline.turn import TurnRequest, served_model, session_fields
from openclaw_trl.serving.protocols.chat_completions.schema import (
    ChatRequest,
    check_tool_choice,
    normalize_messages,
)
from openclaw_trl.serving.settings import ServerSettings
from openclaw_trl.serving.text_check import check_text


def turn_request(payload: Any, headers: Mapping | None, settings: ServerSettings) -> TurnRequest:
    """The turn a chat-completions body asks for (``headers``: the request's, for its session fields)."""
    body = _validate(payload, headers, settings)
    tools = [t.model_dump(exclude_none=True) for t in body.tools] if body.tools else None
    return TurnRequest(
        model=served_model(settings, body.model),
        messages=normalize_messages(body.messages),
        tools=None if body.tool_choice == "none" else tools,  # "none" renders without tools
        max_tokens=body.max_completion_tokens or body.max_tokens,
        temperature=body.temperature,
        top_p=body.top_p,
        top_k=body.top_k,
        stop=tuple(body.stop or ()),
        seed=body.seed,
        logprobs=body.logprobs,
        top_logprobs=body.top_logprobs or 0,
        stream=body.stream,
        include_usage=bool((body.stream_options or {}).get("include_usage")),
        headers=headers or {},
        session=session_fields(payload),
    )


def _validate(payload: Any, headers: Mapping | None, settings: ServerSettings) -> ChatRequest:
    """The body's schema, its sizes and session id (``settings.limits``), the model, the log-prob options."""
    if not isinstance(payload, dict):
        raise ApiError(400, "The request body must be a JSON object", "invalid_json")
    check_text(payload)
    if "messages" in payload and not isinstance(payload["messages"], list):
        raise ApiError(400, "'messages' must be a list of message objects", "invalid_value", "messages")
    try:
        body = ChatRequest.model_validate(payload)
    except ValidationError as exc:
        raise format_validation_error(exc) from None
    limits = settings.limits
    limits.check_chat(payload)
    from openclaw_trl.sessions import request_session_key

    limits.check_session_id(request_session_key(headers, payload))
    served_model(settings, body.model)
    check_tool_choice(body.tool_choice, [t.function.name for t in body.tools or []])
    if body.top_logprobs and not body.logprobs:
        raise ApiError(400, "top_logprobs needs logprobs=true", "invalid_value", "top_logprobs")
    return body
