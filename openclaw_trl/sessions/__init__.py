"""Turn collection: which session a chat request belongs to, and which turn its messages are the next state of.

The server calls a :class:`TurnCollector` for every chat request, in this order::

    ctx = collector.begin(messages, tools=tools, headers=request.headers, body=body)   # before generating
    ...render ctx.messages, generate...
    turn_id = collector.record_turn(ctx, prompt_ids, completion, temperature,
                                    completion_text=None, response_message=message)   # before replying
    # if generation failed instead: collector.abort(ctx)

and, for the per-turn signals of the UI and ``POST /v1/feedback`` (:mod:`openclaw_trl.sessions.signals`),
``collector.feedback(turn_id, rating, text)`` (👍/👎), ``collector.correct(turn_id, text)`` (a correction or
an edited answer), ``collector.reject(turn_id)`` (retry) and ``collector.withdraw(turn_id)`` (undo), each with
``session=`` the session the caller speaks for (a turn of another session is unknown to it); it calls
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
(:meth:`TurnCollector.feedback`) is a next state too, and wins over a request one that was not judged yet,
or was judged into a sample not trained on yet (that sample is superseded, the turn judged again).

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

from openclaw_trl.sessions.collector import TurnCollector
from openclaw_trl.sessions.requests import (
    FeedbackError,
    FeedbackResult,
    RequestContext,
    SessionConfig,
    SessionRequestError,
    UnknownTurnError,
    feedback_text,
    history_hash,
    next_state_after,
    request_session_key,
)
from openclaw_trl.sessions.signals import TurnSignals, session_matches, session_name

__all__ = [
    "FeedbackError",
    "FeedbackResult",
    "RequestContext",
    "SessionConfig",
    "SessionRequestError",
    "TurnCollector",
    "TurnSignals",
    "UnknownTurnError",
    "feedback_text",
    "history_hash",
    "next_state_after",
    "request_session_key",
    "session_matches",
    "session_name",
]
