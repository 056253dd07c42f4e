"""``TurnCollector``: chat requests -> sessions and turns in the store, next states attached (the rules are in
the :mod:`openclaw_trl.sessions` package docstring)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence

from openclaw_trl.engines.base import Completion
from openclaw_trl.records import ServedTurn, Session, Turn
from openclaw_trl.sessions.chaining import request_exchanges, system_text, turn_keys
from openclaw_trl.sessions.requests import (
    RequestContext,
    SessionConfig,
    SessionRequestError,
    history_hash,
    lower_keys,
    next_state_after,
    request_flag,
    request_session_key,
)
from openclaw_trl.sessions.side_calls import side_call_kind
from openclaw_trl.sessions.signals import TurnSignals
from openclaw_trl.store import Store


class TurnCollector(TurnSignals):
    """Maps chat requests to sessions and turns in the :class:`~openclaw_trl.store.Store` (the package docstring);
    the per-turn signals (feedback, correct, reject, withdraw) are :class:`~openclaw_trl.sessions.signals.TurnSignals`.

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
        h, b = lower_keys(headers), dict(body or {})
        key = (
            str(session_key).strip() or None
            if session_key is not None
            else request_session_key(headers, body)
        )
        named_type = turn_type or h.get("x-turn-type") or b.get("turn_type")
        if named_type is not None:
            turn_type = str(named_type).strip().lower()
            if turn_type not in ("main", "side"):
                raise SessionRequestError(f"turn type must be 'main' or 'side', got {turn_type!r}")
        else:
            turn_type = "side" if side_call_kind(messages, tools) else "main"
        if session_done is None:
            session_done = request_flag(h.get("x-session-done", b.get("session_done")), "session_done")
        done = bool(session_done)
        if private is None:
            private = request_flag(h.get("x-session-private", b.get("session_private")), "session_private")
        messages = [dict(m) for m in messages]
        tools = [dict(t) for t in tools] if tools else None
        exchanges = request_exchanges(messages)
        now = self.clock()
        with self._lock:
            self.reap(now)
            session, prev, reply_index, continues = self._resolve_session(key, messages, exchanges, now)
            if private:  # a request can only switch it on; off is an explicit set_private(key, False)
                self.store.conversations.set_private(session.id, True)
            prompt_hash = history_hash(messages)
            if (
                turn_type == "main"
                and prev is not None
                and reply_index is None
                and not continues
                and not any(m.get("role") == "assistant" for m in messages)
                and system_text(messages) != system_text(prev.prompt_messages)
            ):
                # A request in a conversation that continues none of its turns, holds no reply of its own and
                # comes with another system prompt: an unrecognised side call (a summary or a title request with
                # its own instructions). It leaves the conversation as it is.
                turn_type = "side"
            ctx = RequestContext(
                session_id=session.id,
                session_key=session.key,
                session_generation=session.generation,
                turn_type=turn_type,
                session_done=done,
                trainable=turn_type == "main" and (not session.anonymous or self.config.train_anonymous),
                messages=messages,
                tools=tools,
                history_hash=prompt_hash,
            )
            if turn_type == "main":
                ctx.next_state_of = self._attach_request_next_state(prev, reply_index, messages, now)
                self.store.holds.end_correction_windows(
                    session.id, now
                )  # the person moved on: their 👎s stand
            self.store.conversations.touch_session(session.id, now)
        return ctx

    def _resolve_session(
        self, key: str | None, messages: list[dict], exchanges: list[tuple], now: float
    ) -> tuple[Session, Turn | None, int | None, bool]:
        """The session of a request, its last main turn, where in the request that turn's reply is (None: the
        request does not continue it) and whether the request continues any turn of the session.

        A named session (``key``) is that key's open session. Without a key, the request joins the open anonymous
        conversation one of whose turns it continues (:mod:`openclaw_trl.sessions.chaining`: by exchange keys,
        else by reply keys), else starts one under a server-made key (``chain-<hex>``, returned to the client
        as the session id).
        """
        session_id = None
        if key is not None:
            session = self.store.conversations.find_open_session(key)
            if session is None:
                return (
                    self.store.conversations.get_session(self.store.conversations.open_session(key, now)),
                    None,
                    None,
                    False,
                )
            session_id = session.id
        matches, position = self._continued_turns(exchanges, session_id)
        if key is None:
            if not matches:
                new_key = f"chain-{uuid.uuid4().hex[:16]}"
                session_id = self.store.conversations.open_session(new_key, now, anonymous=True)
                return self.store.conversations.get_session(session_id), None, None, False
            best = max(matches, key=lambda t: (position(t), t.id))
            session = self.store.conversations.get_session(best.session_id)
        prev = self.store.conversations.last_main_turn(session.id)
        return session, prev, self._reply_index(prev, messages, exchanges), bool(matches)

    def _continued_turns(self, exchanges: list[tuple], session_id: int | None):
        """The turns a request continues (of ``session_id``, or of open anonymous conversations), by exchange key,
        else by reply key; and a function giving each one's latest position in the request."""
        by_exchange = {k: i for i, k, _ in exchanges}
        matches = self.store.conversations.find_chained_turns(by_exchange, session_id)
        if matches:
            return matches, lambda t: by_exchange[t.exchange_key]
        by_reply = {r: i for i, _, r in exchanges if r}
        matches = self.store.conversations.find_chained_turns(by_reply, session_id, column="reply_key")
        return matches, lambda t: by_reply[t.reply_key]

    @staticmethod
    def _reply_index(prev: Turn | None, messages: list[dict], exchanges: list[tuple]) -> int | None:
        """Where ``prev``'s reply is in the request: the latest exchange with its exchange key, else with its reply
        key (the message before it was rewritten, e.g. by a compaction), else (a client that re-sends the prompt
        unchanged) right after an unchanged copy of its prompt; None when the request does not continue it."""
        if prev is None:
            return None
        for found in (
            [i for i, k, _ in exchanges if prev.exchange_key and k == prev.exchange_key],
            [i for i, _, r in exchanges if prev.reply_key and r == prev.reply_key],
        ):
            if found:
                return found[-1]
        k = len(prev.prompt_messages)
        if (
            len(messages) > k
            and messages[k].get("role") == "assistant"
            and history_hash(messages[:k]) == prev.history_hash
        ):
            return k
        return None

    def _attach_request_next_state(
        self, prev: Turn | None, reply_index: int | None, messages: list[dict], now: float
    ) -> int | None:
        """Give ``prev`` the next state that follows its reply in this main request; a main request that does not
        continue ``prev`` (an edit, a regeneration) closes it as ``history_diverged``."""
        if prev is None or prev.status != "awaiting":
            return None
        if reply_index is None:
            self.store.conversations.close_turn(prev.id, "history_diverged")
            return None
        state = next_state_after(messages, reply_index)
        if state is None:
            return None
        return prev.id if self.store.conversations.attach_next_state(prev.id, state, "request", now) else None

    def record_turn(
        self,
        ctx: RequestContext,
        prompt_ids: Sequence[int],
        completion: Completion,
        temperature: float,
        completion_text: str | None = None,
        response_message: dict | None = None,
        also: Callable[[int], object] | None = None,
    ) -> int:
        """Commit the served turn (call before replying); ends the session if the request said so.

        ``also(turn_id)``: the writes that belong to the turn (its Best-of-N group, its Responses id), made in
        the same store transaction: all of it is committed, or (when anything raises) none of it.

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
        exchange_key, reply_key = turn_keys(ctx.messages, response_message or {"content": completion_text})
        now = self.clock()
        with self._lock, self.store.atomic():
            turn_id = self.store.conversations.add_turn(
                ServedTurn(
                    session_id=ctx.session_id,
                    turn_type=ctx.turn_type,
                    prompt_messages=ctx.messages,
                    tools=ctx.tools,
                    prompt_ids=prompt_ids,
                    completion_ids=completion.token_ids,
                    sampling_logprobs=completion.logprobs,
                    completion_text=completion_text,
                    temperature=temperature,
                    policy_version=completion.policy_version,
                    finish_reason=completion.finish_reason,
                    trainable=ctx.trainable and len(completion.token_ids) > 0,
                    history_hash=ctx.history_hash,
                    response_message=response_message,
                    exchange_key=exchange_key,
                    reply_key=reply_key,
                ),
                now=now,
            )
            if ctx.session_done:
                self.store.conversations.end_session(ctx.session_id, "done", now)
            if also is not None:
                also(turn_id)
        return turn_id

    def abort(self, ctx: RequestContext) -> None:
        """The request failed before a turn was recorded: still honour its ``session_done``."""
        if ctx.session_done:
            with self._lock:
                self.store.conversations.end_session(ctx.session_id, "done", self.clock())

    # ------------------------------------------------------------------ session control
    def set_private(self, session_key: str, private: bool = True) -> int:
        """The "don't learn from this conversation" switch for the open session of ``session_key``.

        Opens the session if needed (the switch may come before the first message); returns its row id.
        """
        with self._lock:
            session = self.store.conversations.find_open_session(session_key)
            sid = session.id if session else self.store.conversations.open_session(session_key, self.clock())
            self.store.conversations.set_private(sid, private)
            return sid

    def end_session(self, session_key: str, reason: str = "done") -> bool:
        """End the open session of ``session_key`` (e.g. "new conversation" in the UI); False if none.
        Its open correction windows close (:mod:`openclaw_trl.sessions.signals`): its 👎s stand."""
        with self._lock:
            session = self.store.conversations.find_open_session(session_key)
            if session is None:
                return False
            now = self.clock()
            self.store.conversations.end_session(session.id, reason, now)
            self.store.holds.end_correction_windows(session.id, now)
            return True

    def reap(self, now: float | None = None) -> list[int]:
        """End sessions idle for longer than ``session_idle_timeout``; returns their row ids."""
        now = self.clock() if now is None else now
        with self._lock:
            idle = self.store.conversations.idle_sessions(now - self.config.session_idle_timeout)
            for sid in idle:
                self.store.conversations.end_session(sid, "idle", now)
        return idle
