"""Top-K distillation: the policy's log-probs pulled towards the teacher's on a few ids per position.

At each distilled position (a completion token of a sample whose hint was accepted) the term is the
reverse KL ``sum_k p_S(k) (log p_S(k) - log p_T(k))`` over the K support ids plus one tail bin holding the
rest of each distribution's mass (``losses.topk_distillation_loss``, capped at ``kd_cap``), averaged over
each sample's distilled positions, then over the batch. The support is the teacher's own top-K, stored
with the sample (``kd_topk_source: teacher``), or the student's top-K at that position, with the teacher's
log-probs on those ids computed here by a no-grad forward of the hint-augmented prompt followed by the
sampled completion (``student``): the LoRA adapter disabled for ``teacher: base``, the current one for
``teacher: policy``.

Temperature: both sides are ``log_softmax(logits / T)`` with ``T`` the sampling temperature, the
convention of the engine's stored teacher top-K and of TRL's per-token log-probs.

Memory: the student side needs the full-vocabulary log-softmax only at the distilled positions, so the LM
head runs on those positions' hidden states alone, taken from the PPO loss forward when a hook captured
them (one forward and one backward for both terms); past ``KD_LOGITS_ELEMS`` logits it runs in chunks
recomputed in the backward pass. Heads that scale their output (soft-capping, logit scales) are not split
off: the model's own logits are used instead.
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext
from functools import partial

import torch
from trl.trainer.utils import use_adapter

from openclaw_trl.losses import topk_distillation_loss
from openclaw_trl.trainer.batches import prompt_and_completion

# Output scalings some LM heads apply on top of the projection (config attribute names).
_HEAD_SCALINGS = (
    "final_logit_softcapping",
    "logit_scale",
    "logits_scaling",
    "output_multiplier",
    "lm_head_multiplier",
)

# Most positions x vocabulary logits the KD term holds at once (256 MB in float32). Beyond that the LM head
# runs in chunks of positions that are recomputed in the backward pass instead of kept: a 16 x 512-token
# batch with a 151,936 vocabulary would otherwise keep about 5 GB of log-probs for its gradient.
KD_LOGITS_ELEMS = 1 << 26


def check_kd_teacher(args, model) -> None:
    """Refuse ``kd_topk_source: student`` with ``teacher: base`` on a model without a LoRA adapter to disable."""
    uses_base = args.w_kd > 0 and args.kd_topk_source == "student" and args.teacher == "base"
    if uses_base and not hasattr(model, "disable_adapter"):
        raise ValueError(
            "kd_topk_source: student with teacher: base runs the base model by disabling the LoRA adapter, "
            "and this model has none: set use_peft: true, or use teacher: policy"
        )


def kd_inputs(batch: dict[str, torch.Tensor], mask: torch.Tensor, source: str) -> dict[str, torch.Tensor]:
    """What the KD term needs from a collated batch (``batches.collate_samples``): the teacher's top-K
    (``kd_topk_source: teacher``) or the hint-augmented prompts the teacher is run on (``student``), and
    ``kd_mask``, the positions it applies to (completion tokens of rows with a teacher)."""
    opd = batch["opd_mask"][:, None].to(mask.dtype)
    if source == "student":
        return {
            "kd_teacher_prompt_ids": batch["teacher_prompt_ids"],
            "kd_teacher_prompt_mask": batch["teacher_prompt_mask"],
            "kd_mask": mask * opd * batch["has_teacher_prompt"][:, None],
        }
    return {
        "kd_topk_ids": batch["topk_ids"],
        "kd_topk_logprobs": batch["topk_logprobs"],
        "kd_mask": mask * opd * batch["has_topk"][:, None],
    }


def teacher_weights(model, teacher: str):
    """The teacher's weights for the trainer-side forward (a context): the base model (adapter disabled) for
    ``teacher: base``, the policy as it is for ``teacher: policy``. ``model`` is the unwrapped policy."""
    if teacher == "policy":
        return nullcontext()
    return use_adapter(model, adapter_name=None)


def policy_body_and_head(model):
    """``(transformer body, LM head)`` of the unwrapped policy ``model``, or None when the head applies
    output scalings (soft-capping, logit scales): then the KD term takes the model's own logits instead."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    config = base.config.get_text_config()
    if any(getattr(config, name, None) is not None for name in _HEAD_SCALINGS):
        return None
    body = getattr(base, "base_model", base)
    return None if body is base else (body, base.get_output_embeddings())


@contextmanager
def captured_hidden_states(body):
    """Collect the last hidden states of every grad-enabled forward of ``body`` inside the block."""
    captured: list[torch.Tensor] = []
    if body is None:
        yield captured
        return

    def hook(module, args, output):
        if torch.is_grad_enabled():
            captured.append(output.last_hidden_state if hasattr(output, "last_hidden_state") else output[0])

    handle = body.register_forward_hook(hook)
    try:
        yield captured
    finally:
        handle.remove()


