"""``push_to_hub``: a run's adapter (or a merged model) uploaded with its model card.

Uploads are allow-listed for adapters: a run dir may also hold the conversation store (SQLite, private
chats included), logs and optimizer states, none of which belong on the Hub. A merged model's directory is
uploaded whole, less the same training state and databases.
"""

from __future__ import annotations

import os
from pathlib import Path

from openclaw_trl.errors import UserError
from openclaw_trl.fsutil import RUN_INFO_FILE
from openclaw_trl.hub.card import build_model_card
from openclaw_trl.hub.locate import (
    ADAPTER_CONFIG,
    adapter_base_model,
    load_run_info,
    read_adapter_config,
    resolve_adapter_dir,
)

# What an adapter repo needs.
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

# Files of an HF Trainer checkpoint that belong to resuming, not to the published model.
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
MERGED_IGNORE = TRAINING_STATE_PATTERNS + ["*.sqlite", "*.sqlite-*", "*.db", "*.db-*", ".*", ".*/**"]


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
    tokenizer and metadata files; ``kind="merged"`` uploads a directory written by ``merge_adapter``.
    The token comes from ``token``, else ``HF_TOKEN`` or ``hf auth login``, as everywhere in the HF stack.
    """
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError, LocalTokenNotFoundError, OfflineModeIsEnabled

    folder, run_info, base, rank, patterns = _upload_source(folder, kind)
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
            **patterns,
        )
    except (HfHubHTTPError, LocalTokenNotFoundError, OfflineModeIsEnabled) as err:
        raise UserError(
            f"pushing to {repo_id!r} failed: {err}. Log in with `hf auth login` (or set HF_TOKEN to a token "
            "with write access), and unset HF_HUB_OFFLINE, which the Makefile sets for tests."
        ) from err
    return getattr(commit, "commit_url", None) or str(repo_url)


def _upload_source(folder: str | os.PathLike, kind: str):
    """``(folder, run info, base model, LoRA rank, upload patterns)`` of what ``kind`` uploads from ``folder``."""
    if kind == "adapter":
        folder = resolve_adapter_dir(folder)
        run_info = load_run_info(folder)
        base = adapter_base_model(folder, run_info)
        rank = read_adapter_config(folder).get("r")
        return folder, run_info, base, rank, {"allow_patterns": ADAPTER_FILES, "ignore_patterns": None}
    if kind == "merged":
        folder = _check_merged_dir(folder)
        run_info = load_run_info(folder)
        base = (run_info or {}).get("base_model")
        return folder, run_info, base, None, {"allow_patterns": None, "ignore_patterns": MERGED_IGNORE}
    raise ValueError(f"kind must be 'adapter' or 'merged', not {kind!r}")


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
