"""Per-token log-probs of the completions, with the LM head run on the completion positions only.

TRL's ``GRPOTrainer`` computes them with a fused LM head (``model(..., labels=..., fused_lm_head=True)``) that never
holds the ``[batch, length, vocab]`` logits at once. On CUDA it projects only the labelled positions; on other
devices it projects every position of the sequence, prompt included, and zeroes the prompt's afterwards. An
agent's prompt is 10-30k tokens and its reply a few hundred, so there the head over the prompt (``length x
hidden x vocab`` multiply-adds, forward and backward) costs as much as a third of the whole update.

So the body's output is cut before the head: during the forward a hook keeps only the hidden states at the
positions that predict a completion token (TRL's layout puts every completion in the last ``logits_to_keep``
columns: ``P - 1 .. P + C - 2`` predict the completion ``P .. P + C - 1``), and the fused head gets those
positions with their labels (``shift_labels``: the completion ids, ``-100`` where the attention mask is 0),
on every device. Log-probs, entropies and gradients are those of TRL's path; the forward still goes through
the (possibly DDP-wrapped) model, so gradient synchronisation is unchanged. Hooks registered on the body
before (the top-K distillation's) still see the full hidden states.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch


def transformer_body(model):
    """The transformer stack of the unwrapped policy ``model`` (PEFT or not) that TRL's fused head runs, or
    None when the model has no separate body."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    body = getattr(base, "base_model", base)
    return None if body is base else body


@contextmanager
def last_positions_only(body, keep: int):
    """Inside the block, every forward of ``body`` returns the hidden states of positions ``-keep - 1 .. -2``."""

    def hook(module, args, output):
        if hasattr(output, "last_hidden_state"):
            output.last_hidden_state = output.last_hidden_state[:, -keep - 1 : -1]
            return output
        return (output[0][:, -keep - 1 : -1], *output[1:])

    handle = body.register_forward_hook(hook)
    try:
        yield
    finally:
        handle.remove()


def completion_logps(
    model,
    body,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    logits_to_keep: int,
    batch_size: int | None,
    compute_entropy: bool,
    compute_aux_loss: bool,
    autocast,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """``(log-probs, entropies, MoE aux loss)`` of the last ``logits_to_keep`` tokens of each row, in micro-batches
    of ``batch_size`` rows, as TRL's ``_get_per_token_logps_and_entropies`` returns them. ``model`` is the
    (wrapped) policy with TRL's fused head, ``body`` its ``transformer_body``, ``autocast`` the accelerator's."""
    keep = logits_to_keep
    labels = input_ids[:, -keep:].masked_fill(attention_mask[:, -keep:] == 0, -100)
    batch_size = batch_size or input_ids.size(0)
    extra = {"output_router_logits": True} if compute_aux_loss else {}
    logps, entropies, aux_losses = [], [], []
    for start in range(0, input_ids.size(0), batch_size):
        rows = slice(start, start + batch_size)
        with last_positions_only(body, keep), autocast():
            outputs = model(
                input_ids=input_ids[rows],
                attention_mask=attention_mask[rows],
                shift_labels=labels[rows],
                fused_lm_head=True,
                **extra,
            )
        logps.append(outputs.log_probs)
        if compute_entropy:
            entropies.append(outputs.entropy)
        if compute_aux_loss:
            aux_losses.append(outputs.aux_loss)
    return (
        torch.cat(logps),
        torch.cat(entropies) if compute_entropy else None,
        torch.stack(aux_losses).mean() if compute_aux_loss else None,
    )