def topk_distillation(
    model, inputs, *, source: str, k: int, temperature: float, cap: float, teacher, parts=None, hidden=()
) -> torch.Tensor:
    """The KD term of a micro-batch: reverse KL over the top-K ids (+ tail), per sample then batch mean.

    ``inputs`` holds the batch tensors with ``kd_mask`` (the distilled positions) and, by ``source``, the
    stored teacher top-K (``kd_topk_ids`` / ``kd_topk_logprobs``) or the hint-augmented prompts
    (``kd_teacher_prompt_ids`` / ``kd_teacher_prompt_mask``). ``teacher`` is the context the teacher forward
    runs in (``teacher_weights``); ``parts`` is ``policy_body_and_head`` and ``hidden`` what
    ``captured_hidden_states`` saw of the loss forward.
    """
    kd_mask = inputs["kd_mask"]
    rows, cols = kd_mask.bool().nonzero(as_tuple=True)  # the N distilled positions
    ids = None if source == "student" else inputs["kd_topk_ids"][rows, cols]
    student, ids = _student_logprobs(model, inputs, parts, hidden, rows, cols, ids, k, temperature)
    if source == "student":
        with torch.no_grad(), teacher:
            target = _teacher_logprobs_on(model, inputs, parts, rows, cols, ids, temperature)
    else:
        target = inputs["kd_topk_logprobs"][rows, cols]
    ones = torch.ones_like(rows)[None]
    per_token = topk_distillation_loss(student[None], target[None], ones, cap=cap)[0]
    per_row = per_token.new_zeros(kd_mask.size(0)).index_add(0, rows, per_token)
    return (per_row / kd_mask.float().sum(-1).clamp(min=1.0)).mean()


def _student_logprobs(model, inputs, parts, hidden, rows, cols, ids, k, temperature):
    """``(log-probs [N, K], ids [N, K])`` of the policy at the distilled positions ``(rows, cols)``: on
    ``ids``, or on its own top-``k`` when ``ids`` is None."""
    prompt_len = inputs["prompt_ids"].size(1)
    input_ids, attention = prompt_and_completion(
        inputs["prompt_ids"], inputs["prompt_mask"], inputs["completion_ids"], inputs["completion_mask"]
    )
    if parts is None:
        logits = model(input_ids=input_ids, attention_mask=attention).logits
        logits = logits[:, prompt_len - 1 : -1][rows, cols] / temperature  # positions predicting completions
        logprobs = torch.log_softmax(logits.float(), dim=-1)
        return logprobs.topk(k, dim=-1) if ids is None else (logprobs.gather(-1, ids), ids)
    body, head = parts
    if len(hidden) == 1 and hidden[0].shape[:2] == input_ids.shape and hidden[0].requires_grad:
        states = hidden[0]
    else:  # the loss forward was not seen (another loss path): run the body once more
        states = body(input_ids=input_ids, attention_mask=attention).last_hidden_state
    picked = states[:, prompt_len - 1 : -1][rows, cols]  # [N, H]
    if ids is None:
        return student_topk(head, picked, k, temperature)
    return topk_logprobs(head, picked, ids, temperature), ids


def _teacher_logprobs_on(model, inputs, parts, rows, cols, ids, temperature) -> torch.Tensor:
    """``log_softmax(teacher logits / T)`` on ``ids`` ``[N, K]`` at the distilled positions.

    The teacher is ``model`` (in the weights the caller chose) on the hint-augmented prompt followed by the
    original completion ids; only the rows that have distilled positions are run.
    """
    used, local = torch.unique(rows, return_inverse=True)
    prompt_len = inputs["kd_teacher_prompt_ids"].size(1)
    input_ids, attention = prompt_and_completion(
        inputs["kd_teacher_prompt_ids"],
        inputs["kd_teacher_prompt_mask"],
        inputs["completion_ids"],
        inputs["completion_mask"],
    )
    input_ids, attention = input_ids[used], attention[used]
    if parts is None:
        logits = model(input_ids=input_ids, attention_mask=attention).logits
        logits = logits[:, prompt_len - 1 : -1][local, cols] / temperature
        return torch.log_softmax(logits.float(), dim=-1).gather(-1, ids)
    body, head = parts
    states = body(input_ids=input_ids, attention_mask=attention).last_hidden_state
    return topk_logprobs(head, states[:, prompt_len - 1 : -1][local, cols], ids, temperature)


def topk_logprobs(head, hidden: torch.Tensor, ids: torch.Tensor, temperature: float) -> torch.Tensor:
    """``log_softmax(head(hidden) / T)`` over the full vocabulary, gathered on ``ids``: ``[N, H] -> [N, K]``."""

    def block(h, i):
        return torch.log_softmax((head(h) / temperature).float(), dim=-1).gather(-1, i)

    return _head_in_chunks(block, head, hidden, ids)


def student_topk(head, hidden: torch.Tensor, k: int, temperature: float):
    """The top-``k`` of ``log_softmax(head(hidden) / T)``: ``(log-probs [N, k], ids [N, k])``."""

    def block(h):
        values, ids = torch.log_softmax((head(h) / temperature).float(), dim=-1).topk(k, dim=-1)
        return values, ids

    return _head_in_chunks(block, head, hidden)


def _head_in_chunks(block, head, hidden: torch.Tensor, *row_args):
    """``block(hidden, *row_args)``, in chunks of positions recomputed in the backward pass when the
    vocabulary-wide logits of all positions would exceed ``KD_LOGITS_ELEMS``."""
    chunk = max(1, KD_LOGITS_ELEMS // head.weight.shape[0])
    if hidden.shape[0] <= chunk:
        return block(hidden, *row_args)
    from torch.utils.checkpoint import checkpoint

    run = partial(checkpoint, block, use_reentrant=False) if torch.is_grad_enabled() else block
    parts = [
        run(hidden[s : s + chunk], *(a[s : s + chunk] for a in row_args))
        for s in range(0, hidden.shape[0], chunk)
    ]
    if isinstance(parts[0], tuple):
        return tuple(torch.cat(column) for column in zip(*parts))
    return torch.cat(parts)
