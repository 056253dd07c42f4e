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

* session id: ``X-Session-Id`` header, else body ``session_id``, else OpenClaw's session-affinity headers
  (``x-session-affinity`` / ``session_id``, ``<id>:<n>``: the ``:<n>`` compaction counter is dropped), else the
  OpenAI ``user`` field. None of them: an *anonymous* request. It joins the open anonymous conversation one of
  whose turns it continues (:mod:`openclaw_trl.sessions.chaining`: the served reply and the user/tool message
  before it, normalised the way agents rebuild what they re-send), else starts one under a server-made key
  ``chain-<hex>`` (returned as the session id; a client may send it back as ``X-Session-Id``). Anonymous
  conversations are trained on unless ``SessionConfig.train_anonymous`` is off.
* turn type: ``X-Turn-Type`` header, else body ``turn_type``; without either, a request recognised by its content
  as an agent's side call (:mod:`openclaw_trl.sessions.side_calls`: a compaction summary, a memory flush, a
  heartbeat) is ``side``, any other ``main``. ``side`` turns are stored and never trained on, never take or give a
  next state, and never close the conversation's turn as diverged.
* ``X-Session-Done`` header or body ``session_done`` (``1/true/yes/on``): the session ends after this turn.
* ``X-Session-Private`` header or body ``session_private`` (or ``begin(private=True)``): flags the session
  private. A request can only switch the flag on (a server default of ``False`` must never undo the UI
  switch); switching it off is an explicit ``set_private(key, False)``.

The next state of a main turn *t* is what follows its reply in the next main request of the same conversation:
the user message, or the tool result(s) of the tool calls it made; messages holding only an agent's internal
context, and side-call exchanges the agent kept in its history, are skipped. Explicit feedback on a turn
(:meth:`TurnCollector.feedback`) is a next state too, and wins over a request one that was not judged yet,
or was judged into a sample not trained on yet (that sample is superseded, the turn judged again).

Rules that keep every turn accounted for:

* next-state attachment and scoring do not depend on any record/log switch: every main turn with a
  next state is ``ready`` for the scorer.
* sessions end on ``session_done`` *or* after ``session_idle_timeout`` s idle (:meth:`reap`), also when
  the response was empty; a turn without a next state is closed, never trained, and never leaks memory
  (the state lives in the store). Sessions are keyed by (id, generation): a reused id after the end
  starts a new generation and never overwrites earlier turns.
* a main request continues turn *t* when it holds *t*'s reply (its exchange key, or, for a client that re-sends
  the prompt unchanged, an assistant message right after an unchanged copy of *t*'s prompt). A main request
  that does not (an edit, a regeneration, a new first message) closes *t* as ``history_diverged``; a request in a
  named conversation that continues none of its turns, holds no reply of its own and comes with another system
  prompt than *t*'s is an unrecognised side call (a summary, a title): ``side``, and *t* waits on.
  Parallel tool results are all kept (joined); a turn takes a next state once.
* a turn without a usable verdict produces no sample (no "at least one sample per session" promotion, no
  masked placeholder samples) (see :mod:`openclaw_trl.judging.scorer`).
* nothing is dropped at batch boundaries (see :mod:`openclaw_trl.store`).
"""

from openclaw_trl.sessions.collector import TurnCollector
from openclaw_trl.sessions.requests import (
    MAX_CORRECTION_WINDOW_S,
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
from openclaw_trl.sessions.signals import (
    TurnSignals,
    correction_window_view,
    session_matches,
    session_name,
    utc_iso,
)

__all__ = [
    "MAX_CORRECTION_WINDOW_S",
    "FeedbackError",
    "FeedbackResult",
    "RequestContext",
    "SessionConfig",
    "SessionRequestError",
    "TurnCollector",
    "TurnSignals",
    "UnknownTurnError",
    "correction_window_view",
    "feedback_text",
    "history_hash",
    "next_state_after",
    "request_session_key",
    "session_matches",
    "session_name",
    "utc_iso",
]
