"""What a chat request says about its session, and the pure rules of next states (no store, no I/O):
the session id and boolean flags of a request, history hashing, the next state that follows a turn in a
conversation, and how explicit feedback reads as a next state. The rules themselves are stated in the
:mod:`openclaw_trl.sessions` package docstring."""

from __future__ import annotations

import hashlib
import json
import math
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from openclaw_trl.chat import flatten_content
from openclaw_trl.sessions.chaining import user_text
from openclaw_trl.sessions.side_calls import is_feedback_command, is_side_message

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}
NEXT_STATE_ROLES = ("user", "tool")
MAX_CORRECTION_WINDOW_S = 600.0
"""The longest correction window: a 👎 is trained at most ten minutes after it was given."""


@dataclass
class SessionConfig:
    """How requests are grouped into sessions.

    session_idle_timeout: seconds without a request after which a session ends (its last turn then has no
        next state, unless feedback arrives for it later). Half an hour by default: a person reading a long
        answer or an agent running a long tool comes back within it, and waiting longer costs nothing.
    train_anonymous: also train on conversations whose requests carry no session id (recognised by their
        history, :mod:`openclaw_trl.sessions.chaining`). On by default: a server has one owner (one API key or
        none), and an agent such as OpenClaw sends no session id.
    correction_window_s: seconds a bare 👎 (a rating without text) waits for its correction before its
        samples can be trained (0 = no wait, from 0 to ``MAX_CORRECTION_WINDOW_S``). A correction within the
        window replaces the 👎 (the correction is what is learned); the next main request of the session, or
        its end, closes the window early (the 👎 stands). Sixty seconds by default: time to type a sentence.
    """

    session_idle_timeout: float = 1800.0
    train_anonymous: bool = True
    correction_window_s: float = 60.0

    def __post_init__(self):
        if not self.session_idle_timeout > 0:
            raise ValueError(f"session_idle_timeout must be > 0 seconds, got {self.session_idle_timeout}")
        window = self.correction_window_s
        if (
            isinstance(window, bool)
            or not isinstance(window, (int, float))
            or not math.isfinite(window)
            or not 0 <= window <= MAX_CORRECTION_WINDOW_S
        ):
            raise ValueError(
                f"correction_window_s must be a number of seconds from 0 (off) to {MAX_CORRECTION_WINDOW_S:g}, "
                f"got {window!r}"
            )


class SessionRequestError(ValueError):
    """A chat request whose session fields are invalid (the server answers 400)."""


class FeedbackError(ValueError):
    """Invalid feedback (the server answers 400); nothing is written."""


class UnknownTurnError(FeedbackError):
    """Feedback for a turn id that does not exist (the server answers 404)."""


@dataclass
class RequestContext:
    """What :meth:`TurnCollector.begin` decided about one request; pass it to ``record_turn``."""

    session_id: int  # the store's session row id
    session_key: str | None  # the client's id, or the server's ``chain-<hex>`` for an anonymous conversation
    session_generation: int
    turn_type: str  # main / side
    session_done: bool
    trainable: bool  # main turn of a session that may be trained on (the private flag is checked later)
    messages: list[dict]
    tools: list[dict] | None
    history_hash: str
    next_state_of: int | None = None  # the previous turn that this request gave its next state to


@dataclass
class FeedbackResult:
    """What a per-turn signal did. ``correction_until`` (a Unix time, on an attached bare 👎 while
    ``correction_window_s > 0``): until when a correction of the turn replaces the 👎; its samples are not
    trained before then (unless the session's next message or its end comes first)."""

    feedback_id: int
    turn_id: int
    attached: bool  # it became the turn's next state (it is stored either way)
    reason: str  # why not, when not attached
    correction_until: float | None = None

    def correction_seconds_left(self, now: float | None = None) -> float | None:
        """Seconds left to send a correction that replaces this 👎 (None: no window was opened)."""
        if self.correction_until is None:
            return None
        return max(0.0, self.correction_until - (time.time() if now is None else now))


