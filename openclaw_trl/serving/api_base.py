"""What every route shares: the bearer-key check (which also says whose request it is), the bounded JSON body,
the caller's ``ChatService``, collector and learning control, and the headers that name a reply's turn.

A server has one tenant (no users: the run's only adapter, ``app.state.api_key`` or no auth) or one tenant per
user (``app.state.user_keys``: the presented key selects the user). ``require_api_key`` puts the caller's
``Tenant`` on ``request.state.tenant``; every route reads its service, collector and learning control from there,
so a route can only ever reach the caller's own sessions, turns, versions and status."""

from __future__ import annotations

import hmac
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Tenant:
    """One user's side of the server: their name (None: the run's only user), chat service (engine view,
    store, Best-of-N, status), collector (per-turn signals) and learning control (None: nothing trains)."""

    name: str | None
    service: ChatService
    collector: Any
    learning: Any = None


def _bearer(request: Request) -> str:
    auth = request.headers.get("authorization", "")
    if not auth.lower().startswith("bearer "):
        raise ApiError(401, "Missing bearer token: send 'Authorization: Bearer <key>'", "missing_api_key")
    return auth[7:].strip()


async def require_api_key(request: Request) -> None:
    """Dependency: the caller's key is valid; ``request.state.tenant`` is then whose request it is.

    With users (``app.state.user_keys``) the key must be one user's (401 otherwise) and selects them; without,
    the key must match ``app.state.api_key`` when one is set."""
    state = request.app.state
    user_keys = getattr(state, "user_keys", None)
    if user_keys is not None:
        name = user_keys.user_of(_bearer(request))
        if name is None:
            raise ApiError(401, "Incorrect API key provided", "invalid_api_key")
        request.state.tenant = state.tenants[name]
        return
    key = state.api_key
    if key and not same_secret(_bearer(request), key):
        raise ApiError(401, "Incorrect API key provided", "invalid_api_key")
    request.state.tenant = state.tenants[None]


AUTHORIZED = [Depends(require_api_key)]
"""The ``dependencies`` of every route but ``/healthz`` and the unknown-route answer."""


def tenant_of(request: Request) -> Tenant:
    """The caller's ``Tenant`` (set by ``require_api_key``)."""
    return request.state.tenant


def service_of(request: Request) -> ChatService:
    """The caller's ``ChatService``."""
    return tenant_of(request).service


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
