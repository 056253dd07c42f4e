"""Per-token advantages of a batch, and the record of the ones that wait for the loss forward's log-probs.

``A = weight * (w_rl * r + w_opd * opd_mask * (lp_T - lp_old))`` per token (``losses.combined_advantages``):
``r`` is the judged reward (minus the stored session baseline with ``advantage_baseline: session_mean``, minus
the mean reward of the batch's other judged samples with ``batch_mean``, ``losses.leave_one_out_baseline``), or
for a Best-of-N group sample its group-relative advantage (``losses.group_relative_advantages``: ``r_i -
mean(r)`` of its group, scaled as ``scale_rewards`` says, the batch std taken over the whole batch); group
samples have no OPD term (their ``opd_mask`` is 0); ``weight`` is a served Best-of-N candidate's verdict (1
elsewhere). With the importance-sampling correction on, ``A`` is multiplied by the truncated weight
``min(pi_old / pi_sampling, C)`` (``batches.truncated_is_weight``): positive, so ``-min(r*A*w, clip(r)*A*w)
= w * -min(r*A, clip(r)*A)``.

An off-policy batch trained by one optimizer step needs ``lp_old`` = the log-probs of the loss forward
itself (no separate forward is run for them): its advantages are then ``Deferred``, a record carried in the
batch tensors (``deferred_*`` keys, split into micro-batches with the rest) and completed once the loss
forward has run, before TRL's loss reads ``advantages``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch

from openclaw_trl.losses import (
    combined_advantages,
    group_relative_advantages,
    leave_one_out_baseline,
    masked_mean,
)
from openclaw_trl.trainer.batches import truncated_is_weight


def rl_rewards(
    batch: dict[str, torch.Tensor],
    baseline: str,
    scale_rewards: str,
    batch_score_std: float | None,
    std_floor: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(r, mean baseline)``: the RL term's reward per row (see the module docstring) and the mean stored
    baseline subtracted from the judged rows (None when no baseline applies)."""
    rewards, group = batch["rewards"], batch["is_group"]
    baseline_mean = None
    if baseline == "session_mean":
        if (~group).any():
            baseline_mean = batch["baselines"][~group].mean()
        rewards = torch.where(group, rewards, rewards - batch["baselines"])
    elif baseline == "batch_mean":
        loo = leave_one_out_baseline(rewards, ~group)
        if (~group).any():
            baseline_mean = loo[~group].mean()
        rewards = torch.where(group, rewards, rewards - loo)
    if group.any():
        advantages = group_relative_advantages(
            batch["rewards"],
            batch["baselines"],
            batch["group_stds"],
            scale_rewards,
            batch_score_std,
            std_floor,
        )
        rewards = torch.where(group, advantages, rewards)
    return rewards, baseline_mean


@dataclass
class AdvantageTerms:
    """What the per-token advantage is made of, per row: ``rl`` ``[B]``, ``teacher_logprobs`` ``[B, T]``,
    ``opd_mask`` ``[B]`` (a teacher scored the row), ``weights`` ``[B]``."""

    rl: torch.Tensor
    teacher_logprobs: torch.Tensor
    opd_mask: torch.Tensor
    weights: torch.Tensor

    def advantages(self, old_logprobs, mask, w_rl: float, w_opd: float) -> torch.Tensor:
        """``weights * (w_rl * rl + w_opd * opd_mask * (teacher_logprobs - old_logprobs))`` per token."""
        advantages = combined_advantages(
            self.rl, self.teacher_logprobs, old_logprobs, mask, self.opd_mask, w_rl=w_rl, w_opd=w_opd
        )
        return advantages * self.weights[:, None].to(advantages.dtype)


def is_weighted(advantages, old, sampling, mask, args) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """``(advantages * w, metrics)``, ``w`` the truncated importance weight ``pi_old / pi_sampling`` as the
    ``vllm_importance_sampling_*`` fields of ``args`` say; the metrics are its mean and the mean log-prob gap."""
    weight = truncated_is_weight(
        old,
        sampling,
        mask,
        args.vllm_importance_sampling_mode,
        args.vllm_importance_sampling_clip_min,
        args.vllm_importance_sampling_clip_max,
    )
    metrics = {
        "sampling/importance_sampling_ratio/mean": masked_mean(weight.expand_as(mask), mask),
        "sampling/sampling_logp_difference/mean": masked_mean((old - sampling).abs(), mask),
    }
    return advantages * weight, metrics


@dataclass
class Deferred:
    """Advantages completed on the loss forward: its terms and the engine's sampling log-probs ``[B, T]``."""

    terms: AdvantageTerms
    sampling_logprobs: torch.Tensor

    PREFIX = "deferred_"

    def as_inputs(self) -> dict[str, torch.Tensor]:
        """The record as batch tensors (``deferred_*`` keys), so that TRL splits it with the rest."""
        out = {f"{self.PREFIX}{f.name}": getattr(self.terms, f.name) for f in fields(AdvantageTerms)}
        return {**out, f"{self.PREFIX}sampling_logprobs": self.sampling_logprobs}

    @classmethod
    def in_inputs(cls, inputs: dict) -> bool:
        return f"{cls.PREFIX}sampling_logprobs" in inputs

    @classmethod
    def pop(cls, inputs: dict) -> Deferred | None:
        """The record carried by ``inputs`` (its keys removed from them), or None when there is none."""
        if not cls.in_inputs(inputs):
            return None
        terms = AdvantageTerms(
            **{f.name: inputs.pop(f"{cls.PREFIX}{f.name}") for f in fields(AdvantageTerms)}
        )
        return cls(terms, inputs.pop(f"{cls.PREFIX}sampling_logprobs"))
