"""``--user NAME`` on export, merge, push and compare: each works on one user's run folder and nothing else.

A run with users keeps each user's store and adapter in ``<run>/users/<name>/``; here two users' folders are
built for real (a store with each one's turns, a LoRA adapter and a checkpoint each on the tiny model), and
the Hub is the fake one of ``test_hub`` (uploads copied into a local folder).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import served_turn
from test_export import _judge
from test_hub import FakeHub, _run_info, _save_adapter

from openclaw_trl.cli import main
from openclaw_trl.fsutil import RUN_INFO_FILE
from openclaw_trl.hub.card import USERS_NOTE, card_recipe
from openclaw_trl.store import Store

RECIPE = (
    "method: rl\n"
    "users:\n"
    "  - name: alice\n"
    "    api_key_env: ALICE_KEY\n"
    "  - name: bob\n"
    "    api_key_env: BOB_KEY\n"
    "batch_size: 4\n"
)
NOTE = USERS_NOTE + "\n"
PROMPTS = {
    "alice": ["alice asks about apples", "alice asks about pears"],
    "bob": ["bob's secret plan", "bob asks about boats"],
}


@pytest.fixture(scope="module")
def run(tiny_model_dir, tmp_path_factory) -> Path:
    """``<run>/users/{alice,bob}/``: a store with the user's two prompts (the last one judged), a final adapter (alice seed 1, bob
    seed 2), ``checkpoint-1`` for alice and ``checkpoint-2`` for bob, and run info naming both users."""
    import shutil

    root = tmp_path_factory.mktemp("users-run")
    for seed, (name, prompts) in enumerate(PROMPTS.items(), start=1):
        folder = root / "users" / name
        folder.mkdir(parents=True)
        with Store(folder / "openclaw.sqlite") as store:
            for i, text in enumerate(prompts):
                session = store.conversations.open_session(f"{name}-chat-{i}")
                ids = [1, 10 * seed + i]  # distinct prompts (compare replays distinct prompt ids)
                turn = store.conversations.add_turn(served_turn(session, text, prompt_ids=ids))
            _judge(store, turn, 1.0, None, {"role": "user", "content": f"thanks from {name}"})
        _save_adapter(tiny_model_dir, folder, seed=seed)
        (folder / RUN_INFO_FILE).write_text(json.dumps(_run_info(str(tiny_model_dir), recipe_yaml=RECIPE)))
        checkpoint = folder / f"checkpoint-{seed}"
        checkpoint.mkdir()
        for file in ("adapter_config.json", "adapter_model.safetensors"):
            shutil.copy(folder / file, checkpoint / file)
    return root


def _error(capsys) -> str:
    return capsys.readouterr().err.strip()


# ------------------------------------------------------------------------------------------------ export


@pytest.mark.parametrize("store", ["", "openclaw.sqlite"])
def test_export_user_holds_only_their_turns(run, tmp_path, capsys, store):
    from datasets import load_from_disk

    out = tmp_path / "alice-export"
    assert main(["export", "--store", str(run / store), "--user", "alice", "--out", str(out)]) == 0
    assert "exported 2 sessions, 2 turns, 1 samples" in capsys.readouterr().out
    dataset = load_from_disk(str(out))
    assert dataset["sessions"]["session_key"] == ["alice-chat-0", "alice-chat-1"]
    prompts = [turn["messages"][-1]["content"] for turn in dataset["turns"]]
    assert prompts == PROMPTS["alice"] and dataset["turns"][1]["next_state"]["content"] == "thanks from alice"
    assert not any("bob" in json.dumps(row) for split in dataset.values() for row in split)


def test_user_commands_without_user_name_the_users(run, tmp_path, capsys):
    for argv in (
        ["export", "--store", str(run / "openclaw.sqlite"), "--out", str(tmp_path / "x")],
        ["merge", "--adapter", str(run), "--out", str(tmp_path / "m")],
        ["push", "--adapter", str(run), "--repo-id", "me/x"],
        ["compare", "--store", str(run), "--versions", "0", "1"],
    ):
        assert main(argv) == 2, argv
        err = _error(capsys)
        assert "holds the runs of users (alice, bob)" in err and "--user NAME" in err, err
        assert len(err.splitlines()) == 1
    assert not (tmp_path / "x").exists() and not (tmp_path / "m").exists()


@pytest.mark.parametrize(
    ("user", "message"),
    [
        ("carol", "no folder"),
        ("../bob", "a user name must be"),
        ("", "a user name must be"),
        ("ALICE", "a user name must be"),
    ],
)
def test_unknown_or_hostile_user_is_refused(run, tmp_path, capsys, user, message):
    out = tmp_path / "x"
    assert main(["export", "--store", str(run), "--user", user, "--out", str(out)]) == 2
    err = _error(capsys)
    assert message in err and not out.exists()
    if user == "carol":
        assert "users of this run: alice, bob" in err


def test_user_on_a_run_without_users_is_refused(run, tmp_path, capsys):
    single = run / "users" / "alice"  # a folder with its own store and adapter, and no users/ in it
    assert main(["export", "--store", str(single), "--user", "bob", "--out", str(tmp_path / "x")]) == 2
    assert "has no users/ folder" in _error(capsys) and not (tmp_path / "x").exists()
    assert main(["merge", "--adapter", str(tmp_path), "--user", "bob", "--out", str(tmp_path / "m")]) == 2
    assert "drop --user" in _error(capsys)
    # the user's own folder with their own name is that folder; without --user it is a one-user run
    assert main(["export", "--store", str(single), "--user", "alice", "--out", str(tmp_path / "a")]) == 0
    assert main(["export", "--store", str(single), "--out", str(tmp_path / "b")]) == 0


# ------------------------------------------------------------------------------------------------ merge, push


def test_merge_user_merges_only_their_adapter(run, tmp_path, capsys):
    out = tmp_path / "alice-merged"
    assert main(["merge", "--adapter", str(run), "--user", "alice", "--out", str(out)]) == 0
    assert str(run / "users" / "alice") in capsys.readouterr().out
    info = json.loads((out / RUN_INFO_FILE).read_text())
    assert info["merged_from"] == str(run / "users" / "alice")


def test_push_user_uploads_their_adapter_and_a_card_naming_no_other_user(run, tmp_path, monkeypatch, capsys):
    hub = FakeHub(tmp_path / "hub").install(monkeypatch)
    assert main(["push", "--adapter", str(run), "--user", "alice", "--repo-id", "me/alice-lora"]) == 0
    repo = hub.root / "me/alice-lora/main"
    alice, bob = (run / "users" / name / "adapter_model.safetensors" for name in ("alice", "bob"))
    uploaded = (repo / "adapter_model.safetensors").read_bytes()
    assert uploaded == alice.read_bytes() != bob.read_bytes()
    assert not list(repo.rglob("*.sqlite")) and not list(repo.glob("checkpoint-*"))
    card = (repo / "README.md").read_text()
    assert "bob" not in card.lower() and "BOB_KEY" not in card and "ALICE_KEY" not in card
    assert "users: left out of this card" in card and "batch_size: 4" in card

    assert main(["push", "--merged", str(run), "--user", "alice", "--repo-id", "me/x"]) == 2
    assert "drop --user" in _error(capsys)


@pytest.mark.parametrize(
    ("recipe", "expected"),
    [
        ("method: rl\n", "method: rl\n"),  # no users: unchanged
        ("", ""),
        (RECIPE, NOTE + "method: rl\nbatch_size: 4"),
        (
            "users: [{name: alice, api_key_env: A}, {name: bob,\n  api_key_env: B}]\nmethod: rl\n",
            NOTE + "method: rl",
        ),
        (RECIPE + "run_name: bob-test\n", None),  # a name left elsewhere: the recipe is left out
    ],
)
def test_card_recipe_leaves_the_users_out(recipe, expected):
    assert card_recipe(recipe) == expected


# ------------------------------------------------------------------------------------------------ compare


def test_compare_user_replays_their_prompts_with_their_checkpoints(run, capsys):
    common = ["compare", "--store", str(run), "--max-new-tokens", "2", "--prompts", "5", "--json"]
    assert main([*common, "--user", "alice", "--versions", "0", "1"]) == 0
    pairs = json.loads(capsys.readouterr().out)
    assert [p["prompt"] for p in pairs] == PROMPTS["alice"][::-1]  # newest first, none of bob's
    # bob's folder has checkpoint-2 only: alice's checkpoint-1 is not his
    assert main([*common, "--user", "bob", "--versions", "0", "1"]) == 2
    err = _error(capsys)
    assert "no adapter for version 1" in err and str(run / "users" / "bob") in err
    assert main([*common, "--user", "bob", "--run-dir", str(run), "--versions", "2", "2"]) == 0
    assert [p["prompt"] for p in json.loads(capsys.readouterr().out)] == PROMPTS["bob"][::-1]


@pytest.mark.parametrize("command", ["export", "merge", "push", "compare"])
def test_help_documents_user(command, capsys):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--user NAME" in out and "<output_dir>/users/NAME" in out