def lower_keys(mapping: Mapping | None) -> dict:
    if not mapping:
        return {}
    return {str(k).lower(): v for k, v in mapping.items()}


_AFFINITY_CYCLE = re.compile(r":\d+$")


def request_session_key(headers: Mapping | None, body: Mapping | None) -> str | None:
    """The session id a request names (stripped), the first of: the ``X-Session-Id`` header, the body's
    ``session_id``, the ``x-session-affinity`` or ``session_id`` header, the body's ``user``.

    ``x-session-affinity`` and the ``session_id`` header are OpenClaw's session-affinity headers
    (``compat.sendSessionAffinityHeaders``), ``<session id>:<n>`` where ``n`` counts the session's compactions:
    the ``:<n>`` is dropped, so the conversation stays one session across its compactions.
    """
    h, b = lower_keys(headers), dict(body or {})
    key = h.get("x-session-id") or b.get("session_id")
    if not key:
        affinity = h.get("x-session-affinity") or h.get("session_id")
        key = _AFFINITY_CYCLE.sub("", str(affinity).strip()) if affinity else None
    key = key or b.get("user")
    return str(key).strip() or None if key is not None else None


def request_flag(value, name: str) -> bool | None:
    """A boolean request field: None when absent; bools and 1/true/yes/on/0/false/no/off strings."""
    if value is None:
        return None
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise SessionRequestError(f"{name} must be a boolean (true/false/1/0), got {value!r}")


def _normalise(message: Mapping) -> list:
    """A message as compared for history matching: role (developer = system) and flattened text.

    Reasoning and tool-call fields are ignored: clients reshape them when they echo a conversation back.
    """
    role = message.get("role")
    role = "system" if role == "developer" else role
    return [role, flatten_content(message.get("content")).strip()]


def history_hash(messages: Sequence[Mapping]) -> str:
    """A stable hash of a message list, used to check that a request continues an earlier turn."""
    blob = json.dumps([_normalise(m) for m in messages], ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def next_state_after(messages: Sequence[Mapping], reply_index: int) -> dict | None:
    """The next state of the turn whose reply is ``messages[reply_index]`` (an assistant message).

    The next state is the user or tool messages that follow the reply, up to the next assistant message.
    Several tool results (parallel tool calls) are joined; the role is that of the last one. Skipped on the
    way: messages holding only agent internal context, side calls the agent kept in its history (a memory
    flush or heartbeat prompt, the replies and tool results that answer it), and the feedback plugin's chat
    commands (``/good``, ``/bad ...``, ``/undo``, ``/learning``: their signal reached the server directly):
    they are not the person's reaction. None when there is no next state.
    """
    segment: list[dict] = []
    in_side_call = False
    for message in messages[reply_index + 1 :]:
        role = message.get("role")
        if role == "assistant":
            if segment:
                break
            continue  # a reply to a skipped side call
        if role not in NEXT_STATE_ROLES:
            continue
        if is_side_message(message):
            if segment:
                break
            in_side_call = True
            continue
        if role == "user":
            in_side_call = False
        if in_side_call or (role == "user" and (not user_text(message) or is_feedback_command(message))):
            continue
        segment.append(dict(message))
    if not segment:
        return None
    content = "\n\n".join(
        user_text(m) if m.get("role") == "user" else flatten_content(m.get("content")) for m in segment
    )
    return {"role": segment[-1]["role"], "content": content, "messages": segment}


def feedback_text(rating: int | None, text: str | None, kind: str | None = None) -> str:
    """How explicit feedback reads as a next-state message for an LLM judge (``kind="reject"``: retry)."""
    verdict = {1: "(The user rated this response as good.)", -1: "(The user rated this response as bad.)"}
    if kind == "reject":
        verdict = {-1: "(The user rejected this response and asked for a different one.)"}
    parts = [verdict[rating]] if rating in verdict else []
    if text and text.strip():
        parts.append(text.strip())
    return " ".join(parts)
