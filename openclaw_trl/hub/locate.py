"""Finding what a training run left: its adapter directory, its run info, the adapter's config and tensors.

A *run dir* holds ``openclaw_run.json`` (what was trained, how, on what), the final adapter at the root
(PEFT ``save_pretrained``) and HF Trainer checkpoints ``checkpoint-<step>/``; a bare adapter dir holds only
the adapter files.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from openclaw_trl.errors import UserError
from openclaw_trl.fsutil import RUN_INFO_FILE
from openclaw_trl.resume import checkpoints

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")


def resolve_adapter_dir(path: str | os.PathLike) -> Path:
    """The directory holding ``adapter_config.json`` for ``path``.

    ``path`` may be an adapter dir itself, or a run dir: then its root adapter (the final one) wins, else the
    latest ``checkpoint-<step>`` that holds an adapter (a run that was stopped before it finished).
    """
    path = Path(path).expanduser()
    if not path.exists():
        raise UserError(f"adapter not found: {path} does not exist (pass a run dir or a checkpoint dir)")
    if not path.is_dir():
        raise UserError(
            f"adapter not found: {path} is a file; pass the directory that holds {ADAPTER_CONFIG}"
        )
    if (path / ADAPTER_CONFIG).is_file():
        return path
    with_adapter = [folder for _, folder in checkpoints(path) if (folder / ADAPTER_CONFIG).is_file()]
    if with_adapter:
        return with_adapter[-1]
    raise UserError(
        f"no LoRA adapter in {path}: it has no {ADAPTER_CONFIG} and no checkpoint-<step>/ with one. "
        "Pass the output_dir of an openclaw-trl training run, one of its checkpoint-<step> dirs, "
        "or a directory written by PEFT's save_pretrained."
    )


def load_run_info(folder: str | os.PathLike) -> dict[str, Any] | None:
    """``openclaw_run.json`` of the run that produced ``folder`` (looked up in it, then in its parent)."""
    folder = Path(folder)
    for candidate in (folder / RUN_INFO_FILE, folder.parent / RUN_INFO_FILE):
        if candidate.is_file():
            try:
                return json.loads(candidate.read_text())
            except json.JSONDecodeError as err:
                raise UserError(f"{candidate} is not valid JSON ({err}); fix or delete it") from err
    return None


def read_adapter_config(adapter_dir: str | os.PathLike) -> dict[str, Any]:
    adapter_dir = Path(adapter_dir)
    try:
        return json.loads((adapter_dir / ADAPTER_CONFIG).read_text())
    except FileNotFoundError as err:
        raise UserError(f"no {ADAPTER_CONFIG} in {adapter_dir}") from err
    except json.JSONDecodeError as err:
        raise UserError(f"{adapter_dir / ADAPTER_CONFIG} is not valid JSON ({err})") from err


def adapter_base_model(adapter_dir: str | os.PathLike, run_info: dict | None = None) -> str | None:
    """The base model an adapter was trained on: ``adapter_config.json`` first, then the run metadata."""
    name = read_adapter_config(adapter_dir).get("base_model_name_or_path")
    return name or (run_info or {}).get("base_model")


def adapter_shapes(adapter_dir: Path) -> dict[str, tuple[int, ...]]:
    """Tensor name -> shape of the saved adapter, read from the safetensors header (no weights loaded)."""
    weights = _adapter_weights_file(adapter_dir)
    if weights.suffix == ".safetensors":
        from safetensors import safe_open

        with safe_open(str(weights), framework="pt") as f:
            return {key: tuple(f.get_slice(key).get_shape()) for key in f.keys()}  # noqa: SIM118
    import torch

    return {
        key: tuple(t.shape) for key, t in torch.load(weights, map_location="meta", weights_only=True).items()
    }


def _adapter_weights_file(adapter_dir: Path) -> Path:
    for name in ADAPTER_WEIGHTS:
        if (adapter_dir / name).is_file():
            return adapter_dir / name
    raise UserError(
        f"{adapter_dir} has {ADAPTER_CONFIG} but no adapter weights ({' or '.join(ADAPTER_WEIGHTS)})"
    )
