"""LoRA adapter files and vLLM's LoRA rules (rank, target modules): one place for the engines and the Hub tools.

An adapter directory has PEFT's ``save_pretrained`` layout: ``adapter_model.safetensors`` (or the older
``adapter_model.bin``) and ``adapter_config.json``. The HF engine publishes state dicts in memory; the vLLM
engines load adapters from such a directory, so a published state dict is written there first.
"""

from __future__ import annotations

from pathlib import Path

VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""The values vLLM accepts as ``max_lora_rank``."""


def vllm_max_lora_rank(rank: int | None) -> int:
    """The smallest ``max_lora_rank`` vLLM accepts that holds an adapter of rank ``rank`` (16 when unknown)."""
    if rank is None:
        return 16
    return next((r for r in VLLM_LORA_RANKS if r >= rank), rank)


def load_adapter_dir(path: str | Path):
    """Read a PEFT adapter directory (``save_pretrained`` layout): returns ``(state_dict, LoraConfig)``."""
    from peft import LoraConfig

    path = Path(path)
    if (path / "adapter_model.safetensors").exists():
        from safetensors.torch import load_file

        state_dict = load_file(str(path / "adapter_model.safetensors"))
    elif (path / "adapter_model.bin").exists():
        import torch

        state_dict = torch.load(path / "adapter_model.bin", map_location="cpu", weights_only=True)
    else:
        raise FileNotFoundError(f"{path} holds no adapter_model.safetensors / adapter_model.bin")
    config = None
    if (path / "adapter_config.json").exists():
        config = LoraConfig.from_pretrained(str(path))
    return state_dict, config


def adapter_state_dict_to_dir(state_dict: dict, lora_config, path: str | Path) -> Path:
    """Write a PEFT state dict + config in the ``save_pretrained`` layout (vLLM loads adapters from disk)."""
    from safetensors.torch import save_file

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in state_dict.items()}
    save_file(tensors, str(path / "adapter_model.safetensors"))
    lora_config.save_pretrained(str(path))
    return path


# vLLM fuses q/k/v and gate/up projections; LoRA targets are given by its (fused) module suffixes.
_FUSED = {"q_proj": "qkv_proj", "k_proj": "qkv_proj", "v_proj": "qkv_proj", "gate_proj": "gate_up_proj"}
_FUSED["up_proj"] = "gate_up_proj"
_DEFAULT_TARGETS = ["qkv_proj", "o_proj", "gate_up_proj", "down_proj"]


def vllm_lora_targets(lora_config) -> list[str]:
    """vLLM target-module suffixes for a PEFT ``LoraConfig`` (fused names; defaults for regex / "all-linear")."""
    targets = getattr(lora_config, "target_modules", None)
    if not targets or isinstance(targets, str):
        return list(_DEFAULT_TARGETS)
    return sorted({_FUSED.get(t, t) for t in targets})
