"""The model card (README.md) of a pushed adapter or merged model.

The YAML header (``ModelCardData``) makes the repo show up under its base model and under the
``openclaw-trl`` tag on the Hub; the body records what a reader needs to trust and reuse the model: the
method, the recipe verbatim, how much feedback it learned from, its last metrics, the library versions and
how to load it with Transformers, PEFT and vLLM.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from openclaw_trl.engines.adapters import vllm_max_lora_rank

CARD_TAGS = ["openclaw-trl", "trl", "lora", "online-rl", "on-policy-distillation", "text-generation"]

METHOD_DESCRIPTIONS = {
    "rl": "Binary RL: a judge reads each reply together with what the user said next and votes +1/-1; "
    "the majority reward is broadcast to every token of the reply (PPO clipped surrogate).",
    "opd": "Hindsight on-policy distillation: a judge turns the user's next message into a hint; the same "
    "base model, with the hint appended to the prompt, acts as a teacher on the reply the policy actually "
    "sampled, and the per-token advantage is the teacher/student log-prob gap.",
    "combine": "Combine: the sum of the binary-RL reward and the hindsight on-policy distillation advantage "
    "(the OPD term only where a hint was accepted).",
}

LIMITATIONS = (
    "This model learned online from a small number of conversations, through an automatic judge of the "
    "users' replies. It inherits the base model's limitations and the judge's mistakes, may have picked "
    "up its users' preferences and style, and has not been evaluated beyond the metrics above."
)

_CHAT_SNIPPET = (
    'messages = [{"role": "user", "content": "Hello! What can you do?"}]\n'
    "inputs = tokenizer.apply_chat_template(\n"
    '    messages, add_generation_prompt=True, return_dict=True, return_tensors="pt"\n'
    ").to(model.device)\n"
    "output = model.generate(**inputs, max_new_tokens=256)\n"
    'print(tokenizer.decode(output[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True))'
)


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


def build_model_card(
    *,
    kind: str,
    repo_id: str,
    base_model: str | None,
    run_info: dict[str, Any] | None = None,
    lora_rank: int | None = None,
):
    """The README.md of a pushed adapter (``kind="adapter"``) or merged model (``kind="merged"``).

    ``run_info`` is the run's ``openclaw_run.json`` (what was trained, how, on how much feedback); a card
    without it says ``n/a`` where a figure is missing and lists the versions installed now.
    """
    from huggingface_hub import ModelCard

    if kind not in ("adapter", "merged"):
        raise ValueError(f"kind must be 'adapter' or 'merged', not {kind!r}")
    info = dict(run_info or {})
    base = base_model or info.get("base_model") or "<base model>"
    data = _card_data(kind, repo_id, base, info)
    sections = [
        *_intro(kind, repo_id, base),
        *_training(kind, base, info, lora_rank),
        "## Usage",
        _usage(kind, repo_id, base, lora_rank).strip(),
        "## Limitations",
        LIMITATIONS,
    ]
    return ModelCard(f"---\n{data.to_yaml()}\n---\n\n" + "\n\n".join(sections) + "\n")


def _card_data(kind: str, repo_id: str, base: str, info: dict[str, Any]):
    """The YAML header: library, tags (method, QLoRA, merged) and the base model with its relation."""
    from huggingface_hub import ModelCardData

    method = _method(info)
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
    return data


def _intro(kind: str, repo_id: str, base: str) -> list[str]:
    what = "A LoRA adapter for" if kind == "adapter" else "A standalone model: the LoRA adapter merged into"
    return [
        f"# {repo_id.split('/')[-1]}",
        f"{what} {_base_link(base)}, trained with openclaw-trl by talking to it: "
        "each reply the user sent became the training signal for the assistant turn before it "
        "(online LoRA RL / hindsight on-policy distillation on "
        "[TRL](https://github.com/huggingface/trl) and PEFT).",
    ]


def _training(kind: str, base: str, info: dict[str, Any], lora_rank: int | None) -> list[str]:
    """The facts of the run, its final metrics, its recipe and the library versions."""
    metrics = info.get("final_metrics") or {}
    recipe = card_recipe(str(info.get("recipe_yaml") or "").strip())
    versions = info.get("library_versions") or {}
    versions_note = "at training time" if versions else "installed when this card was written"
    return [
        "## Training",
        "\n".join(f"- **{key}:** {value}" for key, value in _facts(kind, base, info, lora_rank).items()),
        "### Final metrics",
        _table(metrics, ("metric", "value")) if metrics else "No metrics were recorded.",
        "### Recipe",
        f"```yaml\n{recipe}\n```" if recipe else RECIPE_MISSING[recipe is None],
        f"### Library versions ({versions_note})",
        _table(versions or library_versions(), ("library", "version")),
    ]


RECIPE_MISSING = {
    False: "The recipe was not recorded with this run.",
    True: "The recipe was left out of this card: it names the people who shared the run.",
}
USERS_NOTE = "# users: left out of this card (each user of the run has an adapter of their own)"


def card_recipe(recipe: str) -> str | None:
    """The recipe as a card shows it: without its ``users`` list, which names everyone who shared the run
    (their names and key variables) while the adapter is one person's.

    The top-level ``users:`` block is cut out of the text (comments and layout of the rest kept) and a
    comment at the top says so; the cut is checked by parsing (every other field unchanged), else the recipe
    is written again from its parsed fields. None when a user's name or key variable still appears in what
    is left, even inside another word's ``-``/``_`` parts (the card then leaves the recipe out). A recipe
    without users is returned as it is.
    """
    import yaml

    try:
        parsed = yaml.safe_load(recipe) if recipe else None
    except yaml.YAMLError:
        return recipe
    if not isinstance(parsed, dict) or "users" not in parsed:
        return recipe
    users = parsed.pop("users") or []
    words = {
        str(entry.get(key))
        for entry in users
        if isinstance(entry, dict)
        for key in ("name", "api_key_env")
        if entry.get(key)
    }
    lines = recipe.splitlines()
    start = next((i for i, line in enumerate(lines) if re.match(r"users\s*:", line)), None)
    rest = None
    if start is not None:
        end = start + 1
        while end < len(lines) and (not lines[end] or lines[end][0] in " \t-#"):
            end += 1
        rest = "\n".join([*lines[:start], *lines[end:]]).strip()
        try:
            rest = rest if (yaml.safe_load(rest) or {}) == parsed else None
        except yaml.YAMLError:
            rest = None
    if rest is None:
        rest = yaml.safe_dump(parsed, sort_keys=False).strip() if parsed else ""
    if any(re.search(rf"(?<![A-Za-z0-9]){re.escape(word)}(?![A-Za-z0-9])", rest) for word in words):
        return None
    return f"{USERS_NOTE}\n{rest}".strip()


def _facts(kind: str, base: str, info: dict[str, Any], lora_rank: int | None) -> dict[str, Any]:
    method = _method(info)
    description = f" — {METHOD_DESCRIPTIONS[method]}" if method in METHOD_DESCRIPTIONS else ""
    facts = {
        "Base model": _base_link(base),
        "Method": f"`{method}`" + description,
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
    return facts


def _method(info: dict[str, Any]) -> str:
    return str(info.get("method") or "unknown")


def _is_hub_id(name: str | None) -> bool:
    """Does ``name`` look like a Hub repo id (``owner/name``) rather than a local path?"""
    return bool(name) and re.fullmatch(r"[\w.-]+/[\w.-]+", name) is not None and not Path(name).exists()


def _base_link(base: str) -> str:
    return f"[{base}](https://huggingface.co/{base})" if _is_hub_id(base) else f"`{base}`"


def _table(rows: dict[str, Any], header: tuple[str, str]) -> str:
    lines = [f"| {header[0]} | {header[1]} |", "| --- | --- |"]
    for key, value in rows.items():
        if isinstance(value, float):
            value = f"{value:.4g}"
        lines.append(f"| {key} | {value} |")
    return "\n".join(lines)


def _usage(kind: str, repo_id: str, base: str, lora_rank: int | None) -> str:
    """How to load the model: Transformers and vLLM, plus PEFT for an adapter."""
    return _merged_usage(repo_id) if kind == "merged" else _adapter_usage(repo_id, base, lora_rank)


def _merged_usage(repo_id: str) -> str:
    return f"""### Transformers

{_transformers_snippet(repo_id, tokenizer=repo_id)}

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


def _adapter_usage(repo_id: str, base: str, lora_rank: int | None) -> str:
    name = repo_id.split("/")[-1]
    rank = vllm_max_lora_rank(lora_rank)
    return f"""### Transformers

With `peft` installed, Transformers loads the base model and applies the adapter in one call:

{_transformers_snippet(repo_id, tokenizer=base)}

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


def _transformers_snippet(model_id: str, tokenizer: str) -> str:
    """A Python block that loads ``model_id`` with Transformers and chats with it."""
    return f"""```python
from transformers import AutoModelForCausalLM, AutoTokenizer

model = AutoModelForCausalLM.from_pretrained("{model_id}", dtype="auto", device_map="auto")
tokenizer = AutoTokenizer.from_pretrained("{tokenizer}")
{_CHAT_SNIPPET}
```"""
