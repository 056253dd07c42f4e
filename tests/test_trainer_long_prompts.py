"""Training on long (agent-sized) prompts: the LM head runs on the completion positions only, and activation
checkpointing with the LoRA adapter gives the same gradient."""

from __future__ import annotations

import pytest
import torch
import trl.trainer.utils as trl_utils

from tests.helpers import clipped_surrogate, token_mean
from tests.trainer_helpers import direct_grads, sampled, train_and_capture


class _HeadRows:
    """Wraps TRL's chunked log-prob function and records how many positions each call projects."""

    def __init__(self, real):
        self.real, self.rows = real, []

    def apply(self, hidden, *args):
        self.rows.append(hidden.shape[0])
        return self.real.apply(hidden, *args)


def _rl_loss(logp, logits, batch, mask):  # the clipped objective; ratio 1 on the first pass
    return token_mean(clipped_surrogate(logp, batch["rewards"][:, None]), mask)


@pytest.mark.parametrize("checkpointing", [False, True])
def test_head_sees_completion_positions_only_and_gradient_is_unchanged(
    tiny_model_dir, tmp_path, monkeypatch, checkpointing
):
    """200-token prompts, 6-token completions, micro-batches of 2: the LM head projects at most 2 x 6 positions
    per forward (not 2 x 208), and the gradient equals a direct full-logits computation, with and without
    activation checkpointing."""
    head = _HeadRows(trl_utils._ChunkedLogProbFunction)
    monkeypatch.setattr(trl_utils, "_ChunkedLogProbFunction", head)
    samples = sampled(tiny_model_dir, 4, prompt_len=200, rewards=[1.0, -1.0, -1.0, 1.0])
    trainer, init, got = train_and_capture(
        tiny_model_dir, tmp_path, samples, method="rl", activation_checkpointing=checkpointing
    )
    assert trainer.args.gradient_checkpointing == checkpointing
    assert head.rows and max(head.rows) <= 2 * 6, head.rows
    want = direct_grads(tiny_model_dir, init, samples, _rl_loss)
    assert set(want) == set(got)
    for n in want:
        torch.testing.assert_close(got[n], want[n], atol=1e-5, rtol=1e-4)
