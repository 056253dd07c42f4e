"""Online LoRA training on judged live turns: ``OpenClawTrainer`` and the pieces it is built from.

* ``trainer``: ``OpenClawTrainer`` (a TRL ``GRPOTrainer``): batches from the store, advantages, the loss;
* ``batches``: stored samples as padded tensors, the per-process share, the truncated IS weight;
* ``distill``: the top-K distillation term (teacher or student support, chunked LM head);
* ``callbacks``: adapter publishing, sample consumption and the run info written next to the adapter.
"""

from openclaw_trl.trainer.batches import collate_samples, truncated_is_weight
from openclaw_trl.trainer.callbacks import AdapterSnapshot, last_step_metrics
from openclaw_trl.trainer.trainer import OpenClawTrainer

__all__ = [
    "AdapterSnapshot",
    "OpenClawTrainer",
    "collate_samples",
    "last_step_metrics",
    "truncated_is_weight",
]
