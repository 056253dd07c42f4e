"""``TurnRequest``: one chat turn as every protocol asks for it, in the pipeline's own terms.

Each protocol validates its wire body against its own schema and limits, then builds a ``TurnRequest``: the
conversation in the internal chat format (the chat template's messages: ``role`` system/user/assistant/tool,
``content`` a string, an assistant's ``reasoning_content`` and ``tool_calls`` with string ``arguments``, a tool
message's ``tool_call_id``), the tools to render (function tools as the template takes them, or None), the
sampling values it asks for (None: the server's default), what the reply must carry, and the session fields
the collector reads (the request's headers and the session fields of its body). The pipeline never sees a
wire body.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from openclaw_trl.serving.errors import ApiError, format_validation_error
from openclaw_trl.serving.settings import ServerSettings

SESSION_FIELDS = ("session_id", "user", "session_done", "turn_type", "session_private")
"""The body fields that name a turn's session and its kind (``openclaw_trl.sessions``)."""


@dataclass(frozen=True)
class TurnRequest:
    """A validated request for one turn (request limits applied; the context's room is checked on the
    rendered prompt by ``pipeline.prepare``).

    ``max_tokens``: the reply's asked length (None: ``default_max_tokens``); ``stop``: strings that end the
    reply (not returned); ``logprobs`` / ``top_logprobs``: the sampling log-probs and the policy's top-K to
    report; ``stream`` / ``include_usage``: how the protocol will answer; ``headers`` / ``session``: the
    request's headers and its body's ``SESSION_FIELDS`` (the collector's session, turn type, done and private
    flags)."""

    model: str
    messages: list[dict]
    tools: list[dict] | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    stop: tuple[str, ...] = ()
    seed: int | None = None
    logprobs: bool = False
    top_logprobs: int = 0
    stream: bool = False
    include_usage: bool = False
    headers: Mapping[str, str] = field(default_factory=dict)
    session: Mapping[str, Any] = field(default_factory=dict)


def session_fields(body: Mapping) -> dict[str, Any]:
    """The ``SESSION_FIELDS`` a body sets (not None)."""
    return {name: body[name] for name in SESSION_FIELDS if body.get(name) is not None}


class _SessionFieldTypes(BaseModel):
    """The types a body's session fields must have (as on a chat-completions body)."""

    model_config = ConfigDict(extra="allow")
    session_id: str | None = None
    user: str | None = None
    session_done: bool | str | int | None = None
    turn_type: str | None = None


def check_session_types(session: Mapping) -> None:
    """A 400 naming the field when one of ``session``'s fields (``session_fields``) has the wrong type."""
    try:
        _SessionFieldTypes.model_validate(dict(session))
    except ValidationError as exc:
        raise format_validation_error(exc) from None


def served_model(settings: ServerSettings, asked: str | None) -> str:
    """The served model a request names (the first one when it names none); 404 for any other."""
    model = asked or settings.model_names[0]
    if model not in settings.model_names:
        raise ApiError(
            404,
            f"The model {model!r} does not exist; this server serves {', '.join(settings.model_names)}",
            "model_not_found",
            "model",
        )
    return model
