"""Take a learned LoRA adapter to the Hugging Face Hub: find it, merge it, describe it, push it.

The trainer leaves a *run dir*: ``openclaw_run.json`` (what was trained, how, on what), the final adapter
at the root (PEFT ``save_pretrained``) and HF Trainer checkpoints ``checkpoint-<step>/``. Everything here
works from that layout, or from a bare adapter dir. Heavy libraries are imported inside the functions so
that importing this module (and ``openclaw-trl --help``) stays cheap.

Errors the user can fix (wrong path, adapter for another base, output dir in the way) are raised as
:class:`UserError` with a message that says what to do; the CLI prints it and exits non-zero.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from openclaw_trl.engines.adapters import vllm_max_lora_rank
from openclaw_trl.errors import UserError
from openclaw_trl.fsutil import RUN_INFO_FILE, staged_directory

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")
CARD_TAGS = ["openclaw-trl", "trl", "lora", "online-rl", "on-policy-distillation", "text-generation"]

# Files of an HF Trainer checkpoint that belong to resuming, not to the published adapter.
TRAINING_STATE_PATTERNS = [
    "checkpoint-*",
    "checkpoint-*/**",
    "optimizer.pt",
    "scheduler.pt",
    "scaler.pt",
    "rng_state*.pth",
    "trainer_state.json",
    "training_args.bin",
    "runs/**",
    "*.lock",
]

METHOD_DESCRIPTIONS = {
    "rl": "Binary RL: a judge reads each reply together with what the user said next and votes +1/-1; "
    "the majority reward is broadcast to every token of the reply (PPO clipped surrogate).",
    "opd": "Hindsight on-policy distillation: a judge turns the user's next message into a hint; the same "
    "base model, with the hint appended to the prompt, acts as a teacher on the reply the policy actually "
    "sampled, and the per-token advantage is the teacher/student log-prob gap.",
    "combine": "Combine: the sum of the binary-RL reward and the hindsight on-policy distillation advantage "
    "(the OPD term only where a hint was accepted).",
}


# --------------------------------------------------------------------------------------------- locating


def _checkpoint_step(path: Path) -> int:
    match = re.fullmatch(r"checkpoint-(\d+)", path.name)
    return int(match.group(1)) if match else -1


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
    checkpoints = sorted(
        (p for p in path.glob("checkpoint-*") if _checkpoint_step(p) >= 0 and (p / ADAPTER_CONFIG).is_file()),
        key=_checkpoint_step,
    )
    if checkpoints:
        return checkpoints[-1]
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


def _adapter_weights_file(adapter_dir: Path) -> Path:
    for name in ADAPTER_WEIGHTS:
        if (adapter_dir / name).is_file():
            return adapter_dir / name
    raise UserError(
        f"{adapter_dir} has {ADAPTER_CONFIG} but no adapter weights ({' or '.join(ADAPTER_WEIGHTS)})"
    )


def _adapter_shapes(adapter_dir: Path) -> dict[str, tuple[int, ...]]:
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


# --------------------------------------------------------------------------------------------- checking


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


def _base_mismatch(adapter_dir: Path, base: str, trained_on: str | None, detail: str) -> UserError:
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

    for key, shape in _adapter_shapes(adapter_dir).items():
        name = key.removeprefix("base_model.model.")
        match = re.match(
            r"(.+?)\.(lora_A|lora_B|lora_embedding_A|lora_embedding_B|lora_magnitude_vector)\b", name
        )
        module_name = match.group(1) if match else name.rsplit(".", 1)[0]
        # PEFT wrappers: the wrapped layer's own weights are saved under .base_layer / .modules_to_save.<name>
        module_name = re.sub(r"\.(base_layer|original_module|modules_to_save(\.[^.]+)?)$", "", module_name)
        module = modules.get(module_name)
        if module is None:
            raise _base_mismatch(adapter_dir, base, trained_on, f"the base has no module {module_name!r}")
        kind = match.group(2) if match else None
        if kind == "lora_A" and isinstance(module, torch.nn.Linear) and shape[-1] != module.in_features:
            got = f"{module_name} takes {module.in_features} inputs, the adapter expects {shape[-1]}"
        elif kind == "lora_B" and isinstance(module, torch.nn.Linear) and shape[0] != module.out_features:
            got = f"{module_name} has {module.out_features} outputs, the adapter expects {shape[0]}"
        elif (
            kind == "lora_embedding_A"
            and isinstance(module, torch.nn.Embedding)
            and shape[-1] != module.num_embeddings
        ):
            got = f"vocabulary size {module.num_embeddings} in the base, {shape[-1]} in the adapter"
        elif (
            kind == "lora_embedding_B"
            and isinstance(module, torch.nn.Embedding)
            and shape[0] != module.embedding_dim
        ):
            got = f"{module_name} has dimension {module.embedding_dim}, the adapter expects {shape[0]}"
        elif kind is None:
            param = getattr(module, name.rsplit(".", 1)[1], None)
            if param is None or tuple(param.shape) == shape:
                continue
            is_vocab = vocab is not None and param.shape[0] == vocab
            got = (
                f"vocabulary size {vocab} in the base, {shape[0]} in the adapter ({module_name})"
                if is_vocab
                else f"{name} has shape {tuple(param.shape)} in the base, {shape} in the adapter"
            )
        else:
            continue
        raise _base_mismatch(adapter_dir, base, trained_on, got)

    tokenizer_file = adapter_dir / "tokenizer.json"
    if vocab is not None and tokenizer_file.is_file():
        from transformers import AutoTokenizer

        n_tokens = len(AutoTokenizer.from_pretrained(adapter_dir))
        if n_tokens > vocab:
            raise _base_mismatch(
                adapter_dir,
                base,
                trained_on,
                f"the adapter's tokenizer has {n_tokens} tokens, the base's vocabulary {vocab}",
            )


def _check_not_prequantized(base: str) -> None:
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


# --------------------------------------------------------------------------------------------- merging


@dataclass
class MergeResult:
    """What ``merge_adapter`` did (printed by the CLI, asserted by tests)."""

    out: Path
    adapter_dir: Path
    base_model: str
    dtype: str
    trained_in_4bit: bool
    notes: list[str] = field(default_factory=list)


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
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    adapter_dir = resolve_adapter_dir(adapter)
    out = check_output_dir(out, force)
    if adapter_dir.resolve().is_relative_to(out.resolve()):
        raise UserError(
            f"--out {out} would overwrite the adapter in {adapter_dir}; write the merged model elsewhere"
        )
    run_info = load_run_info(adapter_dir) or {}
    trained_on = adapter_base_model(adapter_dir, run_info)
    base = base or trained_on
    if not base:
        raise UserError(f"{adapter_dir / ADAPTER_CONFIG} names no base model; pass it with --base")
    try:
        _check_not_prequantized(base)
    except OSError as err:
        raise UserError(f"cannot load the base model {base!r}: {err}") from err
    if Path(base).is_dir() and Path(base).resolve().is_relative_to(out.resolve()):
        raise UserError(
            f"--out {out} would overwrite the base model in {base}; write the merged model elsewhere"
        )
    check_adapter_fits(adapter_dir, base, trained_on)

    torch_dtype = _resolve_dtype(dtype, base)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch_dtype)
    try:
        model = PeftModel.from_pretrained(model, str(adapter_dir), is_trainable=False)
    except (RuntimeError, ValueError, KeyError) as err:
        raise _base_mismatch(adapter_dir, base, trained_on, str(err).splitlines()[0]) from err
    merged = model.merge_and_unload()
    tokenizer = _load_tokenizer(adapter_dir, base)

    with staged_directory(out, "merging") as staging:
        merged.save_pretrained(staging, safe_serialization=True)
        tokenizer.save_pretrained(staging)
        info = dict(run_info)
        info.update(
            merged_from=str(adapter_dir),
            merged_into=base,
            merge_dtype=str(torch_dtype).removeprefix("torch."),
        )
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
        dtype=str(torch_dtype).removeprefix("torch."),
        trained_in_4bit=bool(run_info.get("load_in_4bit")),
        notes=notes,
    )


# --------------------------------------------------------------------------------------------- model card

# What an adapter repo needs; an allow-list, because a run dir may also hold the conversation store
# (SQLite, private chats included), logs and optimizer states, none of which belong on the Hub.
ADAPTER_FILES = [
    "adapter_config.json",
    "adapter_model.safetensors",
    "adapter_model.bin",
    "README.md",
    RUN_INFO_FILE,
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template.jinja",
    "chat_template.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
]
MERGED_IGNORE = TRAINING_STATE_PATTERNS + ["*.sqlite", "*.sqlite-*", "*.db", "*.db-*", ".*", ".*/**"]


def library_versions() -> dict[str, str]:
    """Installed versions of the libraries a reader needs to reproduce or load the model."""
    from importlib.metadata import PackageNotFoundError, version

    versions = {}
    for name in ("openclaw-trl", "trl", "transformers", "peft", "torch", "accelerate", "vllm"):
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            continue
    return versions


def _is_hub_id(name: str | None) -> bool:
    """Does ``name`` look like a Hub repo id (``owner/name``) rather than a local path?"""
    return bool(name) and re.fullmatch(r"[\w.-]+/[\w.-]+", name) is not None and not Path(name).exists()


def _usage(kind: str, repo_id: str, base: str, lora_rank: int | None) -> str:
    chat = (
        'messages = [{"role": "user", "content": "Hello! What can you do?"}]\n'
        "inputs = tokenizer.apply_chat_template(\n"
        '    messages, add_generation_prompt=True, return_dict=True, return_tensors="pt"\n'
        ").to(model.device)\n"
        "output = model.generate(**inputs, max_new_tokens=256)\n"
        'print(tokenizer.decode(output[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True))'
    )
    if kind == "merged":
        return f"""### Transformers

