"""``POST /v1/feedback``: a per-turn signal (``rate``, ``correct``, ``reject``, ``withdraw``) sent to the
collector that owns them (``openclaw_trl.sessions.signals``), on a turn named by id or on the named session's
latest turn (``turn_id: "latest"``); ``serving.protocols`` describes the wire format."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request

from openclaw_trl.serving.http.auth import AUTHORIZED, tenant_of
from openclaw_trl.serving.http.body import json_body
from openclaw_trl.serving.protocols.feedback.schema import (
    FeedbackRequest,
    feedback_reply,
    parse_feedback,
    signal_errors,
)

router = APIRouter()


@router.post("/v1/feedback", dependencies=AUTHORIZED)
async def feedback(request: Request):
    limits = request.app.state.settings.limits
    payload = await json_body(request, limits)
    asked = parse_feedback(payload, request.headers, limits)
    result = await asyncio.to_thread(_send, tenant_of(request).collector, asked)
    return feedback_reply(asked, result).model_dump()


def _send(collector, asked: FeedbackRequest):
    """Blocking: the signal, on the collector (``TurnSignals``); its refusals as ``ApiError`` 400 / 404.
    ``turn_id: "latest"`` is the session's most recent main turn (a 404 when it has none)."""
    turn, session = asked.turn_id, asked.session
    with signal_errors():
        if turn is None:
            turn = collector.latest_turn(session)
        if asked.action == "withdraw":
            return collector.withdraw(turn, session=session)
        if asked.action == "reject":
            return collector.reject(turn, session=session)
        if asked.action == "correct":
            return collector.correct(turn, asked.text, session=session)
        return collector.feedback(turn, asked.rating, asked.text, session=session)
