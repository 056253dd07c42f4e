"""A queue that stays bounded however long the server runs: ``max_samples_waiting`` drops the oldest samples of
a queue the trainer cannot keep up with (kept, with the reason, counted, exported), the temperature rule looks
only at the samples queued since it last looked, and what every update or turn looks up (dropped samples by
reason, the latest hints) reads an index, not the whole store."""

from __future__ import annotations

import pytest

from openclaw_trl.config import OpenClawConfig
from openclaw_trl.export import collect_rows
from openclaw_trl.records import TrainingSample
from openclaw_trl.status import LearningStatus
from openclaw_trl.store import Store
from openclaw_trl.trainer.progress import ProgressCallback, TrainingProgress
from tests.trainer_helpers import make_trainer, sampled


def _sample(i: int, temperature: float = 1.0) -> TrainingSample:
    return TrainingSample(
        turn_id=1000 + i,
        prompt_ids=[1, 2, 3],
        completion_ids=[4, 5],
        sampling_logprobs=[-0.5, -1.25],
        temperature=temperature,
        policy_version=0,
        reward=1.0,
    )


def test_a_queue_longer_than_its_bound_drops_the_oldest_with_the_reason(tmp_path):
    with Store(tmp_path / "store.db") as store:
        ids = [store.queue.add_sample(_sample(i)) for i in range(10)]
        batch = store.queue.wait_for_samples(2, timeout=1, max_waiting=4)
        assert [s.sample_id for s in batch] == ids[
            6:8
        ]  # the newest 4 were kept; the batch takes their oldest
        reasons = {s.sample_id: s.dropped_reason for s in store.queries.iter_samples()}
        assert all(reasons[i].startswith("backlog: more than 4 samples were waiting") for i in ids[:6])
        assert [reasons[i] for i in ids[6:]] == [None] * 4
        assert store.queue.count_dropped_backlog() == 6 and store.queue.drops.counts["backlog"] == 6
        assert store.queue.count_waiting() == 2  # and the batch's 2, leased
        # a leased sample is never dropped, and a queue within its bound loses nothing
        assert store.queue.drop_backlog(1) == 1  # of the 2 free ones, the older goes
        assert all(s.consumed_step is None and s.dropped_reason is None for s in batch)
        assert store.queue.drop_backlog(1) == 0
    with Store(tmp_path / "store.db") as reopened:  # kept across restarts, with their reason
        assert reopened.queue.count_dropped_backlog() == 7
        exported = {r["sample_id"]: r["dropped_reason"] for r in collect_rows(reopened)["samples"]}
        assert exported[ids[0]].startswith("backlog:")


def test_the_trainer_keeps_its_queue_bounded_and_says_so(tiny_model_dir, tmp_path):
    store = Store(tmp_path / "store.sqlite")
    ids = [store.queue.add_sample(s) for s in sampled(tiny_model_dir, 10)]
    trainer = make_trainer(tiny_model_dir, tmp_path, store, max_steps=1, max_samples_waiting=4)
    progress = TrainingProgress()
    trainer.add_callback(ProgressCallback(progress))
    trainer.train()
    rows = {s.sample_id: s for s in store.queries.iter_samples()}
    assert [rows[i].consumed_step for i in ids[6:]] == [1] * 4  # trained on the newest
    assert all(rows[i].dropped_reason.startswith("backlog:") for i in ids[:6])
    logged = [entry for entry in trainer.state.log_history if "reward" in entry]
    assert logged[0]["samples/dropped_backlog"] == 6
    assert LearningStatus(trainer.args, None, store, progress)()["samples_dropped_backlog"] == 6
    store.close()


@pytest.mark.parametrize("value", [3, True, 4.5, "4096", None])
def test_max_samples_waiting_must_hold_a_batch(tmp_path, value):
    with pytest.raises(ValueError, match="max_samples_waiting must be an integer >= batch_size"):
        OpenClawConfig(output_dir=str(tmp_path), batch_size=4, max_samples_waiting=value, report_to="none")


