"""Export what the store collected as a ``datasets.DatasetDict``: sessions, turns and training samples.

The export is for people who want to keep, inspect, share or retrain on their conversations: each turn
keeps the messages the model saw, what it answered, what the user said next (the next state), the
judge's reward and hint and the policy version that answered; each sample keeps the exact token ids and
log-probs the trainer used; each Best-of-N group (split ``groups``) keeps the candidates of a served turn,
their quick scores and which one was served (the split is left out of a store without groups). Conversations marked "don't learn" (private sessions) stay out unless the
caller asks for them, and a Hub push is private unless asked otherwise.

The store is read only through its public export API (``store.queries``: ``iter_sessions``, ``iter_turns``,
``iter_samples``, ``iter_groups``); the samples split's columns are the sample's own declaration
(``records.SAMPLE_COLUMNS``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from openclaw_trl.errors import UserError
from openclaw_trl.fsutil import staged_directory
from openclaw_trl.records import SAMPLE_COLUMNS, Column

SPLITS = ("sessions", "turns", "samples", "groups")


def _json_feature():
    """A feature for free-form JSON (chat messages with tool calls, multimodal parts, metadata).

    ``datasets.Json`` keeps the structure; older ``datasets`` releases without it get a JSON string.
    """
    import datasets

    if hasattr(datasets, "Json"):
        return datasets.Json(), lambda value: value
    import json

    return datasets.Value(
        "string"
    ), lambda value: None if value is None else json.dumps(value, ensure_ascii=False)


def dataset_features() -> dict[str, Any]:
    """The schema of each split, fixed so that empty splits and all-null columns still have proper types."""
    from datasets import Features, List, Value

    json_feature, _ = _json_feature()
    int64, int32, float64, string, boolean = (
        Value(t) for t in ("int64", "int32", "float64", "string", "bool")
    )
    kinds = {  # the feature of each column kind (records.Column)
        "int": int64,
        "float": float64,
        "text": string,
        "bool": boolean,
        "ids": List(int32),
        "floats": List(float64),
        "json": json_feature,
        "int32_rows": List(List(int32)),
        "float32_rows": List(List(Value("float32"))),
    }
    return {
        "sessions": Features(
            session_id=int64,
            session_key=string,
            generation=int64,
            created=float64,
            last_active=float64,
            ended=float64,
            end_reason=string,
            private=boolean,
            anonymous=boolean,
        ),
        "turns": Features(
            turn_id=int64,
            session_id=int64,
            session_key=string,
            turn_index=int64,
            turn_type=string,
            created=float64,
            messages=List(json_feature),
            tools=json_feature,
            completion=string,
            response_message=json_feature,
            finish_reason=string,
            next_state=json_feature,
            next_state_source=string,
            reward=float64,
            hint=string,
            policy_version=int64,
            temperature=float64,
            status=string,
            close_reason=string,
            judge_error=string,
            private=boolean,
            prompt_ids=List(int32),
            completion_ids=List(int32),
            sampling_logprobs=List(float64),
        ),
        "samples": Features(
            {c.field: kinds[c.kind] for c in SAMPLE_COLUMNS if c.export}
        ),  # topk_logprobs stored as float32: exported exactly
        "groups": Features(
            group_id=int64,
            turn_id=int64,
            session_id=int64,
            created=float64,
            backend=string,
            served_index=int64,
            scores=List(float64),  # null: no score
            score_mean=float64,
            score_std=float64,
            served_prob=float64,
            completions=List(string),
            completion_ids=List(List(int32)),
            sampling_logprobs=List(List(float64)),
            finish_reasons=List(string),
            policy_versions=List(int64),
        ),
    }


def collect_rows(store, include_private: bool = False) -> dict[str, list[dict[str, Any]]]:
    """Rows of each split from an open :class:`openclaw_trl.store.Store`, in store order (oldest first)."""
    _, encode = _json_feature()
    sessions = [
        {
            "session_id": s.id,
            "session_key": s.key,
            "generation": s.generation,
            "created": s.created,
            "last_active": s.last_active,
            "ended": s.ended,
            "end_reason": s.end_reason,
            "private": s.private,
            "anonymous": s.anonymous,
        }
        for s in store.queries.iter_sessions()
        if include_private or not s.private
    ]
    turns = [
        {
            "turn_id": t.id,
            "session_id": t.session_id,
            "session_key": t.session_key,
            "turn_index": t.idx,
            "turn_type": t.turn_type,
            "created": t.created,
            "messages": [encode(m) for m in t.prompt_messages],
            "tools": encode(t.tools),
            "completion": t.completion_text,
            "response_message": encode(t.response_message),  # the reply as the client got it
            "finish_reason": t.finish_reason,
            "next_state": encode(t.next_state),
            "next_state_source": t.next_state_source,
            "reward": t.reward,
            "hint": t.hint,
            "policy_version": t.policy_version,
            "temperature": t.temperature,
            "status": t.status,  # failed: judging kept raising (judge_error says why)
            "close_reason": t.close_reason,
            "judge_error": t.judge_error,
            "private": t.private,
            "prompt_ids": t.prompt_ids,
            "completion_ids": t.completion_ids,
            "sampling_logprobs": t.sampling_logprobs,
        }
        for t in store.queries.iter_turns(include_private=include_private)
    ]
    exported = [c for c in SAMPLE_COLUMNS if c.export]
    samples = [
        {c.field: _export_value(c, getattr(s, c.field), encode) for c in exported}
        for s in store.queries.iter_samples(include_private=include_private)
    ]
    groups = [
        {
            "group_id": g.id,
            "turn_id": g.turn_id,
            "session_id": g.session_id,
            "created": g.created,
            "backend": g.backend,
            "served_index": g.served_index,
            "scores": g.scores,
            "score_mean": g.score_mean,
            "score_std": g.score_std,
            "served_prob": g.served_prob,
            "completions": [c.completion_text for c in g.candidates],
            "completion_ids": [c.completion_ids for c in g.candidates],
            "sampling_logprobs": [c.sampling_logprobs for c in g.candidates],
            "finish_reasons": [c.finish_reason for c in g.candidates],
            "policy_versions": [c.policy_version for c in g.candidates],
        }
        for g in store.groups.iter_groups(include_private=include_private)
    ]
    return {"sessions": sessions, "turns": turns, "samples": samples, "groups": groups}


def _export_value(column: Column, value, encode):
    """A record attribute as the export holds it (free-form JSON through ``encode``)."""
    return encode(value) if column.kind == "json" else value


def open_store(path: str | os.PathLike):
    """Open an existing store; ``Store(path)`` alone would silently create an empty one at a mistyped path."""
    import sqlite3

    from openclaw_trl.store import Store, StoreError

    path = Path(path).expanduser()
    if not path.is_file():
        raise UserError(f"store not found: {path} does not exist (pass the store path of your recipe)")
    try:
        return Store(path)
    except (sqlite3.DatabaseError, StoreError) as err:
        raise UserError(f"cannot read the store {path}: {err}") from err


def build_dataset(store_path: str | os.PathLike, include_private: bool = False):
    """The store at ``store_path`` as a ``DatasetDict``: splits ``sessions``, ``turns`` and ``samples``, and
    ``groups`` when the store has Best-of-N groups."""
    from datasets import Dataset, DatasetDict

    store = open_store(store_path)
    try:
        rows = collect_rows(store, include_private=include_private)
    finally:
        store.close()
    features = dataset_features()
    # Column-wise, so that an empty split still gets its columns (``from_list([])`` would have none).
    return DatasetDict(
        {
            name: Dataset.from_dict(
                {col: [row[col] for row in rows[name]] for col in features[name]}, features[name]
            )
            for name in SPLITS
            if name != "groups" or rows[name]
        }
    )


@dataclass
class ExportResult:
    """What :func:`export_store` wrote (printed by the CLI)."""

    counts: dict[str, int]
    out: Path | None = None
    repo_id: str | None = None
    include_private: bool = False
    notes: list[str] = field(default_factory=list)


def export_store(
    store_path: str | os.PathLike,
    out: str | os.PathLike | None = None,
    *,
    push_to_hub: str | None = None,
    include_private: bool = False,
    public: bool = False,
    force: bool = False,
    commit_message: str | None = None,
) -> ExportResult:
    """Write the store as a ``DatasetDict`` to ``out`` (``save_to_disk``) and/or push it to a Hub repo.

    A pushed dataset repo is created private unless ``public``: these are someone's conversations. A
    non-empty ``out`` is only replaced with ``force``, and only once the new export is complete.
    """
    if out is None and push_to_hub is None:
        raise UserError("nothing to do: pass --out <dir> and/or --push-to-hub <user/name>")
    if out is not None:
        from openclaw_trl.hub.checks import check_output_dir

        try:
            out = check_output_dir(out, force)
        except UserError as err:
            raise UserError(str(err)) from err
    dataset = build_dataset(store_path, include_private=include_private)
    result = ExportResult(
        counts={name: len(split) for name, split in dataset.items()}, include_private=include_private
    )

    if out is not None:
        with staged_directory(out, "exporting") as staging:
            dataset.save_to_disk(str(staging))
        result.out = out

    if push_to_hub is not None:
        from huggingface_hub.errors import HfHubHTTPError, LocalTokenNotFoundError, OfflineModeIsEnabled

        try:
            dataset.push_to_hub(
                push_to_hub,
                private=not public,
                commit_message=commit_message or "Export conversations with openclaw-trl",
            )
        except (HfHubHTTPError, LocalTokenNotFoundError, OfflineModeIsEnabled) as err:
            raise UserError(
                f"pushing to {push_to_hub!r} failed: {err}. Log in with `hf auth login` (or set HF_TOKEN) "
                "and unset HF_HUB_OFFLINE."
            ) from err
        result.repo_id = push_to_hub
    return result
