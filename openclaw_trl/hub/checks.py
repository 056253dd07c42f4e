"""Checks made before a merge writes anything: the output dir is free, the base fits, the base is not quantized.

Each failure is a :class:`UserError` that names the fix (another ``--out``, ``--force``, the right ``--base``).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from openclaw_trl.errors import UserError
from openclaw_trl.hub.locate import adapter_shapes

# ``<module>.<lora tensor>`` in a PEFT state-dict key (after the ``base_model.model.`` prefix).
_LORA_TENSOR = re.compile(r"(.+?)\.(lora_A|lora_B|lora_embedding_A|lora_embedding_B|lora_magnitude_vector)\b")
# PEFT wrappers: the wrapped layer's own weights are saved under .base_layer / .modules_to_save.<name>
_WRAPPER_SUFFIX = re.compile(r"\.(base_layer|original_module|modules_to_save(\.[^.]+)?)$")


def check_output_dir(out: str | os.PathLike, force: bool = False) -> Path:
    """Refuse to write into a non-empty ``out`` unless ``force``: a merge must never mix two models' files."""
    out = Path(out).expanduser()
    if out.exists() and not out.is_dir():
        raise UserError(f"output path {out} exists and is a file; choose a directory")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise UserError(
            f"output directory {out} is not empty; choose another --out or pass --force to replace it"
        )
    return out


def base_mismatch(adapter_dir: Path, base: str, trained_on: str | None, detail: str) -> UserError:
    """The error for an adapter that does not fit ``base``, naming the base it was trained on."""
    expected = f"it was trained on {trained_on!r}" if trained_on else "its adapter_config.json names no base"
    return UserError(
        f"the adapter in {adapter_dir} does not fit the base model {base!r}: {detail}. "
        f"This adapter belongs to a different base: {expected}. "
        "Pass that model (or a local copy of it) with --base."
    )


def check_adapter_fits(adapter_dir: str | os.PathLike, base: str, trained_on: str | None = None) -> None:
    """Check that every tensor of the adapter has a module of the right shape in ``base``.

    PEFT either fails deep inside ``load_state_dict`` or, for missing modules, only warns and merges
    nothing; both are bad ways to learn that you picked the wrong base. The check builds the base on the
    meta device (shapes only, no weights) so it costs nothing even for a large model.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    adapter_dir = Path(adapter_dir)
    config = AutoConfig.from_pretrained(base)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    modules = dict(model.named_modules())
    vocab = getattr(config.get_text_config(), "vocab_size", None)
    for key, shape in adapter_shapes(adapter_dir).items():
        problem = _tensor_mismatch(modules, key.removeprefix("base_model.model."), shape, vocab)
        if problem:
            raise base_mismatch(adapter_dir, base, trained_on, problem)
    problem = _tokenizer_mismatch(adapter_dir, vocab)
    if problem:
        raise base_mismatch(adapter_dir, base, trained_on, problem)


def _tensor_mismatch(modules: dict, name: str, shape: tuple[int, ...], vocab: int | None) -> str | None:
    """Why the adapter tensor ``name`` of ``shape`` does not fit the base's ``modules``, or None if it does."""
    import torch

    match = _LORA_TENSOR.match(name)
    module_name = _WRAPPER_SUFFIX.sub("", match.group(1) if match else name.rsplit(".", 1)[0])
    module = modules.get(module_name)
    if module is None:
        return f"the base has no module {module_name!r}"
    kind = match.group(2) if match else None
    linear = isinstance(module, torch.nn.Linear)
    embedding = isinstance(module, torch.nn.Embedding)
    if kind == "lora_A" and linear and shape[-1] != module.in_features:
        return f"{module_name} takes {module.in_features} inputs, the adapter expects {shape[-1]}"
    if kind == "lora_B" and linear and shape[0] != module.out_features:
        return f"{module_name} has {module.out_features} outputs, the adapter expects {shape[0]}"
    if kind == "lora_embedding_A" and embedding and shape[-1] != module.num_embeddings:
        return f"vocabulary size {module.num_embeddings} in the base, {shape[-1]} in the adapter"
    if kind == "lora_embedding_B" and embedding and shape[0] != module.embedding_dim:
        return f"{module_name} has dimension {module.embedding_dim}, the adapter expects {shape[0]}"
    if kind is None:  # a whole saved weight (modules_to_save, trainable tokens)
        param = getattr(module, name.rsplit(".", 1)[1], None)
        if param is None or tuple(param.shape) == shape:
            return None
        if vocab is not None and param.shape[0] == vocab:
            return f"vocabulary size {vocab} in the base, {shape[0]} in the adapter ({module_name})"
        return f"{name} has shape {tuple(param.shape)} in the base, {shape} in the adapter"
    return None


def _tokenizer_mismatch(adapter_dir: Path, vocab: int | None) -> str | None:
    """Why the tokenizer saved with the adapter does not fit a vocabulary of ``vocab``, or None."""
    if vocab is None or not (adapter_dir / "tokenizer.json").is_file():
        return None
    from transformers import AutoTokenizer

    n_tokens = len(AutoTokenizer.from_pretrained(adapter_dir))
    if n_tokens > vocab:
        return f"the adapter's tokenizer has {n_tokens} tokens, the base's vocabulary {vocab}"
    return None


def check_not_prequantized(base: str) -> None:
    """A base stored quantized (e.g. a ``-bnb-4bit`` repo) cannot give a full-precision merge."""
    from transformers import AutoConfig

    quant = getattr(AutoConfig.from_pretrained(base), "quantization_config", None)
    if quant:
        method = (
            quant.get("quant_method", "?") if isinstance(quant, dict) else getattr(quant, "quant_method", "?")
        )
        raise UserError(
            f"the base model {base!r} is stored quantized ({method}); merging into quantized weights would "
            "round the LoRA update away. Pass the full-precision model it was quantized from with --base "
            "(a 4-bit-trained adapter is an ordinary LoRA adapter and merges into it)."
        )