```python
from transformers import AutoModelForCausalLM, AutoTokenizer

model = AutoModelForCausalLM.from_pretrained("{repo_id}", dtype="auto", device_map="auto")
tokenizer = AutoTokenizer.from_pretrained("{repo_id}")
{chat}
```

### vLLM

```bash
vllm serve {repo_id}   # OpenAI-compatible API on http://localhost:8000/v1
```

```python
from vllm import LLM, SamplingParams

llm = LLM(model="{repo_id}")
outputs = llm.chat([{{"role": "user", "content": "Hello!"}}], SamplingParams(max_tokens=256))
print(outputs[0].outputs[0].text)
```
"""
    name = repo_id.split("/")[-1]
    rank = vllm_max_lora_rank(lora_rank)
    return f"""### Transformers

With `peft` installed, Transformers loads the base model and applies the adapter in one call:

```python
from transformers import AutoModelForCausalLM, AutoTokenizer

model = AutoModelForCausalLM.from_pretrained("{repo_id}", dtype="auto", device_map="auto")
tokenizer = AutoTokenizer.from_pretrained("{base}")
{chat}
```

### PEFT

```python
from peft import PeftModel
from transformers import AutoModelForCausalLM

base = AutoModelForCausalLM.from_pretrained("{base}", dtype="auto", device_map="auto")
model = PeftModel.from_pretrained(base, "{repo_id}")
model = model.merge_and_unload()  # optional: a plain Transformers model without the LoRA indirection
```

