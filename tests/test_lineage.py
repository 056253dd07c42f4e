"""Policy versions are identities: staleness along the lineage after a rollback and after a crash that lost
published versions; the LR schedule follows the global step; a rollback is all or nothing across processes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch

from openclaw_trl.records import TrainingSample
from openclaw_trl.store import Lineage, Store
from tests.trainer_helpers import make_trainer, sampled


def _sample(version: int, turn_id: int) -> TrainingSample:
    return TrainingSample(
        turn_id=turn_id,
        prompt_ids=[1, 2, 3],
        completion_ids=[4, 5],
        sampling_logprobs=[-0.5, -1.25],
        temperature=1.0,
        policy_version=version,
        reward=1.0,
    )


def _publish_updates(store: Store, versions: range) -> None:
    for v in versions:
        store.lineage.record_published(v, None if v == 0 else v - 1, 0 if v == 0 else 1, "update")


def test_after_a_rollback_the_restored_versions_samples_are_fresh_and_the_undone_ones_stale(tmp_path):
    with Store(tmp_path / "store.db") as store:
        _publish_updates(store, range(11))  # v0 .. v10, one update each
        store.lineage.record_published(11, 5, 0, "rollback")  # rollback 10 -> 5, served as v11
        ids = {v: store.queue.add_sample(_sample(v, 100 + v)) for v in (4, 5, 9, 10, 11)}
        lineage = store.lineage.lineage()
        assert [lineage.staleness(v, 11) for v in (4, 5, 9, 10, 11)] == [1, 0, 4, 5, 0]
        assert lineage.undone(10, 5) == [6, 7, 8, 9, 10]

        assert store.queue.drop_stale(policy_version=11, max_staleness=1) == 2
        reasons = {s.sample_id: s.dropped_reason for s in store.queries.iter_samples()}
        assert reasons[ids[9]] == "stale: sampled by v9, 4 updates from policy v11, max_staleness 1"
        assert reasons[ids[10]].startswith("stale: sampled by v10, 5 updates")
        assert [reasons[ids[v]] for v in (4, 5, 11)] == [None, None, None]

        store.lineage.record_published(12, 11, 1, "update")  # one update after the rollback
        assert store.lineage.lineage().staleness(5, 12) == 1 and store.lineage.lineage().staleness(9, 12) == 5


def test_versions_unknown_to_the_lineage_follow_the_previous_number_and_roots_meet_at_the_base():
    lineage = Lineage({7: (None, 0), 8: (7, 1)})  # a new root (initial adapter) published as v7
    assert lineage.staleness(3, 5) == 2  # not recorded: v5 follows v4 follows v3
    assert lineage.staleness(2, 8) == 3  # v2 is 2 updates from the initial adapter, v8 is 1
    assert lineage.staleness(8, 8) == 0 and lineage.depth(8) == 1


def _lr_at(trainer, step: int) -> float:
    """The learning rate the schedule gives at ``step`` (``constant_with_warmup``)."""
    return trainer.args.learning_rate * min(1.0, step / trainer.args.warmup_steps)


def test_rollback_restores_the_lineage_the_lr_schedule_and_is_all_or_nothing(
    tiny_model_dir, tmp_path, monkeypatch
):
    from openclaw_trl.trainer import versions

    store = Store(tmp_path / "store.sqlite")
    for s in sampled(tiny_model_dir, 8, policy_version=0):
        store.queue.add_sample(s)
    trainer = make_trainer(
        tiny_model_dir,
        tmp_path,
        store,
        max_steps=2,
        adapter_history=3,
        save_strategy="steps",
        save_steps=1,
        save_total_limit=3,
        lr_scheduler_type="constant_with_warmup",
        warmup_steps=10,
    )
    trainer.train()
    assert trainer.state.global_step == 2
    v1 = store.queue.add_sample(_sample(1, 501))
    v2 = store.queue.add_sample(_sample(2, 502))

    result = trainer.rollback_to(1)

    assert (result.policy_version, result.restored_from, result.samples_rolled_back) == (3, 1, 4)
    assert trainer.state.global_step == 3
    # the schedule is at the global step, not restarted at version 1's step
    assert trainer.lr_scheduler.last_epoch == 3
    assert trainer.optimizer.param_groups[0]["lr"] == pytest.approx(_lr_at(trainer, 3))
    row = store.lineage.published_version(3)
    assert (row.parent, row.updates, row.note) == (1, 0, "rollback")
    assert store.queue.drop_stale(policy_version=3, max_staleness=0) == 1  # v2's sample: 1 update away
    reasons = {s.sample_id: s.dropped_reason for s in store.queries.iter_samples()}
    assert reasons[v1] is None and reasons[v2].startswith("stale: sampled by v2, 1 updates from policy v3")

    # Another process fails to load the checkpoint: every process goes back to the current version.
    before = {k: v.clone() for k, v in trainer.model.state_dict().items() if "lora" in k}
    monkeypatch.setattr(versions, "everywhere", lambda accelerator, ok: False)
    with pytest.raises(RuntimeError, match="failed on another process: every process is back on version 3"):
        trainer.rollback_to(2)
    assert trainer.state.global_step == 3 and store.lineage.published_version(4) is None
    after = {k: v for k, v in trainer.model.state_dict().items() if "lora" in k}
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert trainer.lr_scheduler.last_epoch == 3
    store.close()


_KILLED_RUN = """
import os, signal, sys
from pathlib import Path
sys.path.insert(0, {root!r})
from transformers import TrainerCallback
from openclaw_trl.store import Store
from tests.trainer_helpers import sampled, make_trainer

