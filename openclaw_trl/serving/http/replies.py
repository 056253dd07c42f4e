"""What every protocol's turn replies share: the headers that name the stored turn, and the SSE response."""

from __future__ import annotations

from collections.abc import AsyncIterator

from fastapi.responses import StreamingResponse

from openclaw_trl.serving.pipeline.prepare import PreparedChat
from openclaw_trl.serving.pipeline.recording import TurnResult

TURN_ID_HEADER = "x-openclaw-turn-id"
POLICY_VERSION_HEADER = "x-openclaw-policy-version"
SESSION_ID_HEADER = "x-openclaw-session-id"


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
