"""An update that runs out of device memory: retried once, then skipped with its reason; training goes on.

When a micro-batch of an update raises the device's out-of-memory error (``torch.OutOfMemoryError``, or a
``RuntimeError`` saying "out of memory") while its batch is built or in its loss forward or backward:

1. what the failed try added to the gradients is dropped (those of the update's earlier micro-batches are
   kept: they are copied before each micro-batch after the first, a copy the size of the trainable weights),
   the allocator's cached memory is given back, and the micro-batch is run again on the same inputs (a batch
   already built is reused, not taken again from the store);
2. if it fails a second time, the whole update is skipped: the gradients of its earlier micro-batches are
   dropped, its later micro-batches run no forward, and the optimizer step finds no gradient, so the adapter
   weights and the optimizer's moments and step counts stay as they were. One log line says so, with the
   error, and ``memory/updates_skipped`` is logged with the update.

A skipped update still takes its step number: the global step and the learning-rate schedule move on by one,
as for a version the guard holds back, and the version published at that step serves the previous weights
under the new number (its lineage row: 0 updates, note ``skipped: ...``; its checkpoint records it as restored
from the previous version). The batch is given up when no update of it trained (the usual one-update
batch, or a batch that could not even be built): its samples stay in the store, kept out of training with the
reason (:meth:`~openclaw_trl.store.queue.SampleQueue.skip`), so a batch too large for the device is not taken
again and again; a batch that some of its updates did train on is marked consumed as usual. Serving goes on
throughout, and the next update takes the next batch.

Several processes train in lockstep (their gradients are reduced together), so one process cannot skip an
update alone: there the error ends the run as any other error does.
"""

from __future__ import annotations

import logging

import torch

from openclaw_trl.engines.out_of_memory import is_out_of_memory

logger = logging.getLogger(__name__)

SKIPPED_NOTE = "skipped:"
"""How the lineage note of a version whose update was skipped begins."""


def _gradients(model) -> dict:
    """A copy of the gradients accumulated so far, by parameter (empty before an update's first backward)."""
    return {p: p.grad.detach().clone() for p in model.parameters() if p.grad is not None}


def first_line(err: BaseException) -> str:
    """``Type: first line of the message`` of an error, for a log line or a reason."""
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}".strip().rstrip(":")


class OutOfMemorySteps:
    """The trainer's handling of an update that runs out of memory (module docstring).

    A mixin of ``OpenClawTrainer`` (a TRL ``GRPOTrainer``): it wraps ``training_step`` (one micro-batch) and
    ``_prepare_inputs`` (so that a retry reuses the batch built for the failed try), and uses the trainer's
    ``ledger``, ``log_metric``, ``publish`` and TRL's micro-step count ``_step``.
    """

    skipped_update: str | None = None  # why the current update was skipped; None while it trains
    updates_skipped: int = 0  # updates skipped in this run
    _prepared_step: int | None = None  # the micro-step whose inputs ``_prepare_inputs`` returned last
    _reuse_inputs: bool = False  # a retry: take the micro-batch from TRL's buffer, do not build it again

    def training_step(self, model, inputs, num_items_in_batch):
        if self.skipped_update is not None:  # an earlier micro-batch of this update ran out of memory
            return self._pass_micro_step()
        before = _gradients(model)  # the earlier micro-batches' (none for an update's first)
        outcome = self._attempt(model, inputs, num_items_in_batch, retry=False)
        if isinstance(outcome, str):
            self._free(model, before)
            outcome = self._attempt(model, inputs, num_items_in_batch, retry=True)
            if isinstance(outcome, str):
                self._free(model, None)
                self._skip(outcome)
                return self._pass_micro_step()
            self.log_metric("memory/steps_retried", 1)
        return outcome

    def _attempt(self, model, inputs, num_items_in_batch, retry: bool) -> torch.Tensor | str:
        """The micro-step's loss, or the out-of-memory error's first line (any other error is raised)."""
        self._reuse_inputs = retry and self._prepared_step == self._step and self._buffered_inputs is not None
        try:
            return super().training_step(model, inputs, num_items_in_batch)
        except Exception as err:
            if not is_out_of_memory(err) or self.accelerator.num_processes > 1:
                raise
            return first_line(err)
        finally:
            self._reuse_inputs = False

    def _prepare_inputs(self, generation_batch):
        if self._reuse_inputs:
            return self._buffered_inputs[self._step % self.args.steps_per_generation]
        inputs = super()._prepare_inputs(generation_batch)
        self._prepared_step = self._step
        return inputs

    def _free(self, model, gradients: dict | None) -> None:
        """Put the gradients back to ``gradients`` (those from before the failed try: nothing of it may reach
        the optimizer; None: no gradient at all) and give the cached memory back."""
        from accelerate.utils.memory import clear_device_cache

        gradients = gradients or {}
        for param in model.parameters():
            param.grad = gradients.get(param)
        clear_device_cache(garbage_collection=True)  # rare: worth a collection (tensors held in cycles)

    def _pass_micro_step(self) -> torch.Tensor:
        """A micro-step of a skipped update: no forward, no gradient; TRL's micro-step count moves on."""
        self._step += 1
        return torch.zeros((), device=self.args.device)

    def _skip(self, error: str) -> None:
        update = self.state.global_step + 1
        built = self._prepared_step == self._step
        self.skipped_update = f"out of memory twice in update {update} ({error})"
        self.updates_skipped += 1
        self.ledger.skip(self.skipped_update, whole_batch=not built)
        if not built:  # the batch was never built: it is given up, the next update takes a new one
            self._buffered_inputs = None
            self._next_batch = None
        self.log_metric("memory/updates_skipped", 1)
        logger.warning(
            "update %d skipped: the device ran out of memory twice (%s); the weights stay as they were, serving "
            "and learning go on with the next batch",
            update,
            error,
        )

    def publish_skipped(self) -> None:
        """After a skipped update's (empty) optimizer step: its step's version serves the unchanged weights,
        and its checkpoint records them as the previous version's."""
        step = self.state.global_step
        self.publish(parent=step - 1, updates=0, note=f"{SKIPPED_NOTE} {self.skipped_update}")
        self._held_from = step - 1

    def start_update(self) -> None:
        """A new update begins: the previous one, skipped or not, is stepped, published and checkpointed (the
        version its checkpoint holds was read then)."""
        self.skipped_update = None
        self._held_from = None