def test_the_temperature_rule_sees_every_new_sample_and_a_released_one(tmp_path):
    """Each look starts after the last sample it checked; a sample at another temperature that another queue
    had leased is looked at again once released; a resume (``requeue_after``) looks at everything again."""
    with Store(tmp_path / "store.db") as store, Store(tmp_path / "store.db") as other:
        warm = store.queue.add_sample(_sample(0))
        cold = store.queue.add_sample(_sample(1, temperature=0.7))
        assert [s.sample_id for s in other.queue.take_samples(2)] == [warm, cold]  # another queue leases both
        assert store.queue.drop_other_temperature(1.0) == 0  # leased: never dropped
        later = store.queue.add_sample(_sample(2, temperature=0.5))
        assert store.queue.drop_other_temperature(1.0) == 1  # the new one
        other.queue.release([cold])
        assert store.queue.drop_other_temperature(1.0) == 1  # the released one, looked at again
        assert store.queue.drops.counts["temperature"] == 2
        # a sample consumed by a run at T = 0.7, then waiting again after a resume from an earlier step
        old = store.queue.add_sample(_sample(3, temperature=0.7))
        assert [s.sample_id for s in other.queue.take_samples(1)] == [old]
        other.queue.mark_consumed([old], step=5)
        store.queue.add_sample(_sample(4))
        assert store.queue.drop_other_temperature(1.0) == 0  # looked past `old`: consumed, not waiting
        store.queue.requeue_after(0)
        assert store.queue.drop_other_temperature(1.0) == 1  # looked at again
        reasons = {s.sample_id: s.dropped_reason for s in store.queries.iter_samples()}
        assert [reasons[i][: len("temperature: sampled at T=0.7")] for i in (cold, later, old)] == [
            "temperature: sampled at T=0.7",
            "temperature: sampled at T=0.5",
            "temperature: sampled at T=0.7",
        ]
        assert reasons[warm] is None


def _plans(store, call) -> list[str]:
    """The query plan of every SELECT ``call()`` runs on this thread's connection to the store."""
    conn, statements = store.db.conn(), []
    conn.set_trace_callback(statements.append)
    try:
        call()
    finally:
        conn.set_trace_callback(None)
    selects = [sql for sql in statements if sql.lstrip().upper().startswith("SELECT")]
    return [" ".join(str(row[-1]) for row in conn.execute("EXPLAIN QUERY PLAN " + sql)) for sql in selects]


def test_counting_dropped_samples_reads_the_index_not_the_store(tmp_path):
    """``samples_dropped`` holds only dropped samples, and every count by reason is a range over it."""
    with Store(tmp_path / "store.db") as store:
        store.queue.add_sample(_sample(0))
        for count in (
            store.queue.count_dropped_stale,
            store.queue.count_dropped_temperature,
            store.queue.count_dropped_backlog,
            store.queue.count_skipped_out_of_memory,
        ):
            (plan,) = _plans(store, count)
            assert "USING COVERING INDEX samples_dropped" in plan, plan
            assert count() == 0


def test_the_latest_hints_are_read_from_their_index(tmp_path):
    """The memory quick judge (every Best-of-N turn) and the version guard (every update) ask for the latest
    hints: a walk back along ``turns_hinted`` (turns with a hint only), never a sort of every turn."""
    with Store(tmp_path / "store.db") as store:
        (plan,) = _plans(store, lambda: store.queries.recent_hints(5))
        assert "USING INDEX turns_hinted" in plan and "TEMP B-TREE" not in plan, plan
        assert store.queries.recent_hints(5) == []


def test_the_queue_walks_the_waiting_samples_only(tmp_path):
    """Dropped samples pile up for as long as a server runs (a queue over its bound drops some at every
    update): taking a batch, counting the queue and the drop rules walk ``samples_waiting``, which holds only
    the samples neither consumed nor dropped."""
    with Store(tmp_path / "store.db") as store:
        store.queue.add_sample(_sample(0))
        for call in (
            store.queue.count_waiting,
            lambda: store.queue.take_samples(1),
            lambda: store.queue.drop_backlog(4),
            lambda: store.queue.drop_other_temperature(1.0),
            lambda: store.queue.drop_stale(policy_version=0, max_staleness=0),
        ):
            plans = " | ".join(_plans(store, call))
            assert "INDEX samples_waiting" in plans and "samples_queue" not in plans, plans
            assert "SCAN samples" not in plans and "SCAN s " not in plans.replace("SCAN s USING INDEX", ""), (
                plans
            )
