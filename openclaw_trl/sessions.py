"""Turn collection: which session a chat request belongs to, and which turn its messages are the next state of.

The server calls a :class:`TurnCollector` for every chat request, in this order::

    ctx = collector.begin(messages, tools=tools, headers=request.headers, body=body)   # before generating
    ...render ctx.messages, generate...
    turn_id = collector.record_turn(ctx, prompt_ids, completion, temperature,
                                    completion_text=None, response_message=message)   # before replying
    # if generation failed instead: collector.abort(ctx)

and, for the 👍/👎/correction route, ``collector.feedback(turn_id, rating, text)``; it calls
``collector.reap()`` periodically (``begin`` reaps too). ``collector.set_private(key, True)`` is the
"don't learn from this conversation" switch (a request can also carry it, see below).

Request fields (headers are matched case-insensitively):

* session id: ``X-Session-Id`` header, else body ``session_id``, else the OpenAI ``user`` field. None of
  them: an *anonymous* request. Anonymous requests are served and stored, chained into conversations by
  their message history, and trained on only with ``SessionConfig.train_anonymous``.
* turn type: ``X-Turn-Type`` header, else body ``turn_type``, else ``main``. ``side`` turns are stored
  and never trained on, never take or give a next state.
* ``X-Session-Done`` header or body ``session_done`` (``1/true/yes/on``): the session ends after this turn.
* ``X-Session-Private`` header or body ``session_private`` (or ``begin(private=True)``): flags the session
  private. A request can only switch the flag on (a server default of ``False`` must never undo the UI
  switch); switching it off is an explicit ``set_private(key, False)``.

The next state of a main turn *t* is what follows its response in the next main request of the same
session: the user message, or the tool result(s) of the tool calls it made. Explicit feedback on a turn
(:meth:`TurnCollector.feedback`) is a next state too, and wins over a request one that was not judged yet.

Rules that keep every turn accounted for:

* next-state attachment and scoring do not depend on any record/log switch: every main turn with a
  next state is ``ready`` for the scorer.
* sessions end on ``session_done`` *or* after ``session_idle_timeout`` s idle (:meth:`reap`), also when
  the response was empty; a turn without a next state is closed, never trained, and never leaks memory
  (the state lives in the store). Sessions are keyed by (id, generation): a reused id after the end
  starts a new generation and never overwrites earlier turns.
* ``main`` is the default turn type; without any id a request is anonymous (never chained with other
  users' requests under one ``"unknown"`` key) and not trained on unless ``train_anonymous``.
* the next state is attached only when the new request's history extends turn *t* (same messages up
  to *t*'s prompt, then an assistant message); otherwise (an edit, a regeneration, a compaction) turn *t* is
  closed as ``history_diverged``. Parallel tool results are all kept (joined), not only the last one; a
  trailing message that is neither user nor tool is never a next state; a turn takes a next state once.
* a turn without a usable verdict produces no sample (no "at least one sample per session" promotion, no
  masked placeholder samples) (see :mod:`openclaw_trl.judging.scorer`).
* nothing is dropped at batch boundaries (see :mod:`openclaw_trl.store`).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from openclaw_trl.engines.base import Completion
from openclaw_trl.judge import flatten_content
from openclaw_trl.records import Session, Turn
from openclaw_trl.store import Store

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}
NEXT_STATE_ROLES = ("user", "tool")


@dataclass
class SessionConfig:
    """How requests are grouped into sessions.

    session_idle_timeout: seconds without a request after which a session ends (its last turn then has no
        next state, unless feedback arrives for it later). Half an hour by default: a person reading a long
        answer or an agent running a long tool comes back within it, and waiting longer costs nothing.
    train_anonymous: also train on requests that carry no session id (they are chained by history).
    """

    session_idle_timeout: float = 1800.0
    train_anonymous: bool = False

    def __post_init__(self):
        if not self.session_idle_timeout > 0:
            raise ValueError(f"session_idle_timeout must be > 0 seconds, got {self.session_idle_timeout}")


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
    session_key: str | None  # the client's id (None: anonymous)
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
    feedback_id: int
    turn_id: int
    attached: bool  # it became the turn's next state (it is stored either way)
    reason: str  # why not, when not attached


def _lower_keys(mapping: Mapping | None) -> dict:
    if not mapping:
        return {}
    return {str(k).lower(): v for k, v in mapping.items()}


def request_session_key(headers: Mapping | None, body: Mapping | None) -> str | None:
    """The session id a request names: ``X-Session-Id``, else body ``session_id``, else ``user`` (stripped)."""
    h, b = _lower_keys(headers), dict(body or {})
    key = h.get("x-session-id") or b.get("session_id") or b.get("user")
    return str(key).strip() or None if key is not None else None


def _flag(value, name: str) -> bool | None:
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


def next_state_after(messages: Sequence[Mapping], prompt_len: int) -> dict | None:
    """The next state of the turn whose prompt was ``messages[:prompt_len]``.

    ``messages[prompt_len]`` is that turn's response (an assistant message); the next state is the user
    or tool messages that follow it, up to the next assistant message. Several tool results (parallel
    tool calls) are joined; the role is that of the last one. None when there are none.
    """
    segment = []
    for message in messages[prompt_len + 1 :]:
        if message.get("role") == "assistant":
            break
        if message.get("role") in NEXT_STATE_ROLES:
            segment.append(dict(message))
    if not segment:
        return None
    content = "\n\n".join(flatten_content(m.get("content")) for m in segment)
    return {"role": segment[-1]["role"], "content": content, "messages": segment}


def feedback_text(rating: int | None, text: str | None) -> str:
    """How explicit feedback reads as a next-state message for an LLM judge."""
    verdict = {1: "(The user rated this response as good.)", -1: "(The user rated this response as bad.)"}
    parts = [verdict[rating]] if rating in verdict else []
    if text and text.strip():
        parts.append(text.strip())
    return " ".join(parts)


class TurnCollector:
    """Maps chat requests to sessions and turns in the :class:`~openclaw_trl.store.Store` (module docstring).

    Thread-safe: one lock serialises the bookkeeping (a few SQLite statements per request), never the
    generation itself. ``tokenizer`` (optional) decodes completion text when the server passes none;
    ``clock`` is injectable for tests.
    """

    def __init__(
        self,
        store: Store,
        config: SessionConfig | None = None,
        tokenizer=None,
        clock: Callable[[], float] = time.time,
    ):
        self.store = store
        self.tokenizer = tokenizer
        self.config = config or SessionConfig()
        self.clock = clock
        self._lock = threading.RLock()

    # ------------------------------------------------------------------ requests
    def begin(
        self,
        messages: Sequence[Mapping],
        tools: Sequence[Mapping] | None = None,
        headers: Mapping | None = None,
        body: Mapping | None = None,
        *,
        session_key: str | None = None,
        turn_type: str | None = None,
        session_done: bool | None = None,
        private: bool | None = None,
    ) -> RequestContext:
        """Resolve the session of a request and attach its next state to the previous main turn.

        The session fields come from ``headers`` / ``body`` (module docstring); the keyword arguments, when
        not None, override them (for a server that parsed them already).
        """
        if not isinstance(messages, Sequence) or isinstance(messages, (str, bytes)) or not messages:
            raise SessionRequestError("messages must be a non-empty list")
        if not all(isinstance(m, Mapping) for m in messages):
            raise SessionRequestError("every message must be an object")
        h, b = _lower_keys(headers), dict(body or {})
        key = (
            str(session_key).strip() or None
            if session_key is not None
            else request_session_key(headers, body)
        )
        turn_type = str(turn_type or h.get("x-turn-type") or b.get("turn_type") or "main").strip().lower()
        if turn_type not in ("main", "side"):
            raise SessionRequestError(f"turn type must be 'main' or 'side', got {turn_type!r}")
        if session_done is None:
            session_done = _flag(h.get("x-session-done", b.get("session_done")), "session_done")
        done = bool(session_done)
        if private is None:
            private = _flag(h.get("x-session-private", b.get("session_private")), "session_private")
        messages = [dict(m) for m in messages]
        tools = [dict(t) for t in tools] if tools else None
        now = self.clock()
        with self._lock:
            self.reap(now)
            session, prev = self._resolve_session(key, messages, now)
            if private:  # a request can only switch it on; off is an explicit set_private(key, False)
                self.store.set_private(session.id, True)
            ctx = RequestContext(
                session_id=session.id,
                session_key=key,
                session_generation=session.generation,
                turn_type=turn_type,
                session_done=done,
                trainable=turn_type == "main" and (key is not None or self.config.train_anonymous),
                messages=messages,
                tools=tools,
                history_hash=history_hash(messages),
            )
            if turn_type == "main":
                ctx.next_state_of = self._attach_request_next_state(prev, messages, now)
            self.store.touch_session(session.id, now)
        return ctx

    def _resolve_session(
        self, key: str | None, messages: list[dict], now: float
    ) -> tuple[Session, Turn | None]:
        """The open session of the request (a new one when none continues), and its previous main turn."""
        if key is not None:
            session = self.store.find_open_session(key)
            if session is None:
                session = self.store.get_session(self.store.open_session(key, now))
                return session, None
            return session, self.store.last_main_turn(session.id)
        # anonymous: continue the open anonymous conversation whose last main turn this request extends
        hashes = [
            history_hash(messages[:k])
            for k in range(1, len(messages))
            if messages[k].get("role") == "assistant"
        ]
        prev = self.store.find_turn_by_history(hashes, anonymous_only=True)
        if prev is not None:
            return self.store.get_session(prev.session_id), prev
        return self.store.get_session(self.store.open_session(None, now)), None

    def _attach_request_next_state(self, prev: Turn | None, messages: list[dict], now: float) -> int | None:
        if prev is None or prev.status != "awaiting":
            return None
        k = len(prev.prompt_messages)
        extends = (
            len(messages) > k + 1
            and messages[k].get("role") == "assistant"
            and history_hash(messages[:k]) == prev.history_hash
        )
        if not extends:
            self.store.close_turn(prev.id, "history_diverged")
            return None
        state = next_state_after(messages, k)
        if state is None:
            # e.g. a trailing system reminder: not a next state. If the conversation already moved past
            # turn t without one, t never gets one.
            if any(m.get("role") == "assistant" for m in messages[k + 1 :]):
                self.store.close_turn(prev.id, "no_next_state")
            return None
        return prev.id if self.store.attach_next_state(prev.id, state, "request", now) else None

    def record_turn(
        self,
        ctx: RequestContext,
        prompt_ids: Sequence[int],
        completion: Completion,
        temperature: float,
        completion_text: str | None = None,
        response_message: dict | None = None,
    ) -> int:
        """Commit the served turn (call before replying); ends the session if the request said so.

        ``completion`` is the engine's result (ids, sampling log-probs, finish reason, policy version);
        ``temperature`` the turn's sampling temperature (0 = greedy: such a turn is judged but never
        trained on); ``completion_text`` defaults to the ids decoded
        with special tokens kept (needs ``tokenizer``); ``response_message`` is the parsed assistant message
        as the client received it (kept for export). An empty completion is stored but not trainable.
        """
        if completion_text is None:
            completion_text = (
                self.tokenizer.decode(list(completion.token_ids), skip_special_tokens=False)
                if self.tokenizer is not None
                else ""
            )
        now = self.clock()
        with self._lock:
            turn_id = self.store.add_turn(
                ctx.session_id,
                ctx.turn_type,
                ctx.messages,
                ctx.tools,
                prompt_ids,
                completion.token_ids,
                completion.logprobs,
                completion_text,
                temperature,
                completion.policy_version,
                completion.finish_reason,
                trainable=ctx.trainable and len(completion.token_ids) > 0,
                history_hash=ctx.history_hash,
                response_message=response_message,
                now=now,
            )
            if ctx.session_done:
                self.store.end_session(ctx.session_id, "done", now)
        return turn_id

    def abort(self, ctx: RequestContext) -> None:
        """The request failed before a turn was recorded: still honour its ``session_done``."""
        if ctx.session_done:
            with self._lock:
                self.store.end_session(ctx.session_id, "done", self.clock())

    # ------------------------------------------------------------------ feedback and session control
    def feedback(self, turn_id: int, rating: int | None, text: str | None = None) -> FeedbackResult:
        """Explicit feedback on a turn (👍 = +1, 👎 = -1, optional text such as a correction).

        It is stored, and becomes the turn's next state unless the turn is a side turn or already has a
        sample. ``rating`` must be +1 or -1, or None with a non-empty ``text``.
        """
        if isinstance(turn_id, bool) or not isinstance(turn_id, int):
            raise FeedbackError(f"turn_id must be an integer, got {turn_id!r}")
        if rating is not None:
            if isinstance(rating, bool) or not isinstance(rating, (int, float)) or rating not in (1, -1):
                raise FeedbackError(f"rating must be +1 or -1, got {rating!r}")
            rating = int(rating)
        if text is not None and not isinstance(text, str):
            raise FeedbackError(f"text must be a string, got {type(text).__name__}")
        text = text.strip() if text else None
        if rating is None and not text:
            raise FeedbackError("feedback needs a rating (+1 or -1) or a text")
        with self._lock:
            turn = self.store.get_turn(turn_id)
            if turn is None:
                raise UnknownTurnError(f"unknown turn id {turn_id}")
            feedback_id = self.store.add_feedback(turn_id, rating, text, attached=False)
            if turn.turn_type != "main":
                return FeedbackResult(feedback_id, turn_id, False, "side turns are never trained on")
            state = {
                "role": "user",
                "content": feedback_text(rating, text),
                "rating": rating,
                "text": text,
                "feedback_id": feedback_id,
            }
            attached = self.store.attach_next_state(turn_id, state, "feedback", self.clock(), replace=True)
            if attached:
                self.store.set_feedback_attached(feedback_id, True)
                self.store.touch_session(turn.session_id, self.clock())
                return FeedbackResult(feedback_id, turn_id, True, "")
            return FeedbackResult(feedback_id, turn_id, False, "the turn was already judged into a sample")

    def set_private(self, session_key: str, private: bool = True) -> int:
        """The "don't learn from this conversation" switch for the open session of ``session_key``.

        Opens the session if needed (the switch may come before the first message); returns its row id.
        """
        with self._lock:
            session = self.store.find_open_session(session_key)
            sid = session.id if session else self.store.open_session(session_key, self.clock())
            self.store.set_private(sid, private)
            return sid

    def end_session(self, session_key: str, reason: str = "done") -> bool:
        """End the open session of ``session_key`` (e.g. "new conversation" in the UI); False if none."""
        with self._lock:
            session = self.store.find_open_session(session_key)
            if session is None:
                return False
            self.store.end_session(session.id, reason, self.clock())
            return True

    def reap(self, now: float | None = None) -> list[int]:
        """End sessions idle for longer than ``session_idle_timeout``; returns their row ids."""
        now = self.clock() if now is None else now
        with self._lock:
            idle = self.store.idle_sessions(now - self.config.session_idle_timeout)
            for sid in idle:
                self.store.end_session(sid, "idle", now)
        return idle
