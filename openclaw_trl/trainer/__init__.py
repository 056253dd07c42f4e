"""Online LoRA training on judged live turns: ``OpenClawTrainer`` and the pieces it is built from.

* ``trainer``: ``OpenClawTrainer`` (a TRL ``GRPOTrainer``): batches from the store, advantages, the loss;
* ``intake``: between updates, the next batch from the store or a rollback request;
* ``ledger``: the bookkeeping of the batch being trained (updates left, sample ids, totals);
* ``batches``: stored samples as padded tensors, the per-process share, the truncated IS weight;
* ``advantages``: the per-token advantages, and those completed on the loss forward (``Deferred``);
* ``loss``: the loss forward run before TRL's loss, KL(old || new), the KD share;
* ``logps``: per-token log-probs with the LM head on the completion positions only;
* ``distill``: the top-K distillation term (teacher or student support, chunked LM head);
* ``versions``: publish, checkpoints, rollback and resume (the trainer's ``TrainerVersions`` methods);
* ``control``: pause and rollback requests from the server threads (``LearningControl``);
* ``out_of_memory``: an update that runs out of device memory is retried once, then skipped with its reason;
* ``callbacks``: adapter publishing, sample consumption and the run info written next to the adapter;
* ``metrics`` / ``reporting``: the numbers logged per batch; one console line per update, every logged
  metrics dict in ``<output_dir>/metrics.jsonl``;
* ``progress``: what training has logged so far, pushed for readers on other threads (``TrainingProgress``).
"""

from openclaw_trl.trainer.batches import collate_samples, truncated_is_weight
from openclaw_trl.trainer.callbacks import AdapterSnapshot, last_step_metrics

__all__ = [
    "AdapterSnapshot",
    "OpenClawTrainer",
    "collate_samples",
    "last_step_metrics",
    "truncated_is_weight",
]


def __getattr__(name: str):
    """``OpenClawTrainer`` is imported on first use, so the light parts (``control``, ``batches``) load without
    TRL and ``datasets`` (the vLLM environment serves and tests without them)."""
    if name == "OpenClawTrainer":
        from openclaw_trl.trainer.trainer import OpenClawTrainer

        return OpenClawTrainer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
