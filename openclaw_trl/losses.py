"""The learning signal as pure tensor functions: no I/O, no model.

Shapes: ``B`` samples (one assistant turn each), ``T`` completion positions (right-padded), ``K``
top-K entries. Every log-prob is ``log_softmax(logits / temperature)`` at the turn's sampling
temperature, for student and teacher alike (one temperature convention, see engines/base.py).
"""

from __future__ import annotations

import torch

# Log-probs are floored here before they enter a KL: exp(-50) is 2e-22, far below any mass that
# matters, and the floor keeps -inf inputs (padding, masked vocab) from producing inf/NaN.
LOGPROB_FLOOR = -50.0
# The top-K mass can reach 1 (K covers the support, or rounding): keep log(sum p) strictly below 0
# so that the tail bin log(1 - sum p) stays finite (about log(1e-7) = -16 at the clamp).
_MAX_LOG_MASS = -1e-7


def combined_advantages(
    rewards: torch.Tensor,
    teacher_logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    response_mask: torch.Tensor,
    opd_mask: torch.Tensor,
    w_rl: float = 1.0,
    w_opd: float = 1.0,
) -> torch.Tensor:
    """Per-token advantage ``A[b,t] = (w_rl * r[b] + w_opd * opd[b] * (lp_T[b,t] - lp_old[b,t])) * mask[b,t]``.

    Args:
        rewards: ``[B]`` scalar rewards in {-1, 0, +1} (Binary RL), broadcast over tokens.
        teacher_logprobs: ``[B, T]`` log-probs of the sampled tokens under the hint-conditioned teacher.
        old_logprobs: ``[B, T]`` log-probs of the same tokens under the policy that generated them.
        response_mask: ``[B, T]`` 1 on completion tokens that are trained, 0 on padding.
        opd_mask: ``[B]`` bool, True when the sample has an accepted hint (and so real teacher log-probs).

    Returns ``[B, T]``, detached. Where ``opd_mask`` is False the OPD term is exactly 0, whatever
    ``teacher_logprobs`` holds (NaN, inf, stale values); padding positions are exactly 0.
    Binary RL is ``w_opd=0``; OPD is ``w_rl=0``.
    """
    rewards = rewards.detach().to(old_logprobs.dtype)
    use_opd = opd_mask.detach().bool()[:, None] & response_mask.detach().bool()
    opd_term = torch.where(use_opd, teacher_logprobs.detach() - old_logprobs.detach(), 0.0)
    advantages = w_rl * rewards[:, None] + w_opd * opd_term
    return torch.where(response_mask.detach().bool(), advantages, 0.0)


def _with_tail_bin(topk_logprobs: torch.Tensor) -> torch.Tensor:
    """``[..., K]`` log-probs -> ``[..., K+1]`` with the tail bin ``log(1 - sum_k p_k)`` appended."""
    log_mass = torch.logsumexp(topk_logprobs, dim=-1, keepdim=True).clamp(max=_MAX_LOG_MASS)
    tail = torch.log(-torch.expm1(log_mass))
    return torch.cat([topk_logprobs, tail], dim=-1)


def topk_distillation_loss(
    student_logprobs_topk: torch.Tensor,
    teacher_topk_logprobs: torch.Tensor,
    response_mask: torch.Tensor,
    cap: float | None = None,
) -> torch.Tensor:
    """Per-token reverse KL over the teacher's top-K ids plus a tail bin: ``D(student_{K+1} || teacher_{K+1})``.

    Args:
        student_logprobs_topk: ``[B, T, K]`` student log-probs (full-vocabulary log-softmax) gathered on
            the top-K ids. Gradient flows into these.
        teacher_topk_logprobs: ``[B, T, K]`` teacher log-probs on the same ids (treated as constants).
        response_mask: ``[B, T]``.
        cap: optional upper bound on the per-token KL. The KD term bypasses the PPO clip, so the trainer
            bounds it; a capped token contributes no gradient.

    Returns ``[B, T]`` (0 where the mask is 0), finite for empty responses, K covering all the mass and
    -inf inputs.
    """
    student = _with_tail_bin(student_logprobs_topk.clamp(min=LOGPROB_FLOOR))
    teacher = _with_tail_bin(teacher_topk_logprobs.detach().clamp(min=LOGPROB_FLOOR))
    per_token = (student.exp() * (student - teacher)).sum(dim=-1)
    if cap is not None:
        per_token = per_token.clamp(max=cap)
    return torch.where(response_mask.bool(), per_token, 0.0)


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``values`` over positions where ``mask`` is 1 (0 when the mask is empty)."""
    mask = mask.to(values.dtype)
    return (values * mask).sum() / mask.sum().clamp(min=1.0)


def scheduled_weights(
    schedule: str, w_opd: float, w_kd: float, step: int, start: int = 0, end: int = 0
) -> tuple[float, float]:
    """``(OPD weight, KD weight)`` at optimizer step ``step`` for a staged OPD -> top-K KD schedule.

    * ``constant``: ``(w_opd, w_kd)`` at every step;
    * ``switch``: ``(w_opd, 0)`` before ``start``, ``(0, w_kd)`` from ``start`` on;
    * ``ramp``: ``(w_opd * (1 - a), w_kd * a)`` with ``a = clamp((step - start) / (end - start), 0, 1)``
      (a step function at ``start`` when ``start == end``).
    """
    if schedule == "constant":
        return w_opd, w_kd
    if schedule == "switch":
        return (w_opd, 0.0) if step < start else (0.0, w_kd)
    if schedule == "ramp":
        alpha = 1.0 if step >= end else 0.0
        if end > start:
            alpha = min(max((step - start) / (end - start), 0.0), 1.0)
        return w_opd * (1.0 - alpha), w_kd * alpha
    raise ValueError(f"unknown OPD/KD schedule {schedule!r}: use constant, switch or ramp")


SCALE_REWARDS = ("group", "batch", "none")
GROUP_STD_EPS = 1e-4
"""TRL's epsilon of the reward scaling: ``A / (std + 1e-4)``."""


