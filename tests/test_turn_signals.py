"""Per-turn signals (``openclaw_trl.sessions.signals``): 👍/👎 on any turn, corrections and edits, retry
(reject) and undo (withdraw), on a real SQLite store; superseded and withdrawn samples; restart; migration."""

from __future__ import annotations

import sqlite3

import pytest

from openclaw_trl.engines.base import Completion
from openclaw_trl.records import Judgement, TrainingSample
from openclaw_trl.sessions import FeedbackError, SessionConfig, TurnCollector, UnknownTurnError
from openclaw_trl.store import WITHDRAWN, Store


@pytest.fixture
def env(tmp_path):
    store = Store(tmp_path / "s.db")
    yield store, TurnCollector(store, SessionConfig(session_idle_timeout=600, correction_window_s=0))
    store.close()


def serve(collector, messages, reply, key="conv"):
    """One UI turn: the messages so far -> a stored turn; returns (turn id, the conversation with the reply)."""
    ctx = collector.begin(messages, headers={"X-Session-Id": key})
    done = Completion([7, 8], [-0.1, -0.2], "stop", 0)
    turn_id = collector.record_turn(ctx, [1, 2], done, 1.0, completion_text=reply)
    return turn_id, [*messages, {"role": "assistant", "content": reply}]


def conversation(collector, n=3):
    """``n`` exchanges of one session; returns the turn ids and the messages."""
    messages, ids = [], []
    for i in range(n):
        tid, messages = serve(
            collector, [*messages, {"role": "user", "content": f"question {i}"}], f"answer {i}"
        )
        ids.append(tid)
    return ids, messages


def judge(store, turn_id, reward=1.0):
    """What the scorer does with a ready turn: a verdict and a sample; returns the sample id."""
    turn = store.conversations.get_turn(turn_id)
    sample = TrainingSample(turn_id, [1, 2], [7, 8], [-0.1, -0.2], 1.0, 0, reward=reward)
    return store.judging.save_judgement(Judgement(turn, [], reward, sample=sample))


def test_feedback_on_an_earlier_turn_supersedes_its_untrained_sample(env):
    store, col = env
    (t1, t2, t3), _ = conversation(col)
    assert (
        store.conversations.get_turn(t1).next_state["content"] == "question 1"
    )  # the next message was its next state
    first = judge(store, t1, reward=1.0)
    res = col.feedback(t1, -1)  # 👎 on the first answer, after it was judged from the next message
    assert res.attached and res.reason == ""
    turn = store.conversations.get_turn(t1)
    assert (turn.status, turn.next_state_source, turn.judge_round) == ("ready", "feedback", 2)
    assert turn.next_state["rating"] == -1 and turn.next_state["kind"] == "rating"
    assert [s.dropped_reason for s in store.queries.iter_samples()] == [
        "superseded"
    ]  # kept, never handed out
    assert store.queue.count_waiting() == 0
    second = judge(store, t1, reward=-1.0)  # judged again: a new sample for the same turn
    assert second is not None and second != first
    assert [s.sample_id for s in store.queue.take_samples(5)] == [second]
    # the other turns are untouched
    assert store.conversations.get_turn(t2).next_state["content"] == "question 2"
    assert store.conversations.get_turn(t3).status == "awaiting"


def test_feedback_on_a_trained_or_batched_turn_is_recorded_only(env):
    store, col = env
    (t1, t2, _), _ = conversation(col)
    trained, batched = judge(store, t1), judge(store, t2)
    store.queue.mark_consumed([trained], step=4)
    assert [s.sample_id for s in store.queue.take_samples(1)] == [batched]  # in the batch being trained
    for turn_id, why in [(t1, "trained on (step 4)"), (t2, "training batch")]:
        res = col.correct(turn_id, "A better answer.")
        assert not res.attached and why in res.reason
        assert store.conversations.get_turn(turn_id).status == "judged"
    assert [s.dropped_reason for s in store.queries.iter_samples()] == [None, None]
    assert [(f.turn_id, f.attached) for f in store.queries.iter_feedback()] == [(t1, False), (t2, False)]


def test_a_turn_has_one_live_scorer_sample(env):
    store, col = env
    (t1, _, _), _ = conversation(col)
    judge(store, t1)
    with pytest.raises(sqlite3.IntegrityError):  # the store's own constraint, not only the code path
        with store.db.tx() as tx:
            tx.execute(
                "INSERT INTO samples (turn_id, origin, created, prompt_ids, completion_ids, sampling_logprobs,"
                " temperature, policy_version, reward, has_hint, meta) VALUES (?, 'scorer', 0, '[]', '[]', '[]',"
                " 1, 0, 0, 0, '{}')",
                (t1,),
            )


