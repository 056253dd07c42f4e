"""Per-turn signals from the person in the loop: 👍/👎, a correction, a rejection (retry), a withdrawal (undo).

Each operation addresses one turn by id (any turn of a conversation, not only the last) and is one store
transaction; the UI's chatbot events and ``POST /v1/feedback`` both call them:

* :meth:`TurnSignals.feedback` (👍 = +1 / 👎 = -1, optional text): stored, and the turn's next state; a bare
  👎 (no text) opens the turn's correction window (``SessionConfig.correction_window_s``, below);
* :meth:`TurnSignals.correct` (a typed correction or an edited answer): the text with the turn's latest
  rating (👎 when it has none): what the answer should have been becomes the next state and the judge's hint;
* :meth:`TurnSignals.reject` (retry): a 👎 without text, read by the judge as "asked for another answer";
  the new answer is a new turn of the same conversation, trainable as usual;
* :meth:`TurnSignals.withdraw` (undo): the turn is closed as ``withdrawn``, never judged or trained, and a
  waiting sample of it is dropped (kept in the store with that reason). The user message of the undone
  exchange stays the next state of the turn before it: the person did write it in reply to that answer.

A caller that does not know the turn id asks for the latest one of its session first (:meth:`TurnSignals.latest_turn`:
the last reply of that conversation, e.g. a chat command typed right after it).

Ownership: a caller names the session it speaks for (``session``: the key it sent, or for a conversation it named
no id for the server's ``chain-<hex>`` key, returned as ``openclaw.session_id``; see :func:`session_matches`); a
turn of a session without a key (stored by an older version) cannot be named; a turn of any other session is
answered exactly like an unknown turn (``UnknownTurnError``), so no caller can act on, or even probe, another
session's turns. ``session=None`` skips the check: only for in-process callers that own every session.

Feedback on a turn that was already judged replaces the earlier next state when the turn's sample was not
trained on yet (the sample is superseded: kept, never handed out, and the turn is judged again); on a turn
already trained on, on a withdrawn turn or on a side turn it is recorded only (``FeedbackResult.attached``
False, ``reason`` says why). Nothing is deleted.

Correction window: a 👎 is often followed by what the answer should have been. A bare 👎 (a rating of -1 with
no text) therefore waits ``correction_window_s`` seconds before its samples can be trained
(``FeedbackResult.correction_until``; :mod:`openclaw_trl.store.holds`): a correction (or an edit) within the
window supersedes the 👎's untrained sample, so the correction is what is learned. The session's next main
request, or its end, closes the window early and the 👎 stands. A 👍 does not wait: nothing more is expected
after it, and holding it would only delay the update the person asked for; a 👎 with a text is already a
correction, and a retry (reject) is followed by the new answer's request at once.
"""

from __future__ import annotations

import hmac
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone

from openclaw_trl.records import Session, Turn
from openclaw_trl.sessions.requests import (
    FeedbackError,
    FeedbackResult,
    SessionConfig,
    UnknownTurnError,
    feedback_text,
)
from openclaw_trl.store import FEEDBACK_KINDS, Store, Withdrawal

MAX_TURN_ID = 2**63 - 1  # the largest row id SQLite stores


def session_name(session: Session) -> str | None:
    """The name a client gives a session: its key (the client's id, or the server's ``chain-<hex>``); None for a
    session stored without a key."""
    return session.key


def session_matches(session: Session, named: str) -> bool:
    """Whether ``named`` (the session a caller says it speaks for) is ``session`` (compared in constant
    time: a session's name is what lets its owner act on its turns)."""
    name = session_name(session)
    return isinstance(named, str) and name is not None and hmac.compare_digest(name.encode(), named.encode())


def utc_iso(timestamp: float) -> str:
    """A Unix time as ISO 8601 in UTC with milliseconds (``2026-01-02T03:04:05.678Z``)."""
    return datetime.fromtimestamp(timestamp, timezone.utc).isoformat(timespec="milliseconds")[:-6] + "Z"


def correction_window_view(store: Store, window_s: float, now: float | None = None, limit: int = 20) -> dict:
    """The bare 👎s waiting for a correction, for status pages (module docstring: correction window).

    ``window_s`` (the configured window), ``waiting`` (how many ratings wait), ``seconds_left`` (until the
    first window closes; None when none is open) and ``turns``: up to ``limit`` of them, the first to close
    first, each ``{"turn_id", "correction_until" (ISO 8601, UTC), "seconds_left"}``.
    """
    now = time.time() if now is None else now
    windows = store.holds.open_correction_windows(now, limit)
    turns = [
        {"turn_id": w.turn_id, "correction_until": utc_iso(w.until), "seconds_left": round(w.until - now, 1)}
        for w in windows
    ]
    return {
        "window_s": float(window_s),
        "waiting": store.holds.count_open_correction_windows(now) if len(windows) == limit else len(windows),
        "seconds_left": turns[0]["seconds_left"] if turns else None,
        "turns": turns,
    }


def _check_turn_id(turn_id) -> int:
    if isinstance(turn_id, bool) or not isinstance(turn_id, int) or not 1 <= turn_id <= MAX_TURN_ID:
        raise FeedbackError(f"turn_id must be an integer from 1 to 2**63 - 1, got {turn_id!r}"[:200])
    return turn_id


