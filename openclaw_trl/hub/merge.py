"""``merge_adapter``: a LoRA adapter folded into its base, saved as a standalone model."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from openclaw_trl.errors import UserError
from openclaw_trl.fsutil import RUN_INFO_FILE, staged_directory
from openclaw_trl.hub.checks import (
    base_mismatch,
    check_adapter_fits,
    check_not_prequantized,
    check_output_dir,
)
from openclaw_trl.hub.locate import ADAPTER_CONFIG, adapter_base_model, load_run_info, resolve_adapter_dir


@dataclass
class MergeResult:
    """What ``merge_adapter`` did (printed by the CLI, asserted by tests)."""

    out: Path
    adapter_dir: Path
    base_model: str
    dtype: str
    trained_in_4bit: bool
    notes: list[str] = field(default_factory=list)


def merge_adapter(
    adapter: str | os.PathLike,
    out: str | os.PathLike,
    *,
    base: str | None = None,
    force: bool = False,
    dtype: str = "auto",
) -> MergeResult:
    """Merge a LoRA adapter into its base model and save a standalone model to ``out``.

    The base is always loaded unquantized, so an adapter trained on a 4-bit base (QLoRA) merges into the
    full-precision weights it approximates. ``dtype="auto"`` keeps the dtype the base is stored in. The
    result is written to a temporary sibling directory and renamed into place, so a failed merge leaves
    no half-written model and ``--force`` only replaces ``out`` once the new model is complete.
    """
    adapter_dir = resolve_adapter_dir(adapter)
    out = check_output_dir(out, force)
    run_info = load_run_info(adapter_dir) or {}
    trained_on = adapter_base_model(adapter_dir, run_info)
    base = base or trained_on
    _check_merge(adapter_dir, out, base, trained_on)
    torch_dtype = _resolve_dtype(dtype, base)
    merged = _merged_model(adapter_dir, base, trained_on, torch_dtype)
    tokenizer = _load_tokenizer(adapter_dir, base)
    dtype_name = str(torch_dtype).removeprefix("torch.")
    with staged_directory(out, "merging") as staging:
        merged.save_pretrained(staging, safe_serialization=True)
        tokenizer.save_pretrained(staging)
        info = dict(run_info, merged_from=str(adapter_dir), merged_into=base, merge_dtype=dtype_name)
        info.setdefault("base_model", trained_on or base)
        (staging / RUN_INFO_FILE).write_text(json.dumps(info, indent=2, default=str) + "\n")
    notes = []
    if trained_on and base != trained_on:
        notes.append(
            f"--base {base} is not the base the adapter names ({trained_on}); the shapes fit, but only the "
            "same weights (a copy of that model) give the model that was trained"
        )
    return MergeResult(
        out=out,
        adapter_dir=adapter_dir,
        base_model=base,
        dtype=dtype_name,
        trained_in_4bit=bool(run_info.get("load_in_4bit")),
        notes=notes,
    )


def _check_merge(adapter_dir: Path, out: Path, base: str | None, trained_on: str | None) -> None:
    """Refuse a merge without a base, onto a quantized or ill-fitting base, or over its own inputs."""
    if adapter_dir.resolve().is_relative_to(out.resolve()):
        raise UserError(
            f"--out {out} would overwrite the adapter in {adapter_dir}; write the merged model elsewhere"
        )
    if not base:
        raise UserError(f"{adapter_dir / ADAPTER_CONFIG} names no base model; pass it with --base")
    try:
        check_not_prequantized(base)
    except OSError as err:
        raise UserError(f"cannot load the base model {base!r}: {err}") from err
    if Path(base).is_dir() and Path(base).resolve().is_relative_to(out.resolve()):
        raise UserError(
            f"--out {out} would overwrite the base model in {base}; write the merged model elsewhere"
        )
    check_adapter_fits(adapter_dir, base, trained_on)


def _merged_model(adapter_dir: Path, base: str, trained_on: str | None, torch_dtype):
    """The base in ``torch_dtype`` with the adapter merged into its weights (a plain Transformers model)."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch_dtype)
    try:
        model = PeftModel.from_pretrained(model, str(adapter_dir), is_trainable=False)
    except (RuntimeError, ValueError, KeyError) as err:
        raise base_mismatch(adapter_dir, base, trained_on, str(err).splitlines()[0]) from err
    return model.merge_and_unload()


def _resolve_dtype(dtype: str, base: str):
    import torch
    from transformers import AutoConfig

    if dtype == "auto":
        value = getattr(AutoConfig.from_pretrained(base), "dtype", None) or torch.float32
        return getattr(torch, value) if isinstance(value, str) else value
    if not isinstance(getattr(torch, dtype, None), torch.dtype):
        raise UserError(f"unknown --dtype {dtype!r}; use auto, float32, bfloat16 or float16")
    return getattr(torch, dtype)


def _load_tokenizer(adapter_dir: Path, base: str):
    """The tokenizer the run used (saved with checkpoints), else the base's; never without a chat template."""
    from transformers import AutoTokenizer

    source = adapter_dir if (adapter_dir / "tokenizer_config.json").is_file() else base
    tokenizer = AutoTokenizer.from_pretrained(source)
    if not getattr(tokenizer, "chat_template", None) and source != base:
        tokenizer.chat_template = AutoTokenizer.from_pretrained(base).chat_template
    return tokenizer
