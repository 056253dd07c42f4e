"""What every route shares: the bearer-key check, the bounded JSON body, the ``ChatService`` of the app and
the headers that name a reply's turn."""

from __future__ import annotations

import hmac
import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi import Depends, Request
from fastapi.responses import StreamingResponse

from openclaw_trl.serving.chat_prepare import PreparedChat
from openclaw_trl.serving.chat_service import ChatService
from openclaw_trl.serving.errors import ApiError
from openclaw_trl.serving.openai_schema import RequestLimits
from openclaw_trl.serving.recording import TurnResult
from openclaw_trl.serving.text_check import check_text

TURN_ID_HEADER = "x-openclaw-turn-id"
POLICY_VERSION_HEADER = "x-openclaw-policy-version"
SESSION_ID_HEADER = "x-openclaw-session-id"


def same_secret(given: str, key: str) -> bool:
    """Constant-time comparison of a presented secret with the server's key."""
    return hmac.compare_digest((given or "").encode(), key.encode())


async def require_api_key(request: Request) -> None:
    """Dependency: the ``Authorization: Bearer <key>`` header matches ``app.state.api_key`` (when set)."""
    key = request.app.state.api_key
    if not key:
        return
    auth = request.headers.get("authorization", "")
    if not auth.lower().startswith("bearer "):
        raise ApiError(401, "Missing bearer token: send 'Authorization: Bearer <key>'", "missing_api_key")
    if not same_secret(auth[7:].strip(), key):
        raise ApiError(401, "Incorrect API key provided", "invalid_api_key")


AUTHORIZED = [Depends(require_api_key)]
"""The ``dependencies`` of every route but ``/healthz`` and the unknown-route answer."""


def service_of(request: Request) -> ChatService:
    return request.app.state.service


async def json_body(request: Request, limits: RequestLimits) -> Any:
    """The parsed JSON body: at most ``max_request_bytes`` (413), valid JSON (400), valid Unicode (400)."""
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limits.max_request_bytes:
        raise limits.over("max_request_bytes", int(length), None, "The request body (bytes)")
    raw = await _read_body(request, limits.max_request_bytes)
    if len(raw) > limits.max_request_bytes:
        raise limits.over("max_request_bytes", len(raw), None, "The request body (bytes)")
    try:
        payload = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise ApiError(
            400, f"We could not parse the JSON body of your request: {exc}", "invalid_json"
        ) from None
    check_text(payload, raw=raw)
    return payload


async def _read_body(request: Request, limit: int) -> bytes:
    """The body, read chunk by chunk and stopped one byte past ``limit`` (a body without a length is bounded too)."""
    chunks, size = [], 0
    async for chunk in request.stream():
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            break
    return b"".join(chunks)


def turn_headers(prep: PreparedChat, result: TurnResult) -> dict[str, str]:
    """The headers that name a stored turn (its id, the policy version that sampled it, its session)."""
    headers = {POLICY_VERSION_HEADER: str(result.policy_version)}
    if result.turn_id is not None:
        headers[TURN_ID_HEADER] = str(result.turn_id)
    if prep.ctx.session_key:
        headers[SESSION_ID_HEADER] = prep.ctx.session_key
    return headers


def streaming_response(prep: PreparedChat, events: AsyncIterator[bytes]) -> StreamingResponse:
    """An SSE reply (its headers leave before the turn exists: only the session id is known then)."""
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    if prep.ctx.session_key:
        headers[SESSION_ID_HEADER] = prep.ctx.session_key
    return StreamingResponse(events, media_type="text/event-stream", headers=headers)
