"""The device runs out of memory in the middle of a batch: every request of the batch is still answered (each
decoded again on its own, seeded ones with the same tokens), one that cannot fit even alone fails alone, and the
engine keeps serving."""

from __future__ import annotations

import pytest
import torch

from openclaw_trl.engines import GenerationRequest, SamplingParams, create_engine
from openclaw_trl.engines.out_of_memory import is_out_of_memory


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    engine = create_engine("hf", str(tiny_model_dir), batch_wait_s=0.2)
    yield engine
    engine.close()


def _requests(tokenizer, n):
    prompts = [tokenizer.encode(f"hello number {i}", add_special_tokens=False) for i in range(n)]
    return [
        GenerationRequest(p, SamplingParams(temperature=1.0, max_new_tokens=6, seed=i))
        for i, p in enumerate(prompts)
    ]


class OutOfMemoryAt:
    """The model's forward raises ``torch.OutOfMemoryError`` at its ``step``-th call with ``min_rows`` rows or more."""

    def __init__(self, engine, monkeypatch, step: int, min_rows: int):
        self.calls, self.raised = 0, 0
        forward = engine.model.forward_hidden

        def hidden(selected, **kwargs):
            rows = kwargs["input_ids"].shape[0]
            if rows >= min_rows:
                self.calls += 1
                if self.calls == step or min_rows == 1:
                    self.raised += 1
                    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
            return forward(selected, **kwargs)

        monkeypatch.setattr(engine.model, "forward_hidden", hidden)


def test_a_batch_that_runs_out_of_memory_midway_is_answered_request_by_request(engine, monkeypatch, caplog):
    requests = _requests(engine.tokenizer, 3)
    expected = engine.generate(requests)  # the same seeded requests without the fault
    fault = OutOfMemoryAt(engine, monkeypatch, step=3, min_rows=3)  # in the decode steps, after the prefill
    outs = engine.generate(requests)
    assert fault.raised == 1
    assert [o.token_ids for o in outs] == [o.token_ids for o in expected]
    assert any("ran out of memory" in r.getMessage() for r in caplog.records)
    monkeypatch.undo()
    assert len(engine.generate(_requests(engine.tokenizer, 2))) == 2  # serving goes on


def test_a_request_that_runs_out_of_memory_alone_fails_alone_and_the_engine_serves_on(engine, monkeypatch):
    OutOfMemoryAt(engine, monkeypatch, step=1, min_rows=1)
    with pytest.raises(RuntimeError, match="out of memory"):
        engine.generate(_requests(engine.tokenizer, 1))
    monkeypatch.undo()
    assert len(engine.generate(_requests(engine.tokenizer, 1))) == 1


def test_out_of_memory_is_told_apart():
    assert is_out_of_memory(torch.OutOfMemoryError("CUDA out of memory"))
    assert is_out_of_memory(RuntimeError("MPS backend out of memory"))
    assert not is_out_of_memory(RuntimeError("shape mismatch"))
