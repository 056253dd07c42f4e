"""The SQLite store: durability, the trainer's queue semantics, resume, schema versioning, crash safety."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from openclaw_trl.records import Judgement, TrainingSample, Vote
from openclaw_trl.store import SCHEMA_VERSION, Store, StoreError
from tests.helpers import served_turn, wait_until


def _sample(turn_id: int = 0, reward: float = 1.0, **kw) -> TrainingSample:
    return TrainingSample(
        turn_id=turn_id,
        prompt_ids=[1, 2, 3],
        completion_ids=[4, 5],
        sampling_logprobs=[-0.5, -1.25],
        temperature=0.7,
        policy_version=3,
        reward=reward,
        **kw,
    )


def _turn(
    store: Store, session: int, turn_type: str = "main", text: str = "hi", trainable: bool = True
) -> int:
    turn = served_turn(
        session,
        text,
        turn_type=turn_type,
        tools=[{"type": "function", "function": {"name": "calc"}}],
        prompt_ids=[1, 2, 3],
        completion_ids=[4, 5],
        sampling_logprobs=[-0.5, -0.25],
        completion_text="hello",
        temperature=0.7,
        policy_version=2,
        trainable=trainable,
    )
    return store.conversations.add_turn(turn)


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "store.db") as s:
        yield s


def test_sample_round_trip_exact(store):
    s = _sample(
        turn_id=7,
        has_hint=True,
        hint="be brief",
        teacher_logprobs=[-0.1, -0.123456789012345],
        topk_ids=[[4, 9], [5, 1]],
        topk_logprobs=[[-0.5, -1.5], [-0.25, -2.0]],
        teacher_prompt_ids=[1, 2, 3, 4],
        finish_reason="length",
        meta={"why": "test"},
    )
    sid = store.queue.add_sample(s)
    assert s.sample_id == sid
    (back,) = store.queue.take_samples(5)
    assert back == s  # dataclass equality: every field, float values exact
    assert store.queue.take_samples(5) == []  # handed out, not handed twice


def test_queue_never_drops_surplus_and_serves_oldest_first(store):
    ids = [store.queue.add_sample(_sample(turn_id=i)) for i in range(5)]
    assert store.queue.count_waiting() == 5
    batch = store.queue.wait_for_samples(3, timeout=1)
    assert [s.sample_id for s in batch] == ids[:3]
    assert store.queue.count_waiting() == 2
    store.queue.mark_consumed([s.sample_id for s in batch], step=1)
    store.queue.mark_consumed([s.sample_id for s in batch], step=1)  # idempotent for the same step
    with pytest.raises(ValueError, match="other steps"):
        store.queue.mark_consumed([batch[0].sample_id], step=2)
    with pytest.raises(TimeoutError):
        store.queue.wait_for_samples(3, timeout=0.3, poll=0.05)
    assert store.queue.count_waiting() == 2  # a timeout hands nothing out
    more = store.queue.take_samples(10)
    assert [s.sample_id for s in more] == ids[3:]
    store.queue.release([more[1].sample_id])
    assert [s.sample_id for s in store.queue.take_samples(10)] == [ids[4]]
    pos = store.queue.resume_position()
    assert (pos.last_consumed_step, pos.consumed, pos.waiting) == (1, 3, 2)


def test_wait_for_samples_wakes_on_new_samples(store):
    store.queue.add_sample(_sample())

    got = []  # the waiter polls once an hour: only the new sample's wake-up can return it in time
    waiter = threading.Thread(
        target=lambda: got.extend(store.queue.wait_for_samples(2, timeout=3600, poll=3600))
    )
    waiter.start()
    store.queue.add_sample(_sample())
    waiter.join(timeout=60)
    assert not waiter.is_alive() and len(got) == 2


def test_reopen_serves_unconsumed_first_and_requeue_after(tmp_path):
    path = tmp_path / "s.db"
    with Store(path) as s:
        ids = [s.queue.add_sample(_sample(turn_id=i)) for i in range(4)]
        s.queue.mark_consumed([s.queue.take_samples(1)[0].sample_id], step=1)
        s.queue.mark_consumed([s.queue.take_samples(1)[0].sample_id], step=2)
        s.queue.take_samples(1)  # leased, never consumed: closing the store releases it
    with Store(path) as s:
        assert s.queue.resume_position().last_consumed_step == 2
        assert [x.sample_id for x in s.queue.take_samples(10)] == ids[2:]
        s.queue.release(ids[2:])
        # the checkpoint is at step 1: step 2's samples are trained again
        assert s.queue.requeue_after(1) == 1
        assert [x.sample_id for x in s.queue.take_samples(10)] == [ids[1], ids[2], ids[3]]


def test_newer_schema_is_refused(tmp_path):
    path = tmp_path / "s.db"
    Store(path).close()
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="upgrade openclaw-trl"):
        Store(path)


def test_session_generations_and_turn_life_cycle(store):
    a = store.conversations.open_session("alice")
    t1 = _turn(store, a)
    side = _turn(store, a, "side")
    assert store.conversations.get_turn(side).status == "closed"
    assert not store.conversations.attach_next_state(side, {"role": "user", "content": "x"}, "request")
    assert store.conversations.attach_next_state(t1, {"role": "user", "content": "thanks"}, "request")
    assert not store.conversations.attach_next_state(
        t1, {"role": "user", "content": "again"}, "request"
    )  # only once
    t2 = _turn(store, a)
    store.conversations.end_session(a, "done")
    assert store.conversations.get_turn(t2).status == "closed"
    b = store.conversations.open_session("alice")
    assert (
        store.conversations.get_session(b).generation == 1
        and store.conversations.find_open_session("alice").id == b
    )
    t3 = _turn(store, b)
    assert (
        store.conversations.get_turn(t3).idx == 0 and store.conversations.get_turn(t1).session_id == a
    )  # nothing overwritten
    ready = store.judging.ready_turns(10)
    assert [t.id for t in ready] == [t1]
    assert ready[0].next_state == {"role": "user", "content": "thanks"}
    assert ready[0].tools[0]["function"]["name"] == "calc"
    store.conversations.set_private(a)
    assert store.judging.ready_turns(10) == []  # private sessions are never judged
    assert [t.id for t in store.queries.iter_turns()] == [t3]
    assert len(list(store.queries.iter_turns(include_private=True))) == 4


def test_save_judgement_is_atomic_and_one_sample_per_turn(store):
    a = store.conversations.open_session("s")
    t = _turn(store, a)
    store.conversations.attach_next_state(t, {"role": "user", "content": "no, redo"}, "request")
    ready = store.conversations.get_turn(t)
    votes = [Vote("prm", "callable", "\\boxed{-1}", -1), Vote("prm", "callable", "garbage", None, error="x")]
    sid = store.judging.save_judgement(Judgement(ready, votes, -1, sample=_sample(turn_id=t, reward=-1.0)))
    assert sid is not None
    assert (
        store.judging.save_judgement(Judgement(ready, votes, -1, sample=_sample(turn_id=t))) is None
    )  # no duplicate
    turn = store.conversations.get_turn(t)
    assert (turn.status, turn.reward) == ("judged", -1.0)
    assert [(v.raw_text, v.value) for v in store.judging.votes_for(t)][:2] == [
        ("\\boxed{-1}", -1),
        ("garbage", None),
    ]
    # a failing sample insert rolls the whole judgement back
    t2 = _turn(store, a)
    store.conversations.attach_next_state(t2, {"role": "user", "content": "ok"}, "request")
    bad = _sample(turn_id=t2, teacher_logprobs=[0.0])  # wrong length
    with pytest.raises(ValueError):
        store.judging.save_judgement(Judgement(store.conversations.get_turn(t2), votes, 1, sample=bad))
    assert store.conversations.get_turn(t2).status == "ready" and store.judging.votes_for(t2) == []
    # a private session's queued samples are withheld, not deleted
    assert store.queue.count_waiting() == 1
    store.conversations.set_private(a)
    assert store.queue.count_waiting() == 0 and store.queue.take_samples(5) == []
    assert len(list(store.queries.iter_samples(include_private=True))) == 1


def test_concurrent_writers(store):
    errors = []

    def writer(k):
        try:
            sess = store.conversations.open_session(f"w{k}")
            for _ in range(20):
                _turn(store, sess)
            store.queue.add_sample(_sample(turn_id=k))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    got = store.queue.wait_for_samples(6, timeout=30)
    for t in threads:
        t.join()
    assert not errors
    assert store.queries.counts()["turns"] == 120 and len(got) == 6


def test_store_survives_sigkill(tmp_path):
    """SIGKILL a process writing turns and samples: every committed turn is found, no sample is duplicated."""
    path = tmp_path / "crash.db"
    writer = Path(__file__).with_name("_store_crash_writer.py")
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parents[1]))
    proc = subprocess.Popen(
        [sys.executable, str(writer), str(path)], stdout=subprocess.PIPE, text=True, env=env
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout))  # every line the child printed
    reader.start()
    wait_until(
        lambda: sum(x.startswith("sample") for x in lines) >= 20, what="20 committed samples", interval=0.01
    )
    time.sleep(0.3)  # then kill at an arbitrary point of the write loop
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    reader.join(10)
    committed_turns = [int(x.split()[1]) for x in lines if x.startswith("turn ")]
    committed_samples = [int(x.split()[1]) for x in lines if x.startswith("sample ") and "None" not in x]
    with Store(path) as s:
        turns = list(s.queries.iter_turns())
        samples = list(s.queries.iter_samples())
        found = {t.id for t in turns}
        print(
            f"\ncrash test: {len(committed_turns)} turns reported committed, {len(found)} turns found after "
            f"restart; {len(committed_samples)} samples reported, {len(samples)} found"
        )
        assert set(committed_turns) <= found and len(found) - len(committed_turns) <= 1  # at most 1 unprinted
        assert set(committed_samples) <= {x.sample_id for x in samples}
        per_turn = [x.turn_id for x in samples]
        assert len(per_turn) == len(set(per_turn))  # no duplicated sample
        # resume: a turn whose next state arrived but was not judged is judged again, exactly once
        for turn in s.judging.ready_turns(100):
            smp = _sample(turn_id=turn.id)
            assert s.judging.save_judgement(Judgement(turn, [], 1, sample=smp)) is not None
        assert s.judging.count_ready() == 0
        per_turn = [x.turn_id for x in s.queries.iter_samples()]
        assert len(per_turn) == len(set(per_turn))
        assert s.queue.count_waiting() == len(per_turn)


def test_recent_hints_newest_last_without_private(tmp_path):
    from openclaw_trl.records import Vote
    from openclaw_trl.store import Store

    store = Store(tmp_path / "s.db")
    for i, private in enumerate([False, True, False, False]):
        sid = store.conversations.open_session(f"k{i}", private=private)
        tid = store.conversations.add_turn(
            served_turn(
                sid, prompt_ids=[1], completion_ids=[2], sampling_logprobs=[-0.1], completion_text="a"
            )
        )
        store.conversations.attach_next_state(tid, {"role": "user", "content": "fix it"}, "request")
        votes = [Vote("hint", "callable", "r", 1, f"hint number {i}")]
        store.judging.save_judgement(
            Judgement(store.conversations.get_turn(tid), votes, 0, f"hint number {i}")
        )
    assert store.queries.recent_hints(2) == ["hint number 2", "hint number 3"]
    assert store.queries.recent_hints(10) == ["hint number 0", "hint number 2", "hint number 3"]


def test_records_are_built_from_any_mapping_row():
    """A row is any mapping: JSON columns decoded, 0/1 columns booleans, extra columns ignored."""
    from openclaw_trl.records import Session, Turn, pack_topk

    turn = Turn.from_row(
        {
            "id": 3,
            "session_id": 1,
            "idx": 0,
            "turn_type": "main",
            "created": 1.5,
            "prompt_messages": '[{"role": "user", "content": "hi"}]',
            "tools": None,
            "prompt_ids": "[1, 2]",
            "completion_ids": "[3]",
            "sampling_logprobs": "[-0.5]",
            "completion_text": "x",
            "temperature": 1.0,
            "policy_version": 0,
            "trainable": 1,
            "status": "ready",
            "next_state": '{"role": "user", "content": "thanks"}',
            "a_future_column": "ignored",
        }
    )
    assert turn.prompt_messages == [{"role": "user", "content": "hi"}] and turn.tools is None
    assert (turn.prompt_ids, turn.trainable, turn.next_state["content"]) == ([1, 2], True, "thanks")
    assert turn.private is None and turn.judge_round == 0  # not in the row: the field's default
    session = Session.from_row(
        {"id": 1, "key": None, "generation": 0, "created": 0, "last_active": 0, "private": 0}
    )
    assert session.private is False and session.ended is None
    shape, ids, lps = pack_topk([[5, 6]], [[-0.25, -1.5]])
    sample = TrainingSample.from_row(
        {
            "id": 9,
            "turn_id": 3,
            "prompt_ids": "[1]",
            "completion_ids": "[3]",
            "sampling_logprobs": "[-0.5]",
            "temperature": 1.0,
            "policy_version": 0,
            "has_hint": 1,
            "meta": "{}",
            "topk_shape": shape,
            "topk_ids": ids,
            "topk_logprobs": lps,
            "consumed_step": 4,
        }
    )
    assert (sample.sample_id, sample.has_hint, sample.consumed_step) == (9, True, 4)
    assert (sample.topk_ids, sample.topk_logprobs) == ([[5, 6]], [[-0.25, -1.5]])


def test_every_threads_connection_has_a_bounded_page_cache(tmp_path):
    from openclaw_trl.store import Store
    from openclaw_trl.store.db import PAGE_CACHE_KIB

    store = Store(tmp_path / "store.sqlite")
    seen = []

    def read():
        seen.append(store.db.conn().execute("PRAGMA cache_size").fetchone()[0])

    threads = [threading.Thread(target=read) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    read()
    assert seen == [-PAGE_CACHE_KIB] * 4  # KiB (a negative cache_size), on every thread's own connection
