"""An update that runs out of device memory: retried once; skipped after a second failure, with nothing
trained from partial gradients, its samples kept out of training with the reason, and the next batch trained.

The error is injected by a forward hook on the tiny model's embeddings: every forward of the policy passes
there, in the loss forward of an update or in the forwards that build its batch.
"""

from __future__ import annotations

import copy
import logging

import pytest
import torch
from transformers import TrainerCallback

from openclaw_trl.store import Store
from openclaw_trl.store.drops import OUT_OF_MEMORY_REASON
from tests.trainer_helpers import lora_params, make_trainer, sampled


class StateAtSteps(TrainerCallback):
    """The LoRA weights and the optimizer's per-parameter state after every optimizer step."""

    def __init__(self, trainer):
        self.trainer, self.weights, self.moments = trainer, [lora_params(trainer.model, True)], [{}]

    def on_step_end(self, args, state, control, **kwargs):
        self.weights.append(lora_params(self.trainer.model, True))
        self.moments.append(copy.deepcopy(self.trainer.optimizer.state_dict()["state"]))


def _fail_forwards(trainer, during_update: int, times: int, error=torch.OutOfMemoryError, after: int = 0):
    """Make ``times`` forwards of update ``during_update`` (1-based), after its first ``after``, raise
    ``error``: those that build its batch and its loss forwards (not the version guard's checks)."""
    left, inside, passed = {"n": times}, {"n": 0}, {"n": 0}

    def hook(module, args, output):
        if inside["n"] and trainer.state.global_step == during_update - 1 and left["n"] > 0:
            passed["n"] += 1
            if passed["n"] <= after:
                return
            left["n"] -= 1
            raise error("CUDA out of memory. Tried to allocate 2.00 GiB (injected)")

    def watched(method):
        def run(*args, **kwargs):
            inside["n"] += 1
            try:
                return method(*args, **kwargs)
            finally:
                inside["n"] -= 1

        return run

    trainer._prepare_inputs = watched(trainer._prepare_inputs)
    trainer.compute_loss = watched(trainer.compute_loss)
    trainer.model.get_input_embeddings().register_forward_hook(hook)
    return left


def _trainer(tiny_model_dir, tmp_path, **overrides):
    tmp_path.mkdir(parents=True, exist_ok=True)
    store = Store(tmp_path / "store.sqlite")
    for sample in sampled(tiny_model_dir, 12):
        store.queue.add_sample(sample)
    trainer = make_trainer(tiny_model_dir, tmp_path, store, **{"max_steps": 3, **overrides})
    watch = StateAtSteps(trainer)
    trainer.add_callback(watch)
    return store, trainer, watch


def _consumed(store) -> dict[int, int | None]:
    rows = store.db.conn().execute("SELECT id, consumed_step FROM samples ORDER BY id").fetchall()
    return {r[0]: r[1] for r in rows}


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _same_moments(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)


def test_an_update_out_of_memory_twice_is_skipped_and_the_next_batch_trains(tiny_model_dir, tmp_path, caplog):
    store, trainer, watch = _trainer(tiny_model_dir, tmp_path)
    left = _fail_forwards(trainer, during_update=2, times=2)
    with caplog.at_level(logging.WARNING, logger="openclaw_trl.trainer.out_of_memory"):
        trainer.train()
    assert left["n"] == 0 and trainer.state.global_step == 3 and trainer.updates_skipped == 1

    # update 2 took no optimizer step: weights and the optimizer's moments and step counts are those of update 1
    assert _same(watch.weights[2], watch.weights[1]) and not _same(watch.weights[1], watch.weights[0])
    assert _same_moments(watch.moments[2], watch.moments[1]) and watch.moments[1]
    # update 3 trains normally on the next batch
    assert not _same(watch.weights[3], watch.weights[2])
    assert not _same_moments(watch.moments[3], watch.moments[2])

    # its samples are kept in the store with the reason; the batches before and after it are consumed
    consumed = _consumed(store)
    assert sorted(consumed.values(), key=str) == [1, 1, 1, 1, 3, 3, 3, 3, None, None, None, None]
    skipped = (
        store.db.conn()
        .execute("SELECT id, dropped_reason, lease FROM samples WHERE dropped_reason IS NOT NULL")
        .fetchall()
    )
    assert [r[0] for r in skipped] == [i for i, step in consumed.items() if step is None]
    assert all(r[1].startswith(OUT_OF_MEMORY_REASON) and "update 2" in r[1] for r in skipped)
    assert all(r[2] is None for r in skipped)  # not leased: nobody holds them
    assert store.queue.count_skipped_out_of_memory() == 4 and store.queue.count_waiting() == 0

    # version 2 serves the weights of version 1 under its own number
    version = store.lineage.published_version(2)
    assert version.parent == 1 and version.updates == 0 and version.note.startswith("skipped:")
    assert store.lineage.lineage().staleness(1, 2) == 0

    lines = [r.getMessage() for r in caplog.records]
    assert sum("update 2 skipped" in line and "out of memory" in line for line in lines) == 1
    logged = [e for e in trainer.state.log_history if "memory/updates_skipped" in e]
    assert [e["step"] for e in logged] == [2]
    store.close()


