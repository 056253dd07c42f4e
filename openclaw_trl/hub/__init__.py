"""Take a learned LoRA adapter to the Hugging Face Hub: find it, merge it, describe it, push it.

The trainer leaves a *run dir*: ``openclaw_run.json`` (what was trained, how, on what), the final adapter
at the root (PEFT ``save_pretrained``) and HF Trainer checkpoints ``checkpoint-<step>/``. Everything here
works from that layout, or from a bare adapter dir:

* ``locate``: the adapter dir of a run, its run info, the adapter's config and tensor shapes;
* ``checks``: what a merge refuses (output dir in the way, a base that does not fit or is quantized);
* ``merge``: ``merge_adapter``, a standalone model from base + adapter;
* ``card``: ``build_model_card``, the README.md of the pushed repo;
* ``push``: ``push_to_hub``, the upload.

Heavy libraries are imported inside the functions so that importing this package (and
``openclaw-trl --help``) stays cheap. Errors the user can fix (wrong path, adapter for another base, output
dir in the way) are raised as :class:`UserError` with a message that says what to do; the CLI prints it
and exits non-zero.
"""

from openclaw_trl.hub.card import build_model_card, library_versions
from openclaw_trl.hub.checks import check_adapter_fits, check_output_dir
from openclaw_trl.hub.locate import (
    adapter_base_model,
    load_run_info,
    read_adapter_config,
    resolve_adapter_dir,
)
from openclaw_trl.hub.merge import MergeResult, merge_adapter
from openclaw_trl.hub.push import push_to_hub

__all__ = [
    "MergeResult",
    "adapter_base_model",
    "build_model_card",
    "check_adapter_fits",
    "check_output_dir",
    "library_versions",
    "load_run_info",
    "merge_adapter",
    "push_to_hub",
    "read_adapter_config",
    "resolve_adapter_dir",
]