def group_statistics(scores: list[float | None]) -> tuple[float | None, float | None]:
    """``(mean, std)`` of a group's scores, leaving out the candidates without one (None), as TRL's
    nan-aware baseline does; the std with Bessel's correction (TRL's ``nanstd``), 0 for a single score.
    Both None when no candidate has a score."""
    from trl.trainer.utils import nanstd

    values = torch.tensor([float("nan") if s is None else float(s) for s in scores], dtype=torch.float64)
    scored = int((~torch.isnan(values)).sum())
    if scored == 0:
        return None, None
    std = float(nanstd(values)) if scored > 1 else 0.0
    return float(torch.nanmean(values)), std


def group_relative_advantages(
    rewards: torch.Tensor,
    group_means: torch.Tensor,
    group_stds: torch.Tensor,
    scale_rewards: str,
    batch_std: float | None = None,
    std_floor: float = 0.0,
) -> torch.Tensor:
    """GRPO's group-relative advantage ``A_i = r_i - mean(r of i's group)`` with TRL's ``scale_rewards``:

    * ``group``: ``A_i / (max(std of i's group, std_floor) + 1e-4)``;
    * ``batch``: ``A_i / (max(batch_std, std_floor) + 1e-4)``, ``batch_std`` the std of the group rewards of
      the whole training batch (``None``: fewer than two of them, and each row falls back to its group's std);
    * ``none``: ``A_i`` as is (Dr. GRPO).

    ``std_floor`` (in the rewards' own unit) keeps differences smaller than it from being blown up to unit
    size: a group whose candidates are all about as good (scores within a fraction of the floor) gets small
    advantages, not ``+-1``, so a judge's arbitrary small preferences among equally good replies do not
    concentrate the policy on the few it happens to score highest.

    ``rewards``, ``group_means``, ``group_stds``: ``[B]``. A candidate the quick judge gave no score has
    ``r_i`` = its group's mean, so ``A_i = 0``. Returns ``[B]``, detached.
    """
    if scale_rewards not in SCALE_REWARDS:
        raise ValueError(f"scale_rewards must be one of {SCALE_REWARDS}, got {scale_rewards!r}")
    advantages = (rewards - group_means).detach()
    if scale_rewards == "none":
        return advantages
    std = group_stds.detach()
    if scale_rewards == "batch" and batch_std is not None:
        std = torch.full_like(std, float(batch_std))
    return advantages / (std.clamp_min(std_floor) + GROUP_STD_EPS)


def leave_one_out_baseline(rewards: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """``b_i = mean_{j != i} r_j`` over the ``rows`` (a ``[B]`` bool mask) of ``rewards`` (``[B]``); 0 where
    ``rows`` is False or when fewer than two rows are selected.

    The baseline of a REINFORCE term that does not depend on the sample it is subtracted from (RLOO): the
    other samples' rewards are independent of ``y_i`` given the policy, so ``E[b_i grad log pi(y_i)] = 0`` and
    ``r_i - b_i`` keeps the gradient unbiased; a batch whose rewards all agree (every reply liked) gives
    ``A = 0``, so liking what is already liked never sharpens the policy further."""
    selected = rows.to(rewards.dtype)
    n = selected.sum()
    if n < 2:
        return torch.zeros_like(rewards)
    total = (rewards * selected).sum()
    return torch.where(rows, (total - rewards) / (n - 1), torch.zeros_like(rewards)).detach()