or, from a local copy, `openclaw-trl merge --adapter <dir> --out merged/` writes a standalone model.

### vLLM

Serve the base model with the adapter as a LoRA module (the request's `model` field selects it):

```bash
vllm serve {base} --enable-lora --max-lora-rank {rank} --lora-modules {name}={repo_id}
```

```python
from huggingface_hub import snapshot_download
from vllm import LLM, SamplingParams
from vllm.lora.request import LoRARequest

llm = LLM(model="{base}", enable_lora=True, max_lora_rank={rank})
adapter = LoRARequest("{name}", 1, snapshot_download("{repo_id}"))
messages = [{{"role": "user", "content": "Hello!"}}]
outputs = llm.chat(messages, SamplingParams(max_tokens=256), lora_request=adapter)
print(outputs[0].outputs[0].text)
```
"""


def _table(rows: dict[str, Any], header: tuple[str, str]) -> str:
    lines = [f"| {header[0]} | {header[1]} |", "| --- | --- |"]
    for key, value in rows.items():
        if isinstance(value, float):
            value = f"{value:.4g}"
        lines.append(f"| {key} | {value} |")
    return "\n".join(lines)


def build_model_card(
    *,
    kind: str,
    repo_id: str,
    base_model: str | None,
    run_info: dict[str, Any] | None = None,
    lora_rank: int | None = None,
):
    """The README.md of a pushed adapter (``kind="adapter"``) or merged model (``kind="merged"``).

    The YAML header (via ``ModelCardData``) makes the repo show up under its base model and the
    ``openclaw-trl`` tag on the Hub; the body records what a reader needs to trust and reuse the model:
    the method, the recipe verbatim, how much feedback it learned from, its last metrics and the versions.
    """
    from huggingface_hub import ModelCard, ModelCardData

    if kind not in ("adapter", "merged"):
        raise ValueError(f"kind must be 'adapter' or 'merged', not {kind!r}")
    info = dict(run_info or {})
    base = base_model or info.get("base_model") or "<base model>"
    method = str(info.get("method") or "unknown")
    tags = list(CARD_TAGS) + ([method] if method in METHOD_DESCRIPTIONS else [])
    if info.get("load_in_4bit"):
        tags.append("qlora")
    if kind == "merged":
        tags.append("merged-lora")
    data = ModelCardData(
        base_model=base if _is_hub_id(base) else None,
        library_name="peft" if kind == "adapter" else "transformers",
        pipeline_tag="text-generation",
        tags=tags,
        model_name=repo_id.split("/")[-1],
    )
    if _is_hub_id(base):
        data.base_model_relation = "adapter" if kind == "adapter" else "finetune"

    base_link = f"[{base}](https://huggingface.co/{base})" if _is_hub_id(base) else f"`{base}`"
    what = "A LoRA adapter for" if kind == "adapter" else "A standalone model: the LoRA adapter merged into"
    facts = {
        "Base model": base_link,
        "Method": f"`{method}`"
        + (f" — {METHOD_DESCRIPTIONS[method]}" if method in METHOD_DESCRIPTIONS else ""),
        "Optimizer updates": info.get("num_updates", "n/a"),
        "Conversation turns used": info.get("turns_used", "n/a"),
        "Training samples used": info.get("samples_used", "n/a"),
        "Base loaded in 4-bit during training (QLoRA)": "yes" if info.get("load_in_4bit") else "no",
    }
    if lora_rank:
        facts["LoRA rank"] = lora_rank
    if kind == "merged":
        facts["Merged in"] = info.get("merge_dtype", "n/a") + (
            " (full precision, from the unquantized base)" if info.get("load_in_4bit") else ""
        )

    metrics = info.get("final_metrics") or {}
    recipe = str(info.get("recipe_yaml") or "").strip()
    versions = info.get("library_versions") or {}
    versions_note = "at training time" if versions else "installed when this card was written"
    versions = versions or library_versions()

    sections = [
        f"# {repo_id.split('/')[-1]}",
        f"{what} {base_link}, trained with openclaw-trl by talking to it: "
        "each reply the user sent became the training signal for the assistant turn before it "
        "(online LoRA RL / hindsight on-policy distillation on "
        "[TRL](https://github.com/huggingface/trl) and PEFT).",
        "## Training",
        "\n".join(f"- **{key}:** {value}" for key, value in facts.items()),
        "### Final metrics",
        _table(metrics, ("metric", "value")) if metrics else "No metrics were recorded.",
        "### Recipe",
        f"```yaml\n{recipe}\n```" if recipe else "The recipe was not recorded with this run.",
        f"### Library versions ({versions_note})",
        _table(versions, ("library", "version")),
        "## Usage",
        _usage(kind, repo_id, base, lora_rank).strip(),
        "## Limitations",
        "This model learned online from a small number of conversations, through an automatic judge of the "
        "users' replies. It inherits the base model's limitations and the judge's mistakes, may have picked "
        "up its users' preferences and style, and has not been evaluated beyond the metrics above.",
    ]
    return ModelCard(f"---\n{data.to_yaml()}\n---\n\n" + "\n\n".join(sections) + "\n")


# --------------------------------------------------------------------------------------------- pushing


def _check_merged_dir(folder: str | os.PathLike) -> Path:
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise UserError(f"merged model not found: {folder} is not a directory")
    if (folder / ADAPTER_CONFIG).is_file():
        raise UserError(f"{folder} holds a LoRA adapter, not a merged model; push it with --adapter instead")
    if not (folder / "config.json").is_file() or not (
        any(folder.glob("*.safetensors")) or any(folder.glob("*.bin"))
    ):
        raise UserError(
            f"{folder} is not a saved model (config.json + weights); create one with `openclaw-trl merge`"
        )
    return folder


def push_to_hub(
    folder: str | os.PathLike,
    repo_id: str,
    *,
    kind: str = "adapter",
    private: bool = False,
    revision: str | None = None,
    commit_message: str | None = None,
    token: str | None = None,
) -> str:
    """Write the model card into ``folder`` and upload it to ``repo_id``; returns the commit (or repo) URL.

    ``kind="adapter"`` accepts a run dir or checkpoint dir (resolved like ``merge``) and uploads only adapter,
    tokenizer and metadata files; ``kind="merged"`` uploads a directory written by :func:`merge_adapter`.
    The token comes from ``token``, else ``HF_TOKEN`` or ``hf auth login``, as everywhere in the HF stack.
    """
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError, LocalTokenNotFoundError, OfflineModeIsEnabled

    if kind == "adapter":
        folder = resolve_adapter_dir(folder)
        run_info = load_run_info(folder)
        base = adapter_base_model(folder, run_info)
        rank = read_adapter_config(folder).get("r")
        allow, ignore = ADAPTER_FILES, None
    elif kind == "merged":
        folder = _check_merged_dir(folder)
        run_info = load_run_info(folder)
        base, rank, allow, ignore = (run_info or {}).get("base_model"), None, None, MERGED_IGNORE
    else:
        raise ValueError(f"kind must be 'adapter' or 'merged', not {kind!r}")

    card = build_model_card(kind=kind, repo_id=repo_id, base_model=base, run_info=run_info, lora_rank=rank)
    card.save(folder / "README.md")

    api = HfApi(token=token)
    try:
        repo_url = api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
        repo_id = getattr(repo_url, "repo_id", None) or repo_id
        if revision:
            api.create_branch(repo_id, branch=revision, exist_ok=True, repo_type="model")
        commit = api.upload_folder(
            repo_id=repo_id,
            folder_path=folder,
            repo_type="model",
            revision=revision,
            commit_message=commit_message or f"Upload {kind} model with openclaw-trl",
            allow_patterns=allow,
            ignore_patterns=ignore,
        )
    except (HfHubHTTPError, LocalTokenNotFoundError, OfflineModeIsEnabled) as err:
        raise UserError(
            f"pushing to {repo_id!r} failed: {err}. Log in with `hf auth login` (or set HF_TOKEN to a token "
            "with write access), and unset HF_HUB_OFFLINE, which the Makefile sets for tests."
        ) from err
    return getattr(commit, "commit_url", None) or str(repo_url)
