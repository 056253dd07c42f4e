"""Session logic: ids, turn types, next-state attachment, session ends, feedback, anonymous and private."""

from __future__ import annotations

import pytest

from openclaw_trl.engines.base import Completion
from openclaw_trl.records import Judgement, TrainingSample
from openclaw_trl.sessions import (
    FeedbackError,
    SessionConfig,
    SessionRequestError,
    TurnCollector,
    UnknownTurnError,
)
from openclaw_trl.store import Store


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


@pytest.fixture
def env(tmp_path):
    store = Store(tmp_path / "s.db")
    clock = Clock()
    yield store, TurnCollector(store, SessionConfig(session_idle_timeout=60), clock=clock), clock
    store.close()


def serve(collector, messages, reply="ok", headers=None, body=None, tools=None, completion=(7, 8)):
    """What the server does for one request; returns (ctx, turn_id, assistant message to echo back)."""
    ctx = collector.begin(messages, tools=tools, headers=headers, body=body)
    done = Completion(list(completion), [-0.1] * len(completion), "stop", 0)
    turn_id = collector.record_turn(
        ctx, [1, 2], done, 1.0, completion_text=reply, response_message={"content": reply}
    )
    return ctx, turn_id, {"role": "assistant", "content": reply}


def test_session_id_sources_and_turn_type(env):
    store, col, _ = env
    ctx = col.begin(
        [{"role": "user", "content": "a"}], headers={"X-SESSION-ID": "h"}, body={"session_id": "b"}
    )
    assert (ctx.session_key, ctx.turn_type, ctx.trainable) == ("h", "main", True)
    assert (
        col.begin([{"role": "user", "content": "a"}], body={"session_id": "b", "user": "u"}).session_key
        == "b"
    )
    assert col.begin([{"role": "user", "content": "a"}], body={"user": "u"}).session_key == "u"
    over = col.begin(
        [{"role": "user", "content": "x"}], headers={"X-Session-Id": "a"}, session_key="b", turn_type="side"
    )
    assert (over.session_key, over.turn_type) == ("b", "side")
    side = col.begin([{"role": "user", "content": "a"}], headers={"x-turn-type": "Side"}, body={"user": "u"})
    assert side.turn_type == "side" and not side.trainable
    with pytest.raises(SessionRequestError, match="turn type"):
        col.begin([{"role": "user", "content": "a"}], headers={"X-Turn-Type": "other"})
    with pytest.raises(SessionRequestError, match="session_done"):
        col.begin([{"role": "user", "content": "a"}], body={"session_done": "maybe"})
    with pytest.raises(SessionRequestError, match="non-empty"):
        col.begin([])


def test_next_states_user_tool_and_session_done(env):
    store, col, _ = env
    h = {"X-Session-Id": "s1"}
    m1 = [{"role": "system", "content": "be nice"}, {"role": "user", "content": "weather?"}]
    _, t1, a1 = serve(col, m1, headers=h)
    call = {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "1", "type": "function", "function": {"name": "w", "arguments": "{}"}},
            {"id": "2", "type": "function", "function": {"name": "t", "arguments": "{}"}},
        ],
    }
    m2 = [*m1, a1, {"role": "user", "content": "in Paris"}]
    ctx2, t2, _ = serve(col, m2, headers=h)
    assert ctx2.next_state_of == t1
    assert store.conversations.get_turn(t1).next_state["content"] == "in Paris"
    # the tool-call turn: its next state is both tool results (parallel calls), role tool
    m3 = [*m2, call, {"role": "tool", "content": "rain"}, {"role": "tool", "content": "12C"}]
    ctx3, t3, a3 = serve(col, m3, headers=h, body={"session_done": True})
    ns = store.conversations.get_turn(t2).next_state
    assert (ns["role"], ns["content"], len(ns["messages"])) == ("tool", "rain\n\n12C", 2)
    assert store.conversations.get_turn(t2).status == "ready"
    t3row = store.conversations.get_turn(t3)
    assert (t3row.status, t3row.close_reason) == (
        "closed",
        "session_ended",
    )  # no next state: never trained
    # the id is reused after the end: a new generation, earlier turns untouched
    ctx4, t4, _ = serve(col, [*m3, a3, {"role": "user", "content": "thanks"}], headers=h)
    assert ctx4.session_generation == 1 and ctx4.next_state_of is None
    assert store.conversations.get_turn(t4).idx == 0 and store.conversations.get_turn(t3).status == "closed"
    assert [t.id for t in store.judging.ready_turns(10)] == [t1, t2]


def test_side_turns_neither_take_nor_give_next_states(env):
    store, col, _ = env
    h = {"X-Session-Id": "s"}
    m1 = [{"role": "user", "content": "hi"}]
    _, t1, a1 = serve(col, m1, headers=h)
    _, side, _ = serve(
        col, [*m1, a1, {"role": "user", "content": "summarise memory"}], headers={**h, "X-Turn-Type": "side"}
    )
    assert store.conversations.get_turn(t1).status == "awaiting"
    assert store.conversations.get_turn(side).status == "closed"
    assert col.feedback(side, -1).attached is False
    serve(col, [*m1, a1, {"role": "user", "content": "next"}], headers=h)
    assert store.conversations.get_turn(t1).next_state["content"] == "next"