class KillAfterPublish(TrainerCallback):
    # runs after the publish of on_step_end, before the Trainer saves the step's checkpoint
    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == 3:
            os.kill(os.getpid(), signal.SIGKILL)

store = Store({store!r})
for s in sampled({model!r}, 12, policy_version=0):
    store.queue.add_sample(s)
trainer = make_trainer({model!r}, Path({tmp!r}), store, max_steps=4, adapter_history=2, save_strategy="steps",
                   save_steps=1, save_total_limit=2)
trainer.add_callback(KillAfterPublish())
trainer.train()
"""


@pytest.mark.slow
def test_versions_published_then_lost_in_a_sigkill_are_recognised_on_resume(tiny_model_dir, tmp_path):
    from openclaw_trl.resume import latest_checkpoint

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    script = _KILLED_RUN.format(
        root=root, store=str(tmp_path / "store.sqlite"), model=str(tiny_model_dir), tmp=str(tmp_path)
    )
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, timeout=600)
    assert proc.returncode == -9, proc.stderr.decode()[-3000:]
    run = tmp_path / "run"
    assert latest_checkpoint(run) == str(run / "checkpoint-2")  # v3 was published, never checkpointed

    store = Store(tmp_path / "store.sqlite")
    assert store.lineage.last_published_version() == 3
    lost = store.queue.add_sample(_sample(3, 703))  # a turn the lost v3 served
    kept = [store.queue.add_sample(s) for s in sampled(tiny_model_dir, 4, seed=2, policy_version=2)]
    trainer = make_trainer(
        tiny_model_dir,
        tmp_path,
        store,
        max_steps=5,
        adapter_history=2,
        save_strategy="steps",
        save_steps=1,
        save_total_limit=2,
        max_staleness=0,
    )
    trainer.train(resume_from_checkpoint=True)

    row = store.lineage.published_version(4)  # checkpoint-2's weights, under a new number
    assert (row.parent, row.updates, row.note) == (2, 0, "resume")
    assert store.lineage.published_version(3).parent == 2  # the lost version keeps its number and lineage
    assert trainer.state.global_step == 5 and store.lineage.published_version(5).parent == 4
    samples = {s.sample_id: s for s in store.queries.iter_samples()}
    assert samples[lost].dropped_reason == "stale: sampled by v3, 1 updates from policy v4, max_staleness 0"
    assert samples[lost].consumed_step is None
    assert [(samples[i].dropped_reason, samples[i].consumed_step) for i in kept] == [(None, 5)] * 4
    # the updates lost with v3 are not in the resumed weights: their samples were queued again, and are
    # now 2 updates (v0 -> v2) from the policy
    assert (
        sum(1 for s in samples.values() if (s.dropped_reason or "").startswith("stale: sampled by v0")) == 4
    )
    store.close()


def test_existing_store_gains_the_lineage_table_and_the_weight_columns(tmp_path):
    import sqlite3

    path = tmp_path / "old.sqlite"
    with Store(path) as store:
        store.queue.add_sample(_sample(3, 1))
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE policy_lineage")
    conn.execute("ALTER TABLE samples DROP COLUMN weight")
    conn.execute("ALTER TABLE candidate_groups DROP COLUMN served_prob")
    conn.commit()
    conn.close()
    with Store(path) as store:
        (back,) = store.queue.take_samples(1)
        assert back.weight == 1.0 and store.lineage.last_published_version() is None
        assert store.lineage.lineage().staleness(3, 5) == 2  # versions of an older store follow their numbers
        assert store.lineage.record_published(6, 5, 1, "update") and not store.lineage.record_published(
            6, 4, 1, "update"
        )