class TurnSignals:
    """The per-turn operations of :class:`~openclaw_trl.sessions.TurnCollector` (module docstring)."""

    store: Store
    config: SessionConfig
    clock: Callable[[], float]
    _lock: threading.RLock

    def _owned_turn(self, turn_id: int, session: str | None) -> Turn:
        """The turn ``turn_id`` of the session named ``session`` (module docstring: ownership)."""
        turn = self.store.conversations.get_turn(turn_id)
        if turn is not None and session is not None:
            owner = self.store.conversations.get_session(turn.session_id)
            if owner is None or not session_matches(owner, session):
                turn = None
        if turn is None:
            where = "" if session is None else f" in session {session!r}"
            raise UnknownTurnError(f"unknown turn id {turn_id}{where}"[:300])
        return turn

    def latest_turn(self, session: str) -> int:
        """The id of the most recent main turn of the session named ``session`` (the conversation's last reply);
        ``UnknownTurnError`` when that session has none (or does not exist: the same answer, so nothing about
        other sessions can be probed)."""
        if not isinstance(session, str) or not session:
            raise FeedbackError("the latest turn needs the name of its session")
        with self._lock:
            turn = self.store.conversations.last_main_turn_of_key(session)
            if turn is None:
                raise UnknownTurnError(f"no turn yet in session {session!r}"[:300])
            return turn.id

    def feedback(
        self,
        turn_id: int,
        rating: int | None,
        text: str | None = None,
        kind: str | None = None,
        *,
        session: str | None = None,
    ) -> FeedbackResult:
        """Explicit feedback on a turn of ``session``: ``rating`` +1 / -1, or None with a non-empty ``text``.

        ``kind`` (one of ``FEEDBACK_KINDS``) defaults to ``correction`` with a text, else ``rating``. It is
        stored, and becomes the turn's next state unless the module docstring's rules say otherwise; an
        attached bare 👎 opens the turn's correction window (module docstring).
        """
        _check_turn_id(turn_id)
        if rating is not None:
            if isinstance(rating, bool) or not isinstance(rating, (int, float)) or rating not in (1, -1):
                raise FeedbackError(f"rating must be +1 or -1, got {rating!r}")
            rating = int(rating)
        if text is not None and not isinstance(text, str):
            raise FeedbackError(f"text must be a string, got {type(text).__name__}")
        text = text.strip() if text else None
        if rating is None and not text:
            raise FeedbackError("feedback needs a rating (+1 or -1) or a text")
        kind = kind or ("correction" if text else "rating")
        if kind not in FEEDBACK_KINDS:
            raise FeedbackError(f"feedback kind must be one of {', '.join(FEEDBACK_KINDS)}, got {kind!r}")
        with self._lock:
            turn = self._owned_turn(turn_id, session)
            feedback_id = self.store.conversations.add_feedback(
                turn_id, rating, text, attached=False, kind=kind
            )
            state = {
                "role": "user",
                "content": feedback_text(rating, text, kind),
                "rating": rating,
                "text": text,
                "kind": kind,
                "feedback_id": feedback_id,
            }
            now = self.clock()
            window = self.config.correction_window_s
            until = now + window if kind == "rating" and rating == -1 and window > 0 else None
            refusal = self.store.conversations.attach_feedback(turn_id, state, now, correction_until=until)
            if refusal is not None:
                return FeedbackResult(feedback_id, turn_id, False, refusal)
            self.store.conversations.set_feedback_attached(feedback_id, True)
            self.store.conversations.touch_session(turn.session_id, now)
            return FeedbackResult(feedback_id, turn_id, True, "", correction_until=until)

    def correct(
        self, turn_id: int, text: str, kind: str = "correction", *, session: str | None = None
    ) -> FeedbackResult:
        """What the answer of ``turn_id`` should have been (typed, or the answer edited: ``kind="edit"``),
        with the turn's latest rating, 👎 when it has none."""
        _check_turn_id(turn_id)
        if not isinstance(text, str) or not text.strip():
            raise FeedbackError("a correction needs a non-empty text")
        if kind not in ("correction", "edit"):
            raise FeedbackError(f"a correction's kind is 'correction' or 'edit', got {kind!r}")
        with self._lock:
            self._owned_turn(turn_id, session)
            rating = self.store.conversations.latest_rating(turn_id)
            return self.feedback(turn_id, -1 if rating is None else rating, text, kind, session=session)

    def reject(self, turn_id: int, *, session: str | None = None) -> FeedbackResult:
        """Retry: the user rejected this answer and asked for another (a 👎 without text)."""
        return self.feedback(turn_id, -1, None, "reject", session=session)

    def withdraw(self, turn_id: int, *, session: str | None = None) -> Withdrawal:
        """Undo: withdraw the turn without a training signal (module docstring); idempotent.

        ``Withdrawal.trained_step`` is the training step that already used its sample (that update stays).
        """
        _check_turn_id(turn_id)
        with self._lock:
            self._owned_turn(turn_id, session)
            return self.store.conversations.withdraw_turn(turn_id)
