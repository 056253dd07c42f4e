"""The per-turn signals on the wire: a ``POST /v1/feedback`` body (``parse_feedback`` -> ``FeedbackRequest``),
its replies (``SignalReply``, ``WithdrawReply``), and the sessions layer's refusals as ``ApiError``s
(``signal_errors``), shared by the route and the UI, which both call the collector's signals directly."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager

from pydantic import BaseModel

from openclaw_trl.serving.errors import ApiError
from openclaw_trl.serving.limits import INT64_MAX, RequestLimits
from openclaw_trl.serving.text_check import check_text

FEEDBACK_ACTIONS = ("rate", "correct", "reject", "withdraw")
LATEST = "latest"
"""``turn_id: "latest"``: the most recent main turn of the named session (its last reply)."""


@dataclasses.dataclass(frozen=True)
class FeedbackRequest:
    """A validated ``POST /v1/feedback`` body."""

    turn_id: int | None  # None: the session's latest turn (``turn_id: "latest"``), resolved by the route
    action: str  # rate (👍/👎 + optional text) / correct (text) / reject (retry) / withdraw (undo)
    rating: int | None
    text: str | None
    session: str  # the session the turn must belong to (``openclaw.session_id`` of the reply)


class SignalReply(BaseModel):
    """The reply to ``rate``, ``correct`` and ``reject``: the stored feedback and whether it became the turn's
    next state (``reason`` says why not); a bare 👎's correction window (``correction_until``, ISO 8601 UTC, and
    ``correction_seconds_left``; both null when the signal opened none)."""

    ok: bool = True
    turn_id: int
    action: str
    rating: int | None
    feedback_id: int
    attached: bool
    reason: str
    correction_until: str | None
    correction_seconds_left: float | None


class WithdrawReply(BaseModel):
    """The reply to ``withdraw``: ``already`` withdrawn before, whether a waiting sample was dropped, and the
    step that already trained on it (that update stays; null when none did)."""

    ok: bool = True
    turn_id: int
    action: str
    rating: int | None
    already: bool
    sample_dropped: bool
    trained_step: int | None


def feedback_reply(asked: FeedbackRequest, result) -> SignalReply | WithdrawReply:
    """The reply to a signal from what the collector returned (a ``FeedbackResult`` or a ``Withdrawal``; for
    ``turn_id: "latest"`` it names the turn that took the signal)."""
    fields = dict(turn_id=result.turn_id, action=asked.action, rating=asked.rating)
    if asked.action == "withdraw":
        return WithdrawReply(
            **fields,
            already=result.already,
            sample_dropped=result.sample_dropped,
            trained_step=result.trained_step,
        )
    from openclaw_trl.sessions import utc_iso

    left = result.correction_seconds_left()
    return SignalReply(
        **fields,
        feedback_id=result.feedback_id,
        attached=result.attached,
        reason=result.reason,
        correction_until=None if result.correction_until is None else utc_iso(result.correction_until),
        correction_seconds_left=None if left is None else round(left, 1),
    )


@contextmanager
def signal_errors() -> Iterator[None]:
    """The collector's refusals of a signal as ``ApiError``: an unknown turn (or another session's) a 404,
    an invalid signal a 400."""
    from openclaw_trl.sessions import FeedbackError, UnknownTurnError

    try:
        yield
    except UnknownTurnError as exc:
        raise ApiError(404, str(exc), "turn_not_found", "turn_id") from None
    except FeedbackError as exc:
        raise ApiError(400, str(exc), "invalid_value") from None


def check_feedback_text(limits: RequestLimits, text: str | None) -> None:
    """A feedback or correction text: at most ``max_feedback_chars``, valid Unicode (400 otherwise)."""
    limits.check_feedback(text)
    if isinstance(text, str):
        check_text(text, "text")


def _feedback_turn_id(value) -> int | None:
    """A turn id: a JSON integer, or a string of ASCII digits, from 1 to 2**63 - 1 (what the store holds);
    ``"latest"`` (None): the named session's most recent main turn."""
    if value == LATEST:
        return None
    if isinstance(value, str) and value.isascii() and value.isdigit():
        value = int(value) if len(value) <= 19 else INT64_MAX + 1
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= INT64_MAX:
        short = isinstance(value, str) and len(value) <= 40 or isinstance(value, int) and abs(value) < 10**40
        shown = repr(value) if short else "this value"
        raise ApiError(
            400,
            f"'turn_id' must be the x-openclaw-turn-id of a reply (an integer from 1 to 2**63 - 1, or its "
            f'decimal digits as a string) or "latest" (the session\'s last reply), got {shown}',
            "invalid_value",
            "turn_id",
        )
    return value


def parse_feedback(payload, headers, limits: RequestLimits) -> FeedbackRequest:
    """A ``POST /v1/feedback`` body validated (400 naming the field at fault), its text within the limits."""
    if not isinstance(payload, dict):
        raise ApiError(400, "The request body must be a JSON object", "invalid_json")
    if payload.get("turn_id") in (None, ""):
        raise ApiError(
            400,
            "'turn_id' (the x-openclaw-turn-id of a reply, or \"latest\" for the session's last reply) is required",
            "invalid_value",
            "turn_id",
        )
    turn_id = _feedback_turn_id(payload["turn_id"])
    session = _feedback_session(payload, headers, limits)
    action = payload.get("action", "rate")
    if action not in FEEDBACK_ACTIONS:
        raise ApiError(
            400,
            f"'action' must be one of {', '.join(FEEDBACK_ACTIONS)}, got {action!r}",
            "invalid_value",
            "action",
        )
    rating = payload.get("rating")
    if rating is not None and (isinstance(rating, bool) or rating not in (-1, 1)):
        raise ApiError(400, "'rating' must be 1 (👍) or -1 (👎)", "invalid_value", "rating")
    text = payload.get("text")
    if text is not None and not isinstance(text, str):
        raise ApiError(400, "'text' must be a string", "invalid_value", "text")
    text = text.strip() if text else None
    if action in ("reject", "withdraw") and (rating is not None or text):
        raise ApiError(400, f"action {action!r} takes no 'rating' or 'text'", "invalid_value", "action")
    if action == "correct" and (not text or rating is not None):
        raise ApiError(
            400,
            "action 'correct' takes a 'text' (what the answer should have been) and no 'rating' (it keeps the "
            "turn's latest one, else -1); send action 'rate' with both to choose the rating",
            "invalid_value",
            "text",
        )
    if action == "rate" and rating is None and not text:
        raise ApiError(
            400, "feedback needs a 'rating' (±1) or a correction 'text'", "invalid_value", "rating"
        )
    check_feedback_text(limits, text)
    return FeedbackRequest(turn_id, action, rating, text, session)


def _feedback_session(payload: dict, headers, limits: RequestLimits) -> str:
    """The session the feedback names (as a chat request names it: ``X-Session-Id``, else ``session_id``,
    else ``user``); required, since a turn only takes signals from its own session."""
    from openclaw_trl.sessions import request_session_key

    for name in ("session_id", "user"):
        if payload.get(name) is not None and not isinstance(payload[name], str):
            raise ApiError(400, f"'{name}' must be a string", "invalid_value", name)
    session = request_session_key(headers, payload)
    if session is None:
        raise ApiError(
            400,
            "Name the session of the turn: 'session_id' (or the X-Session-Id header) is the "
            "openclaw.session_id of the reply (its x-openclaw-session-id header). A turn takes feedback only "
            "from its own session.",
            "missing_session",
            "session_id",
        )
    limits.check_session_id(session)
    return session