def test_idle_timeout_ends_session_and_feedback_still_attaches(env):
    store, col, clock = env
    h = {"X-Session-Id": "idle"}
    m1 = [{"role": "user", "content": "hi"}]
    ctx1, t1, a1 = serve(col, m1, headers=h)
    clock.t += 61
    assert col.reap() == [ctx1.session_id]
    assert store.conversations.get_turn(t1).close_reason == "session_ended"
    ctx2, _, _ = serve(col, [*m1, a1, {"role": "user", "content": "late"}], headers=h)
    assert ctx2.session_generation == 1 and store.conversations.get_turn(t1).next_state is None
    res = col.feedback(t1, +1, "Short answers are what I want.")
    assert res.attached
    turn = store.conversations.get_turn(t1)
    assert (turn.status, turn.next_state_source, turn.next_state["rating"]) == (
        "ready",
        "feedback",
        1,
    )


def test_history_divergence_and_trailing_system_message(env):
    store, col, _ = env
    h = {"X-Session-Id": "d"}
    m1 = [{"role": "user", "content": "hi"}]
    _, t1, a1 = serve(col, m1, headers=h)
    _, t2, _ = serve(col, m1, headers=h)  # regenerate: the same prompt again, not a continuation
    assert store.conversations.get_turn(t1).close_reason == "history_diverged"
    m3 = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "ok"},
        {"role": "system", "content": "r"},
    ]
    ctx3 = col.begin(m3, headers=h)
    assert (
        ctx3.next_state_of is None and store.conversations.get_turn(t2).status == "awaiting"
    )  # system is no next state


def test_anonymous_requests_chain_by_history_and_train_only_when_allowed(tmp_path):
    for train_anonymous in (False, True):
        with Store(tmp_path / f"a{train_anonymous}.db") as store:
            col = TurnCollector(store, SessionConfig(train_anonymous=train_anonymous))
            a = [{"role": "user", "content": "question A"}]
            b = [{"role": "user", "content": "question B"}]
            ca, ta, ra = serve(col, a, reply="ans A")
            cb, tb, rb = serve(col, b, reply="ans B")
            assert ca.session_id != cb.session_id and ca.session_key.startswith("chain-")
            assert store.conversations.get_session(ca.session_id).anonymous
            cb2, _, _ = serve(col, [*b, rb, {"role": "user", "content": "more B"}])
            assert cb2.session_id == cb.session_id and cb2.next_state_of == tb
            assert store.conversations.get_turn(ta).status == "awaiting"
            expected = "ready" if train_anonymous else "closed"
            assert store.conversations.get_turn(tb).status == expected
            assert len(store.judging.ready_turns(10)) == int(train_anonymous)


def test_private_sessions_are_stored_not_trained_not_exported(env):
    store, col, _ = env
    h = {"X-Session-Id": "p"}
    m1 = [{"role": "user", "content": "secret"}]
    _, t1, a1 = serve(col, m1, headers=h, body={"session_private": True})
    serve(col, [*m1, a1, {"role": "user", "content": "more"}], headers=h, body={"session_private": False})
    assert (
        store.conversations.get_turn(t1).status == "ready" and store.judging.ready_turns(10) == []
    )  # a request can't clear it
    assert (
        list(store.queries.iter_turns()) == []
        and len(list(store.queries.iter_turns(include_private=True))) == 2
    )
    col.set_private("p", False)
    assert [t.id for t in store.judging.ready_turns(10)] == [t1]


def test_feedback_validation_and_precedence(env):
    store, col, _ = env
    h = {"X-Session-Id": "f"}
    m1 = [{"role": "user", "content": "hi"}]
    _, t1, a1 = serve(col, m1, headers=h)
    serve(col, [*m1, a1, {"role": "user", "content": "thanks"}], headers=h)
    before = store.queries.counts()
    for bad, exc in [
        ((9999, 1), UnknownTurnError),
        ((t1, 2), FeedbackError),
        ((t1, 0), FeedbackError),
        ((t1, True), FeedbackError),
        ((t1, "1"), FeedbackError),
        ((str(t1), 1), FeedbackError),
        ((t1, None), FeedbackError),
    ]:
        with pytest.raises(exc):
            col.feedback(*bad)
    with pytest.raises(FeedbackError):
        col.feedback(t1, 1, text=123)
    assert store.queries.counts() == before  # bad input writes nothing and loses nothing
    assert store.conversations.get_turn(t1).next_state["content"] == "thanks"
    # explicit feedback replaces a request next state that was not judged yet
    assert col.feedback(t1, -1, "Use French please.").attached
    turn = store.conversations.get_turn(t1)
    assert turn.next_state_source == "feedback" and turn.judge_round == 2
    assert "bad" in turn.next_state["content"] and "French" in turn.next_state["content"]
    # once the turn's sample is trained on, more feedback is stored but the turn is not judged twice
    sample = TrainingSample(t1, [1, 2], [7, 8], [-0.1, -0.1], 1.0, 0, reward=-1.0)
    sample_id = store.judging.save_judgement(Judgement(turn, [], -1, sample=sample))
    store.queue.mark_consumed([sample_id], step=1)
    res = col.feedback(t1, 1)
    assert not res.attached and "trained on (step 1)" in res.reason
    assert [(f.rating, f.kind) for f in store.queries.iter_feedback()] == [(-1, "correction"), (1, "rating")]
    assert store.conversations.get_turn(t1).status == "judged"


def test_empty_completion_is_stored_not_trained_and_done_still_ends(env):
    store, col, _ = env
    ctx, t1, _ = serve(col, [{"role": "user", "content": "x"}], headers={"X-Session-Id": "e"}, completion=())
    assert not store.conversations.get_turn(t1).trainable
    ctx = col.begin([{"role": "user", "content": "y"}], headers={"X-Session-Id": "e", "X-Session-Done": "1"})
    col.abort(ctx)  # generation failed: the session still ends
    assert store.conversations.find_open_session("e") is None
