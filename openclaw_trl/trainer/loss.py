"""The loss forward of a micro-batch, run before TRL's loss, and the numbers computed from it.

``OpenClawTrainer.compute_loss`` runs the policy forward itself (``LossForward``: per-token log-probs,
entropies, MoE aux loss, exactly what TRL's ``_compute_loss`` would compute), completes the inputs that
depend on it (deferred advantages: ``trainer.advantages``), then hands both to TRL's loss, which uses that
forward instead of running its own: one forward and one backward per micro-batch, and TRL's loss reads
inputs that no longer change. The top-K distillation term reuses the forward's hidden states.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from openclaw_trl.losses import masked_mean
from openclaw_trl.trainer.batches import prompt_and_completion


@dataclass
class LossForward:
    """TRL's ``(per-token log-probs [B, T], entropies [B, T] or None, aux loss or None)`` of a micro-batch."""

    logps: torch.Tensor
    entropies: torch.Tensor | None
    aux_loss: torch.Tensor | None

    def as_tuple(self) -> tuple:
        return self.logps, self.entropies, self.aux_loss


def forward_arguments(inputs: dict) -> tuple[torch.Tensor, torch.Tensor, int]:
    """``(input_ids, attention_mask, logits_to_keep)`` of TRL's loss forward: prompt then completion, and
    the completion width."""
    input_ids, attention = prompt_and_completion(
        inputs["prompt_ids"], inputs["prompt_mask"], inputs["completion_ids"], inputs["completion_mask"]
    )
    return input_ids, attention, inputs["completion_ids"].size(1)


def kl_old(logps: torch.Tensor, old: torch.Tensor | None, mask: torch.Tensor) -> float:
    """KL(old || new) of the loss forward, k3 estimator; 0 without old log-probs (the first pass of an
    on-policy batch, where they are the forward's own)."""
    if old is None:
        return 0.0
    delta = logps - old
    return float(masked_mean(torch.exp(delta) - delta - 1, mask))


def kd_share(kd_term: torch.Tensor, ppo_loss: torch.Tensor) -> torch.Tensor:
    """``|kd| / (|ppo| + |kd|)``: the KD term's share of the loss value (0 when both are 0)."""
    return kd_term.abs() / (ppo_loss.abs() + kd_term.abs()).clamp(min=1e-12)
