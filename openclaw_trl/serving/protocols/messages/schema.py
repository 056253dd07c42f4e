"""The Messages request (``POST /v1/messages`` and ``/v1/messages/count_tokens``): every top-level field is
honoured, accepted without effect (documented), or refused with a 400 that says what to use instead; an unknown
field is a 400 as well. ``parse_request`` checks the fields and their types and ranges; the content blocks are
checked and converted by ``convert``.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from openclaw_trl.serving.errors import ApiError, format_validation_error
from openclaw_trl.serving.limits import INT64_MAX

Num = Annotated[float, Field(strict=True)]
Int = Annotated[int, Field(strict=True)]
Bool = Annotated[bool, Field(strict=True)]

ANTHROPIC_VERSION = "2023-06-01"
"""The wire format served: ``anthropic-version`` ``2023-06-01``, which later versions keep (a request may name
any version from this date on, or none); earlier versions are refused."""
VERSION_PATTERN = re.compile(r"\d{4}-\d{2}-\d{2}")

SESSION_FIELDS = ("session_id", "session_done", "turn_type", "session_private")
"""OpenClaw's session fields, accepted in the body as in chat completions (the X-Session-* headers win)."""

_REFUSED: dict[str, str] = {
    "thinking": (
        "the model reasons as its chat template makes it (its reasoning comes back as thinking blocks) and "
        "takes no thinking budget: omit 'thinking' (for OpenClaw: set reasoning: false on the model entry)"
    ),
    "output_config": "there is no effort or output format to configure: omit 'output_config'",
    "output_format": "only plain text is produced (no JSON schema is enforced): omit 'output_format'",
    "service_tier": "there is one service tier: omit 'service_tier'",
    "container": "no code runs on this server: omit 'container' and run tools in the client",
    "mcp_servers": "this server calls no MCP servers: define their tools as tools and run them in the client",
    "context_management": "the conversation is never edited or compacted here: omit 'context_management'",
    "fallbacks": "there is no other model to fall back on: omit 'fallbacks'",
    "speed": "there is one speed: omit 'speed'",
    "inference_geo": "the model runs where this server runs: omit 'inference_geo'",
    "diagnostics": "this server returns no diagnostics: omit 'diagnostics'",
    "user_profile_id": "name the session with the X-Session-Id header or metadata.user_id",
    "workspace_id": "this server has no workspaces: each user's key selects their own model",
}
_IGNORED = ("cache_control",)
"""Accepted and without effect: prompt caching hints (the server keeps no prompt cache)."""

_COUNT_FIELDS = ("model", "messages", "system", "tools", "tool_choice", *_IGNORED)
_CREATE_FIELDS = (
    *_COUNT_FIELDS,
    "max_tokens",
    "stop_sequences",
    "temperature",
    "top_p",
    "top_k",
    "metadata",
    "stream",
    *SESSION_FIELDS,
)


class MessagesRequest(BaseModel):
    """The Messages request fields this server honours (``messages``, ``system``, ``tools`` and
    ``tool_choice`` are checked block by block in ``convert``)."""

    model_config = ConfigDict(extra="allow")
    model: str = Field(min_length=1, max_length=256)
    messages: list[Any] = Field(min_length=1)
    system: str | list[Any] | None = None
    tools: list[Any] | None = None
    tool_choice: dict | None = None
    max_tokens: Int | None = Field(default=None, ge=1, le=INT64_MAX)
    stop_sequences: list[str] | None = None
    temperature: Num | None = Field(default=None, ge=0.0, le=1.0)
    top_p: Num | None = Field(default=None, gt=0.0, le=1.0)
    top_k: Int | None = Field(default=None, ge=0, le=2**31 - 1)
    metadata: dict | None = None
    stream: Bool = False

    @property
    def user_id(self) -> str | None:
        """``metadata.user_id``: names the session (as ``user`` does in chat completions)."""
        return (self.metadata or {}).get("user_id")


def parse_request(payload: Any, count_only: bool = False) -> MessagesRequest:
    """Validate a Messages body (``count_only``: a ``count_tokens`` body, which takes no sampling fields):
    refused and unknown fields, types and ranges, ``max_tokens`` (required to create), ``metadata``."""
    if not isinstance(payload, dict):
        raise ApiError(400, "The request body must be a JSON object", "invalid_json")
    allowed = _COUNT_FIELDS if count_only else _CREATE_FIELDS
    for name, value in payload.items():
        if name in allowed:
            continue
        if name in _REFUSED and value is not None:
            raise ApiError(
                400, f"'{name}' is not supported: {_REFUSED[name]}.", "unsupported_parameter", name
            )
        if name not in _REFUSED:
            where = "count_tokens requests" if count_only and name in _CREATE_FIELDS else "this API"
            raise ApiError(
                400,
                f"{name[:128]}: Extra inputs are not permitted in {where}.",
                "unknown_parameter",
                name[:128],
            )
    if "messages" in payload and not isinstance(payload["messages"], list):
        raise ApiError(400, "messages: must be a list of message objects", "invalid_value", "messages")
    try:
        request = MessagesRequest.model_validate(payload)
    except ValidationError as exc:
        raise _anthropic_wording(format_validation_error(exc)) from None
    if not count_only and request.max_tokens is None:
        raise ApiError(400, "max_tokens: Field required", "invalid_value", "max_tokens")
    if request.stop_sequences is not None and any(not s for s in request.stop_sequences):
        raise ApiError(400, "stop_sequences: each must be non-empty", "invalid_value", "stop_sequences")
    _check_metadata(request.metadata)
    return request


def _anthropic_wording(err: ApiError) -> ApiError:
    """A field error worded as Anthropic words it (``field: problem``)."""
    if err.param and err.message.startswith("Invalid value for '"):
        problem = err.message.split("': ", 1)[-1]
        return ApiError(err.status, f"{err.param}: {problem}", err.code, err.param)
    return err


def _check_metadata(metadata: dict | None) -> None:
    """``metadata`` holds ``user_id`` only (a string or null)."""
    if not metadata:
        return
    extra = sorted(set(metadata) - {"user_id"})
    if extra:
        raise ApiError(
            400,
            f"metadata.{extra[0][:64]}: Extra inputs are not permitted (metadata holds user_id only).",
            "unknown_parameter",
            "metadata",
        )
    user_id = metadata.get("user_id")
    if user_id is not None and not isinstance(user_id, str):
        raise ApiError(400, "metadata.user_id: Input should be a valid string", "invalid_value", "metadata")
