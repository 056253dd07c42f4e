"""Judged samples as TRL's batch tensors, this process's share of a batch, and the truncated IS weight.

Layout (TRL's): prompts are left-padded and completions right-padded, so ``cat([prompt, completion])`` puts
every completion's first token at column ``P`` (the prompt width) and the logits at ``P - 1 .. -2`` predict
the completion tokens. Per-token stored values (sampling and teacher log-probs, teacher top-K) are
right-padded like the completions, with zeros past each completion's end.

Importance weight: a sample drawn by the engine with log-probs ``lp_s`` and trained against the weights at
the start of the update (log-probs ``lp_old``) is weighted by ``w = pi_old / pi_s = exp(lp_old - lp_s)``,
per token or per sequence (the masked sum of the log-ratio), then truncated to ``[clip_min, clip_max]``
(clamped) or masked (0 outside it).
"""

from __future__ import annotations

import torch

from openclaw_trl.records import TrainingSample


def is_off_policy(samples: list[TrainingSample], temperature: float) -> bool:
    """Was any sample drawn by other weights than the trainer's (``staleness`` > 0 along the lineage, set
    when the batch was taken) or at another temperature?"""
    return any((s.staleness or 0) > 0 or abs(s.temperature - temperature) > 1e-6 for s in samples)


def batch_score_std(samples: list[TrainingSample]) -> float | None:
    """The std of the quick scores of the batch's Best-of-N group samples (``scale_rewards: batch``), the
    candidates without a score left out; None with fewer than two scores."""
    from openclaw_trl.losses import group_statistics

    scores = [s.meta.get("best_of_n", {}).get("score") for s in samples if s.group_id is not None]
    scored = [x for x in scores if x is not None]
    return group_statistics(scored)[1] if len(scored) > 1 else None


def process_share(samples: list, rank: int, num_processes: int) -> list:
    """Process ``rank`` of ``num_processes`` trains on ``samples[rank * b / n : (rank + 1) * b / n]``, as TRL
    slices its generation batch."""
    share = len(samples) // num_processes
    return samples[rank * share : (rank + 1) * share]


def prompt_and_completion(prompt_ids, prompt_mask, completion_ids, completion_mask):
    """``(input_ids, attention_mask)`` of the prompts followed by their completions."""
    return torch.cat([prompt_ids, completion_ids], dim=1), torch.cat([prompt_mask, completion_mask], dim=1)


def collate_samples(
    samples: list[TrainingSample], pad_token_id: int, device="cpu"
) -> dict[str, torch.Tensor]:
    """Pad stored token ids into TRL's layout: prompts left-padded, completions right-padded.

    Rows without teacher log-probs get zeros there (their ``opd_mask`` is False, so the OPD term is 0).
    ``teacher_prompt_ids`` holds the hint-augmented prompts (left-padded; the row's own prompt where none is
    stored, ``has_teacher_prompt`` 0) and ``truncated`` marks completions cut at the token limit.
    ``is_group`` marks Best-of-N group samples, ``group_stds`` their group's score std (0 elsewhere), and
    ``weights`` the weight of each sample's advantage (a served Best-of-N candidate's verdict; 1 elsewhere).
    """
    prompt_ids, prompt_mask = _padded_ids([s.prompt_ids for s in samples], pad_token_id, left=True)
    completion_ids, completion_mask = _padded_ids([s.completion_ids for s in samples], pad_token_id)
    teacher_prompt_ids, teacher_prompt_mask = _padded_ids(
        [s.teacher_prompt_ids or s.prompt_ids for s in samples], pad_token_id, left=True
    )
    width = completion_ids.size(1)
    lengths = [len(s.completion_ids) for s in samples]
    has_teacher = [bool(s.has_hint and s.teacher_logprobs is not None) for s in samples]
    has_topk = [bool(s.has_hint and s.topk_ids) for s in samples]
    k = max((len(s.topk_ids[0]) for s in samples if s.topk_ids), default=1)
    tensors = {
        "prompt_ids": prompt_ids,
        "prompt_mask": prompt_mask,
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "sampling_logprobs": _padded_values(
            [s.sampling_logprobs[:c] for s, c in zip(samples, lengths)], width
        ),
        "teacher_logprobs": _padded_values(
            [s.teacher_logprobs[:c] if ok else [] for s, c, ok in zip(samples, lengths, has_teacher)], width
        ),
        "rewards": torch.tensor([float(s.reward) for s in samples]),
        "baselines": torch.tensor([float(s.baseline) for s in samples]),
        "weights": torch.tensor([float(s.weight) for s in samples]),
        "is_group": torch.tensor([s.group_id is not None for s in samples]),
        "group_stds": torch.tensor([float(s.group_std or 0.0) for s in samples]),
        "opd_mask": torch.tensor(has_teacher),
        "topk_ids": _padded_values(
            [s.topk_ids[:c] if ok else [] for s, c, ok in zip(samples, lengths, has_topk)],
            width,
            tail=(k,),
            dtype=torch.long,
        ),
        "topk_logprobs": _padded_values(
            [s.topk_logprobs[:c] if ok else [] for s, c, ok in zip(samples, lengths, has_topk)],
            width,
            tail=(k,),
        ),
        "has_topk": torch.tensor(has_topk, dtype=torch.long),
        "teacher_prompt_ids": teacher_prompt_ids,
        "teacher_prompt_mask": teacher_prompt_mask,
        "has_teacher_prompt": torch.tensor([int(s.has_hint and bool(s.teacher_prompt_ids)) for s in samples]),
        "truncated": torch.tensor([s.finish_reason == "length" for s in samples]),
    }
    return {name: t.to(device) for name, t in tensors.items()}


def _padded_ids(rows: list[list[int]], pad_token_id: int, left: bool = False):
    """``(ids, mask)`` ``[n, longest]``: the rows padded with ``pad_token_id`` on the left or the right."""
    width = max(len(row) for row in rows)
    ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        span = slice(width - len(row), width) if left else slice(0, len(row))
        ids[i, span] = torch.tensor(row, dtype=torch.long)
        mask[i, span] = 1
    return ids, mask


def _padded_values(rows: list[list], width: int, tail: tuple[int, ...] = (), dtype=torch.float32):
    """``[n, width, *tail]`` zeros with each row's values written from its start."""
    out = torch.zeros((len(rows), width, *tail), dtype=dtype)
    for i, row in enumerate(rows):
        if len(row):
            out[i, : len(row)] = torch.tensor(row, dtype=dtype)
    return out


def truncated_is_weight(old, sampling, mask, mode: str, clip_min: float | None, clip_max: float | None):
    """Importance weight pi_old / pi_sampling per token (``token_*``) or per sequence (``sequence_*``),
    truncated (``*_truncate``: clamped) or masked (``*_mask``: set to 0 outside [clip_min, clip_max])."""
    log_ratio = (old - sampling) * mask
    if mode.startswith("sequence"):
        log_ratio = log_ratio.sum(-1, keepdim=True)
    ratio = torch.exp(log_ratio.clamp(max=20.0))
    low = clip_min if clip_min is not None else 0.0
    high = clip_max if clip_max is not None else float("inf")
    if mode.endswith("truncate"):
        return ratio.clamp(min=low, max=high)
    return torch.where((ratio < low) | (ratio > high), torch.zeros_like(ratio), ratio)
