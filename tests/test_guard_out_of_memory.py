"""The version guard's check running out of device memory: it is run once more, and if it runs out again the
version is held back with that reason (never served unchecked) while training goes on.

The tiny model, a real store, real training steps and a recording engine; the error is raised from the model's
forwards while the guard checks a candidate (not while it trains)."""

from __future__ import annotations

import logging

import torch

from openclaw_trl.store import Store
from tests.test_guard import RecordingEngine
from tests.trainer_helpers import make_trainer, sampled


def _fail_checks(trainer, during_update: int, times: int) -> dict:
    """Make the first ``times`` forwards of the guard's check of update ``during_update`` (1-based) raise
    ``torch.OutOfMemoryError``."""
    left, inside = {"n": times}, {"n": 0}
    check = trainer.check_candidate

    def watched():
        inside["n"] += 1
        try:
            return check()
        finally:
            inside["n"] -= 1

    def hook(module, args, output):
        if inside["n"] and trainer.state.global_step == during_update and left["n"] > 0:
            left["n"] -= 1
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (injected)")

    trainer.check_candidate = watched
    trainer.model.get_input_embeddings().register_forward_hook(hook)
    return left


def _trainer(tiny_model_dir, tmp_path):
    store = Store(tmp_path / "store.sqlite")
    ids = [store.queue.add_sample(s) for s in sampled(tiny_model_dir, 8, hint=True)]
    trainer = make_trainer(
        tiny_model_dir,
        tmp_path,
        store,
        max_steps=2,
        learning_rate=0.05,
        guard_max_kl=1e9,
        guard_max_implausible=1.0,
        guard_max_entropy_drop=1e9,
        guard_max_entropy_rise=1e9,
    )
    trainer.engine = RecordingEngine()
    return store, ids, trainer


def test_a_check_out_of_memory_twice_holds_the_version_back_and_training_goes_on(
    tiny_model_dir, tmp_path, caplog
):
    store, ids, trainer = _trainer(tiny_model_dir, tmp_path)
    left = _fail_checks(trainer, during_update=1, times=2)
    with caplog.at_level(logging.WARNING):
        trainer.train()

    assert left["n"] == 0
    engine = trainer.engine
    assert [v for v, _ in engine.published] == [0, 1, 2]
    for key, tensor in engine.published[0][1].items():
        assert torch.equal(
            engine.published[1][1][key], tensor
        )  # v1 serves v0's weights: never served unchecked
    assert any(not torch.equal(engine.published[2][1][k], t) for k, t in engine.published[1][1].items())
    held = store.lineage.published_version(1)
    assert (held.parent, held.updates) == (0, 0)
    assert held.note.startswith("held: out of memory during the check (OutOfMemoryError: CUDA out of memory")
    assert store.lineage.published_version(2).parent == 1
    logged = [e for e in trainer.state.log_history if "reward" in e]
    assert [e["guard/held"] for e in logged] == [1.0, 0.0]
    tries = [r.getMessage() for r in caplog.records if "guard ran out of memory" in r.getMessage()]
    assert len(tries) == 2 and "try 2 of 2" in tries[1]
    rows = {s.sample_id: s for s in store.queries.iter_samples()}
    reasons = [rows[i].dropped_reason for i in ids if rows[i].consumed_step == 1]
    assert reasons and all("out of memory during the check" in r for r in reasons)


def test_a_check_out_of_memory_once_is_run_again_and_the_version_is_served(tiny_model_dir, tmp_path):
    store, _, trainer = _trainer(tiny_model_dir, tmp_path)
    left = _fail_checks(trainer, during_update=1, times=1)
    trainer.train()

    assert left["n"] == 0
    logged = [e for e in trainer.state.log_history if "reward" in e]
    assert [e["guard/held"] for e in logged] == [0.0, 0.0]
    assert store.lineage.published_version(1).updates == 1 and store.lineage.published_version(1).parent == 0
    served = trainer.engine.published
    assert any(not torch.equal(served[1][1][k], t) for k, t in served[0][1].items())  # v1 is the trained one