def test_correct_and_edit_carry_the_turns_latest_rating(env):
    store, col = env
    (t1, t2, t3), _ = conversation(col)
    assert col.feedback(t2, 1).attached  # 👍, then the answer is edited: the edit keeps the 👍
    res = col.correct(t2, "  answer 1, but shorter  ", kind="edit")
    assert res.attached
    state = store.conversations.get_turn(t2).next_state
    assert (state["rating"], state["text"], state["kind"]) == (1, "answer 1, but shorter", "edit")
    assert "good" in state["content"] and state["content"].endswith("answer 1, but shorter")
    col.correct(t1, "Say it in French.")  # no rating yet: a correction is a 👎
    assert store.conversations.get_turn(t1).next_state["rating"] == -1
    assert [f.kind for f in store.queries.iter_feedback()] == ["rating", "edit", "correction"]
    before = store.queries.counts()
    for call, exc in [
        (lambda: col.correct(t3, "   "), FeedbackError),
        (lambda: col.correct(t3, None), FeedbackError),
        (lambda: col.correct(t3, "x", kind="rating"), FeedbackError),
        (lambda: col.correct(10**6, "x"), UnknownTurnError),
        (lambda: col.feedback(t3, -1, kind="thumbs"), FeedbackError),
        (lambda: col.reject("1"), FeedbackError),
        (lambda: col.withdraw(10**6), UnknownTurnError),
    ]:
        with pytest.raises(exc):
            call()
    assert store.queries.counts() == before  # bad input writes nothing


def test_reject_is_a_negative_next_state_and_the_new_answer_a_new_turn(env):
    store, col = env
    (t1, t2), messages = conversation(col, n=2)
    assert col.reject(t2).attached
    state = store.conversations.get_turn(t2).next_state
    assert (state["rating"], state["text"], state["kind"]) == (-1, None, "reject")
    assert "rejected" in state["content"]
    new, _ = serve(col, messages[:-1], "another answer 1")  # the same prompt, sampled again
    turn = store.conversations.get_turn(new)
    assert (turn.status, turn.trainable) == ("awaiting", True)
    assert turn.history_hash == store.conversations.get_turn(t2).history_hash
    assert store.conversations.get_turn(t2).status == "ready"  # the rejection is kept, judged as usual


def test_withdraw_leaves_nothing_trainable_and_survives_restart(env, tmp_path):
    store, col = env
    (t1, t2), messages = conversation(col, n=2)
    assert col.feedback(t2, 1).attached  # rated, then undone: the rating goes with it
    done = col.withdraw(t2)
    assert (done.already, done.sample_dropped, done.trained_step) == (False, False, None)
    turn = store.conversations.get_turn(t2)
    assert (turn.status, turn.close_reason) == ("closed", WITHDRAWN)
    assert store.judging.ready_turns(10) == [
        store.conversations.get_turn(t1)
    ]  # the undone turn is never judged
    assert col.withdraw(t2).already
    res = col.feedback(t2, -1)
    assert not res.attached and "withdrawn" in res.reason
    # the user message of the undone exchange stays the next state of the turn before it
    assert store.conversations.get_turn(t1).next_state["content"] == "question 1"
    # the conversation goes on from the answer before the undone exchange
    t3, _ = serve(col, [*messages[:2], {"role": "user", "content": "something else"}], "answer 2")
    assert (
        store.conversations.get_turn(t3).status == "awaiting"
        and store.conversations.get_turn(t2).status == "closed"
    )
    store.close()
    with Store(tmp_path / "s.db") as reopened:
        assert reopened.conversations.get_turn(t2).close_reason == WITHDRAWN
        assert [t.id for t in reopened.judging.ready_turns(10)] == [t1]


def test_withdraw_drops_a_waiting_sample_and_keeps_a_trained_one(env):
    store, col = env
    (t1, t2, _), _ = conversation(col)
    waiting, trained = judge(store, t1), judge(store, t2)
    store.queue.mark_consumed([trained], step=2)
    assert col.withdraw(t1).sample_dropped
    assert col.withdraw(t2).trained_step == 2
    by_id = {s.sample_id: s for s in store.queries.iter_samples()}
    assert by_id[waiting].dropped_reason == WITHDRAWN and by_id[trained].consumed_step == 2
    assert store.queue.count_waiting() == 0


def test_an_older_store_gains_the_feedback_kind_and_the_live_sample_index(tmp_path):
    path = tmp_path / "old.db"
    Store(path).close()
    with sqlite3.connect(path) as conn:  # the store as an earlier release wrote it
        conn.execute("DROP INDEX samples_one_live_per_turn")
        conn.execute("CREATE UNIQUE INDEX samples_one_per_turn ON samples(turn_id) WHERE origin = 'scorer'")
        conn.execute("ALTER TABLE feedback DROP COLUMN kind")
        conn.execute("INSERT INTO sessions (key, generation, created, last_active) VALUES ('k', 0, 0, 0)")
        conn.execute(
            "INSERT INTO turns (session_id, idx, turn_type, created, prompt_messages, prompt_ids, completion_ids,"
            " sampling_logprobs, completion_text, temperature, policy_version, trainable, status)"
            " VALUES (1, 0, 'main', 0, '[]', '[]', '[]', '[]', '', 1, 0, 1, 'judged')"
        )
        conn.execute(
            "INSERT INTO feedback (turn_id, rating, text, created, attached) VALUES (1, 1, NULL, 0, 1)"
        )
    with Store(path) as store:
        assert [(f.rating, f.kind) for f in store.queries.iter_feedback()] == [(1, None)]
        indexes = {r[0] for r in store.db.conn().execute("SELECT name FROM sqlite_master WHERE type='index'")}
        assert "samples_one_live_per_turn" in indexes and "samples_one_per_turn" not in indexes
        store.conversations.add_feedback(1, -1, None, attached=False, kind="reject")
        assert [f.kind for f in store.queries.iter_feedback()] == [None, "reject"]
