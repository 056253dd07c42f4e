"""The batch lease lives in the store file: no second ``Store`` object, in this process or another, hands a
leased sample out again or drops it; a run that starts clears the leases of a dead trainer; a store file of
the previous schema opens, migrates in place and keeps every row."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from openclaw_trl.records import Judgement, TrainingSample
from openclaw_trl.store import SCHEMA_VERSION, Store
from tests.helpers import served_turn

FEEDBACK = {"role": "user", "content": "no: say it in French", "rating": -1}


def _judged_turns(store: Store, n: int, policy_version: int = 0) -> list[int]:
    """``n`` judged main turns of one session, each with its scorer sample (oldest first)."""
    session = store.conversations.open_session("lease")
    turns = []
    for i in range(n):
        turn = store.conversations.add_turn(
            served_turn(
                session,
                f"question {i}",
                prompt_ids=[1, 2, 3],
                completion_ids=[4, 5],
                sampling_logprobs=[-0.5, -0.25],
                completion_text="answer",
                policy_version=policy_version,
            )
        )
        store.conversations.attach_next_state(turn, {"role": "user", "content": "ok"}, "request")
        sample = TrainingSample(turn, [1, 2, 3], [4, 5], [-0.5, -0.25], 1.0, policy_version, reward=1.0)
        assert store.judging.save_judgement(
            Judgement(store.conversations.get_turn(turn), [], 1, sample=sample)
        )
        turns.append(turn)
    return turns


def _state(store: Store, sample_ids: list[int]) -> list[tuple]:
    return [(s.consumed_step, s.dropped_reason) for s in store.queue.get_samples(sample_ids)]


def test_a_second_store_object_cannot_break_the_batch_lease(tmp_path):
    path = tmp_path / "store.db"
    with Store(path) as a, Store(path) as b:
        turns = _judged_turns(a, 5)
        batch = a.queue.take_samples(2)
        leased = [s.sample_id for s in batch]
        assert [s.turn_id for s in batch] == turns[:2]
        # B neither supersedes nor withdraws a leased sample
        refusal = b.conversations.attach_feedback(turns[0], FEEDBACK)
        assert refusal == "the turn's sample is in the training batch being computed"
        withdrawal = b.conversations.withdraw_turn(turns[1])
        assert (withdrawal.sample_dropped, withdrawal.trained_step) == (False, None)
        # ... nor drops it as stale, nor releases it, nor hands it out again: B gets the other samples
        assert b.queue.drop_stale(policy_version=10, max_staleness=100) == 0
        b.queue.release(leased)
        assert b.queue.count_waiting() == 3
        other = b.queue.take_samples(10)
        assert [s.turn_id for s in other] == turns[2:]
        assert not set(leased) & {s.sample_id for s in other}
        # B's own waiting samples are superseded and withdrawn as usual
        b.queue.release([other[0].sample_id])
        assert b.conversations.attach_feedback(turns[2], FEEDBACK) is None
        # A's batch is intact, and A trains it
        assert _state(b, leased) == [(None, None), (None, None)]
        a.queue.mark_consumed(leased, step=1)
        assert _state(b, leased) == [(1, None), (1, None)]
        assert b.queue.resume_position().last_consumed_step == 1


def test_a_wait_for_a_batch_takes_only_unleased_samples(tmp_path):
    path = tmp_path / "store.db"
    with Store(path) as a, Store(path) as b:
        _judged_turns(a, 3)
        first = a.queue.wait_for_samples(2, timeout=5, poll=0.01)
        with pytest.raises(TimeoutError):
            b.queue.wait_for_samples(2, timeout=0.1, poll=0.01)
        (last,) = b.queue.wait_for_samples(1, timeout=5, poll=0.01)
        assert last.sample_id not in {s.sample_id for s in first}


def test_closing_releases_and_a_starting_run_clears_every_lease(tmp_path):
    path = tmp_path / "store.db"
    with Store(path) as a:
        _judged_turns(a, 3)
        taken = [s.sample_id for s in a.queue.take_samples(2)]
    with Store(path) as b:  # A closed: its batch went back to the head of the queue
        assert [s.sample_id for s in b.queue.take_samples(2)] == taken
        with Store(path) as c:
            assert c.queue.count_waiting() == 1
            assert c.queue.requeue_after(0) == 0  # a run starts: the queue is its own
            assert c.queue.count_waiting() == 3


_HOLDER = textwrap.dedent(
    """
    import sys
    from openclaw_trl.store import Store

    store = Store(sys.argv[1])
    print(" ".join(str(s.sample_id) for s in store.queue.take_samples(2)), flush=True)
    sys.stdin.readline()  # hold the lease until killed
    """
)


def test_the_lease_holds_across_processes_until_a_new_run_clears_a_dead_holder(tmp_path):
    path = tmp_path / "store.db"
    with Store(path) as store:
        turns = _judged_turns(store, 4)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        leased = [int(x) for x in holder.stdout.readline().split()]
        assert len(leased) == 2
        with Store(path) as other:
            assert other.conversations.withdraw_turn(turns[0]).sample_dropped is False
            assert [s.turn_id for s in other.queue.take_samples(10)] == turns[2:]
    finally:
        holder.kill()
        holder.wait()
    with Store(path) as restarted:  # the holder died mid-batch: a new run clears its lease
        assert [s.turn_id for s in restarted.queue.take_samples(10)] == turns[2:]  # "other" closed: released
        restarted.queue.requeue_after(0)  # a run starts: every lease is cleared, the dead holder's included
        assert [s.turn_id for s in restarted.queue.take_samples(10)] == turns
        assert _state(restarted, leased) == [(None, None), (None, None)]


def _rows(path: Path) -> dict[str, list[tuple]]:
    conn = sqlite3.connect(path)
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        out = {}
        for table in tables:
            columns = [r[1] for r in conn.execute(f"PRAGMA table_info({table})") if r[1] != "lease"]
            out[table] = conn.execute(f"SELECT {', '.join(columns)} FROM {table} ORDER BY rowid").fetchall()
        return out
    finally:
        conn.close()


def test_a_store_of_the_previous_schema_migrates_and_keeps_every_row(tmp_path):
    path = tmp_path / "store.db"
    with Store(path) as store:
        turns = _judged_turns(store, 3)
        store.conversations.add_feedback(turns[0], -1, "no", attached=False, kind="rating")
        store.responses.add_response("resp_1", turns[0], {"id": "resp_1"})
        store.lineage.record_published(1, 0, 1, "update")
        store.queue.mark_consumed([store.queue.take_samples(1)[0].sample_id], step=1)
    conn = sqlite3.connect(path)  # back to schema 1: no lease column
    conn.executescript(
        "DROP INDEX samples_lease; ALTER TABLE samples DROP COLUMN lease; PRAGMA user_version = 1;"
    )
    conn.close()
    before = _rows(path)
    assert "lease" not in {r[1] for r in sqlite3.connect(path).execute("PRAGMA table_info(samples)")}

    with Store(path) as store:
        assert store.db.conn().execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 2
        assert store.queries.counts()["samples"] == 3
        assert [s.turn_id for s in store.queue.take_samples(10)] == turns[1:]
    assert _rows(path) == before


def test_a_samples_table_written_by_the_first_schema_opens(tmp_path):
    path = tmp_path / "store.db"
    conn = sqlite3.connect(path)
    conn.executescript(
        """
        CREATE TABLE samples (
            id INTEGER PRIMARY KEY, turn_id INTEGER NOT NULL, origin TEXT NOT NULL, created REAL NOT NULL,
            prompt_ids TEXT NOT NULL, completion_ids TEXT NOT NULL, sampling_logprobs TEXT NOT NULL,
            temperature REAL NOT NULL, policy_version INTEGER NOT NULL, reward REAL NOT NULL,
            has_hint INTEGER NOT NULL, hint TEXT, teacher_logprobs TEXT, topk_shape TEXT, topk_ids BLOB,
            topk_logprobs BLOB, meta TEXT NOT NULL, consumed_step INTEGER, consumed_at REAL
        );
        INSERT INTO samples (turn_id, origin, created, prompt_ids, completion_ids, sampling_logprobs,
            temperature, policy_version, reward, has_hint, meta)
            VALUES (7, 'direct', 1.0, '[1, 2]', '[3]', '[-0.5]', 1.0, 0, 1.0, 0, '{"finish_reason": "stop"}');
        PRAGMA user_version = 1;
        """
    )
    conn.close()
    with Store(path) as store:
        (sample,) = store.queue.take_samples(5)
        assert (sample.turn_id, sample.completion_ids, sample.finish_reason, sample.weight) == (
            7,
            [3],
            "stop",
            1.0,
        )
        assert sample.baseline == 0.0 and sample.dropped_reason is None