def test_an_update_out_of_memory_once_is_retried_and_trains(tiny_model_dir, tmp_path):
    store, trainer, watch = _trainer(tiny_model_dir, tmp_path)
    left = _fail_forwards(trainer, during_update=2, times=1)
    trainer.train()
    assert left["n"] == 0 and trainer.state.global_step == 3 and trainer.updates_skipped == 0
    assert not _same(watch.weights[2], watch.weights[1])
    assert sorted(_consumed(store).values()) == [1] * 4 + [2] * 4 + [3] * 4
    assert store.lineage.published_version(2).updates == 1
    assert [e["step"] for e in trainer.state.log_history if "memory/steps_retried" in e] == [2]
    store.close()


@pytest.mark.parametrize("micro_batch", [1, 2])
def test_a_retried_update_trains_as_one_that_never_failed(tiny_model_dir, tmp_path, micro_batch):
    """The retry reuses the batch built for the failed try (no sample is taken twice) and keeps the
    gradients of the update's earlier micro-batches: the weights after the retried update (its first or
    second micro-batch failed once) equal an unfailed run's."""
    store, trainer, watch = _trainer(tiny_model_dir, tmp_path / "a", max_steps=2)
    assert trainer.args.gradient_accumulation_steps == 2
    _fail_forwards(trainer, during_update=2, times=1, after=micro_batch - 1)
    trainer.train()
    clean_store, clean, clean_watch = _trainer(tiny_model_dir, tmp_path / "b", max_steps=2)
    clean.train()
    for name, value in clean_watch.weights[2].items():
        torch.testing.assert_close(watch.weights[2][name], value)
    store.close()
    clean_store.close()


def test_out_of_memory_while_the_batch_is_built_gives_the_batch_up(tiny_model_dir, tmp_path):
    """A stale batch with several passes builds its old log-probs in a forward of its own: out of memory
    there twice skips the update and gives the batch up; the next update takes the next batch."""
    store = Store(tmp_path / "store.sqlite")
    for sample in sampled(tiny_model_dir, 12):
        store.queue.add_sample(sample)
    trainer = make_trainer(tiny_model_dir, tmp_path, store, max_steps=2, num_iterations=2)
    watch = StateAtSteps(trainer)
    trainer.add_callback(watch)
    _fail_forwards(trainer, during_update=1, times=2)
    trainer.train()
    assert trainer.state.global_step == 2 and trainer.updates_skipped == 1
    assert _same(watch.weights[1], watch.weights[0]) and not _same(watch.weights[2], watch.weights[1])
    assert store.queue.count_skipped_out_of_memory() == 4
    store.close()


def test_other_errors_are_not_retried(tiny_model_dir, tmp_path):
    store, trainer, _ = _trainer(tiny_model_dir, tmp_path)
    _fail_forwards(trainer, during_update=1, times=1, error=ValueError)
    with pytest.raises(ValueError, match="injected"):
        trainer.train()
    assert trainer.updates_skipped == 0
    store.close()


def test_a_skipped_update_is_checkpointed_as_the_previous_weights(tiny_model_dir, tmp_path):
    store, trainer, watch = _trainer(
        tiny_model_dir, tmp_path, max_steps=2, save_strategy="steps", save_steps=1, adapter_history=3
    )
    _fail_forwards(trainer, during_update=2, times=2)
    trainer.train()
    rows = {v.version: v for v in store.versions.adapter_versions()}
    assert sorted(rows) == [0, 1, 2]
    assert rows[2].restored_from == 1 and rows[2].samples == 0
    assert rows[1].restored_from is None and rows[1].samples == 4
    assert not list((tmp_path / "run").glob(".checkpoint-*"))
    store.close()
