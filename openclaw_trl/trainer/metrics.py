"""The numbers logged for each batch: rewards, OPD, Best-of-N, completions and staleness.

``batch_metrics`` returns them by name (the trainer appends them to TRL's metrics, averaged over the update
and logged with it); NaN where a mean has no rows (e.g. ``reward`` of a batch of Best-of-N candidates only).
"""

from __future__ import annotations

import torch

from openclaw_trl.losses import masked_mean
from openclaw_trl.records import TrainingSample


def batch_metrics(
    samples: list[TrainingSample], batch: dict[str, torch.Tensor], advantages, mask, log_advantages: bool
) -> dict[str, float]:
    """The metrics of one process's share of a batch; ``advantages/mean`` only with ``log_advantages`` (a
    deferred batch logs it per micro-batch, once its advantages are complete)."""
    out: dict[str, float] = {}
    opd = batch["opd_mask"]
    opd_adv = (batch["teacher_logprobs"] - batch["sampling_logprobs"]) * mask
    judged = batch["rewards"][~batch["is_group"]]  # NaN means when the batch is all Best-of-N groups
    out["reward"] = judged.mean()
    out["rl/reward_mean"] = judged.mean()
    out["rl/nonzero_reward_rate"] = (judged != 0).float().mean()
    out.update(best_of_n_metrics(samples))
    out["opd/hint_accept_rate"] = opd.float().mean()
    monitored = [s.meta["prm_eval_score"] for s in samples if s.meta.get("prm_eval_score") is not None]
    if monitored:  # prm_monitor: the PRM reward of OPD samples, not trained on
        out["rollout/prm_eval_score"] = sum(monitored) / len(monitored)
    if opd.any():
        opd_rows = opd_adv[opd]
        out["opd/mean_advantage"] = masked_mean(opd_rows, mask[opd])
        out["opd/mean_abs_advantage"] = masked_mean(opd_rows.abs(), mask[opd])
    if log_advantages:
        out["advantages/mean"] = masked_mean(advantages, mask)
    lengths = batch["completion_mask"].sum(1).float()
    out["completions/mean_length"] = lengths.mean()
    out["completions/clipped_ratio"] = batch["truncated"].float().mean()
    out["samples/staleness"] = sum(s.staleness or 0 for s in samples) / len(samples)
    return {name: float(value) for name, value in out.items()}


def best_of_n_metrics(samples: list[TrainingSample]) -> dict[str, float]:
    """``best_of_n/score_mean`` (quick scores of the batch's group samples), ``best_of_n/served_score``
    (of the served candidates among them), ``best_of_n/reward_std`` (mean std of their groups)."""
    group = [s for s in samples if s.group_id is not None]
    if not group:
        return {}
    scores = [s.meta["best_of_n"]["score"] for s in group if s.meta["best_of_n"]["score"] is not None]
    served = [s.reward for s in group if s.meta["best_of_n"]["served"]]
    out = {"best_of_n/samples": len(group)}
    if scores:
        out["best_of_n/score_mean"] = sum(scores) / len(scores)
    if served:
        out["best_of_n/served_score"] = sum(served) / len(served)
    out["best_of_n/reward_std"] = sum(s.group_std or 0.0 for s in group) / len(group)
    return out
