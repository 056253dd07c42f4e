"""Export: a scripted conversation written through the store's public API comes back from the dataset intact.

The Hub is outside this machine, so the one push test replaces ``DatasetDict.push_to_hub`` with a fake Hub
that saves locally; the store, the dataset building and ``save_to_disk`` / ``load_from_disk`` are real.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from openclaw_trl.cli import main
from openclaw_trl.export import build_dataset, dataset_features, export_store
from openclaw_trl.records import Judgement, ServedTurn, TrainingSample, Vote
from openclaw_trl.store import Store

SYSTEM = {"role": "system", "content": "You are a helpful tutor."}
ASK = {"role": "user", "content": "What is 2 + 3?"}
CORRECTION = {"role": "user", "content": "No, 2 + 3 is 5. Check your sums before answering."}
HINT = "Add the numbers carefully: 2 + 3 = 5."
TOOL_CALL = {
    "role": "assistant",
    "content": "",
    "tool_calls": [
        {"type": "function", "function": {"name": "calculator", "arguments": {"expression": "7*6"}}}
    ],
}
TOOL_RESULT = {"role": "tool", "content": "42"}
TOOLS = [{"type": "function", "function": {"name": "calculator", "parameters": {"type": "object"}}}]


def _add_turn(
    store: Store, session: int, messages, text: str, version: int, *, tools=None, turn_type="main"
) -> int:
    return store.conversations.add_turn(
        ServedTurn(
            session_id=session,
            turn_type=turn_type,
            prompt_messages=messages,
            tools=tools,
            prompt_ids=[11, 12, 13, 14],
            completion_ids=[21, 22, 23],
            sampling_logprobs=[-0.125, -1.5, -0.03125],
            completion_text=text,
            temperature=0.7,
            policy_version=version,
            finish_reason="stop",
            trainable=True,
            response_message={"role": "assistant", "content": text},
        )
    )


def _judge(store: Store, turn_id: int, reward: float, hint: str | None, next_state: dict) -> int:
    """What the scorer does: attach the next state, then commit votes + verdict + sample in one go."""
    assert store.conversations.attach_next_state(turn_id, next_state, "request")
    turn = store.conversations.get_turn(turn_id)
    votes = [
        Vote("prm", "callable", f"\\boxed{{{int(reward)}}}", int(reward)),
        Vote("hint", "callable", "x", 1, hint),
    ]
    sample = TrainingSample(
        turn_id=turn_id,
        prompt_ids=turn.prompt_ids,
        completion_ids=turn.completion_ids,
        sampling_logprobs=turn.sampling_logprobs,
        temperature=turn.temperature,
        policy_version=turn.policy_version,
        reward=reward,
        has_hint=hint is not None,
        hint=hint,
        teacher_logprobs=[-0.25, -0.75, -0.0625] if hint else None,
        topk_ids=[[21, 5], [22, 6], [23, 7]] if hint else None,
        topk_logprobs=[[-0.25, -2.0], [-0.75, -1.0], [-0.0625, -3.5]] if hint else None,
        meta={"judge": "callable"},
    )
    sample_id = store.judging.save_judgement(Judgement(turn, votes, reward, hint, sample=sample))
    assert sample_id is not None
    return sample_id


@pytest.fixture
def store_path(tmp_path) -> Path:
    """Alice's tutoring chat (judged, a tool call, a side turn) and Bob's chat marked "don't learn"."""
    path = tmp_path / "openclaw.sqlite"
    with Store(path) as store:
        alice = store.conversations.open_session("alice")
        first = _add_turn(store, alice, [SYSTEM, ASK], "It is 6.", version=0)
        sample = _judge(store, first, -1.0, HINT, CORRECTION)
        store.queue.mark_consumed([sample], step=1)
        _add_turn(
            store, alice, [SYSTEM, ASK, {"role": "assistant", "content": "It is 6."}, CORRECTION], "5", 1
        )
        _add_turn(
            store, alice, [{"role": "user", "content": "Title for this chat?"}], "Sums", 1, turn_type="side"
        )
        _add_turn(store, alice, [ASK, TOOL_CALL, TOOL_RESULT], "7 * 6 = 42.", 1, tools=TOOLS)

        bob = store.conversations.open_session("bob", private=True)
        _judge(
            store, _add_turn(store, bob, [{"role": "user", "content": "my secret"}], "ok", 0), 1.0, None, ASK
        )
        carol = store.conversations.open_session("carol")  # judged first, marked "don't learn" afterwards
        _judge(
            store, _add_turn(store, carol, [{"role": "user", "content": "hi"}], "hello", 1), 1.0, None, ASK
        )
        store.conversations.set_private(carol)
    return path


def test_cli_export_round_trips_a_scripted_conversation(store_path, tmp_path, capsys):
    from datasets import load_from_disk

    out = tmp_path / "export"
    assert main(["export", "--store", str(store_path), "--out", str(out)]) == 0
    assert (
        "exported 1 sessions, 4 turns, 1 samples (private conversations left out)" in capsys.readouterr().out
    )

    dataset = load_from_disk(str(out))
    assert set(dataset) == {"sessions", "turns", "samples"}
    assert dataset["sessions"]["session_key"] == ["alice"]

    turns = dataset["turns"]
    assert turns["turn_index"] == [0, 1, 2, 3] and turns["turn_type"] == ["main", "main", "side", "main"]
    first = turns[0]
    assert first["messages"] == [SYSTEM, ASK] and first["completion"] == "It is 6."
    assert first["response_message"] == {"role": "assistant", "content": "It is 6."}
    assert first["next_state"] == CORRECTION and first["next_state_source"] == "request"
    assert (first["reward"], first["hint"], first["policy_version"], first["status"]) == (
        -1.0,
        HINT,
        0,
        "judged",
    )
    assert first["prompt_ids"] == [11, 12, 13, 14] and first["completion_ids"] == [21, 22, 23]
    assert first["sampling_logprobs"] == [-0.125, -1.5, -0.03125] and first["temperature"] == 0.7
    assert turns[1]["next_state"] is None and turns[1]["reward"] is None and turns[1]["policy_version"] == 1
    assert turns[3]["messages"] == [ASK, TOOL_CALL, TOOL_RESULT] and turns[3]["tools"] == TOOLS

    (sample,) = dataset["samples"]
    assert (
        sample["turn_id"] == first["turn_id"]
        and sample["origin"] == "scorer"
        and sample["consumed_step"] == 1
    )
    assert sample["reward"] == -1.0 and sample["has_hint"] and sample["hint"] == HINT
    assert sample["teacher_logprobs"] == [-0.25, -0.75, -0.0625]
    assert sample["topk_ids"] == [[21, 5], [22, 6], [23, 7]]
    assert sample["topk_logprobs"] == [[-0.25, -2.0], [-0.75, -1.0], [-0.0625, -3.5]]
    assert sample["meta"] == {"judge": "callable"}


def test_private_conversations_only_when_asked(store_path):
    default = build_dataset(store_path)
    assert "my secret" not in str(default["turns"]["messages"]) and not any(default["turns"]["private"])
    assert set(default["sessions"]["session_key"]) == {"alice"}

    everything = build_dataset(store_path, include_private=True)
    assert set(everything["sessions"]["session_key"]) == {"alice", "bob", "carol"}
    assert {"bob", "carol"} <= set(everything["turns"]["session_key"])
    assert len(everything["samples"]) == 3 and sum(everything["turns"]["private"]) == 2


def test_empty_store_exports_typed_empty_splits(tmp_path):
    Store(tmp_path / "empty.sqlite").close()
    dataset = build_dataset(tmp_path / "empty.sqlite")
    assert all(len(dataset[name]) == 0 for name in dataset)
    assert dataset["samples"].features == dataset_features()["samples"]


def test_bad_inputs_give_clear_errors(store_path, tmp_path, capsys):
    missing = tmp_path / "typo.sqlite"
    assert main(["export", "--store", str(missing), "--out", str(tmp_path / "o")]) == 2
    assert "store not found" in capsys.readouterr().err and not missing.exists()  # no empty store created

    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("mine")
    assert main(["export", "--store", str(store_path), "--out", str(busy)]) == 2
    assert "is not empty" in capsys.readouterr().err and (busy / "keep.txt").exists()
    assert main(["export", "--store", str(store_path), "--out", str(busy), "--force"]) == 0
    assert not (busy / "keep.txt").exists()

    assert main(["export", "--store", str(store_path)]) == 2
    assert "--push-to-hub" in capsys.readouterr().err


def test_push_to_hub_is_private_by_default(store_path, tmp_path, monkeypatch):
    from datasets import DatasetDict, load_from_disk

    pushed = {}

    def fake_push(dataset, repo_id, *, private=None, commit_message=None, **kwargs):
        pushed.update(repo_id=repo_id, private=private, commit_message=commit_message)
        dataset.save_to_disk(str(tmp_path / "hub" / repo_id))

    monkeypatch.setattr(DatasetDict, "push_to_hub", fake_push)
    result = export_store(store_path, push_to_hub="me/my-chats")
    assert result.out is None and result.repo_id == "me/my-chats"
    assert pushed == {
        "repo_id": "me/my-chats",
        "private": True,
        "commit_message": "Export conversations with openclaw-trl",
    }
    assert len(load_from_disk(str(tmp_path / "hub/me/my-chats"))["turns"]) == 4

    assert main(["export", "--store", str(store_path), "--push-to-hub", "me/public", "--public"]) == 0
    assert pushed["private"] is False


def test_datasets_without_json_feature_get_json_strings(store_path, monkeypatch):
    import json

    import datasets

    monkeypatch.delattr(datasets, "Json")  # releases before datasets.Json
    turns = build_dataset(store_path)["turns"]
    assert [json.loads(m) for m in turns[3]["messages"]] == [ASK, TOOL_CALL, TOOL_RESULT]
