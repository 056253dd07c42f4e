"""Users: the recipe's ``users`` (refusals), their keys (fail closed), the shared base model (one copy of
the base weights, an adapter per user that no other update touches) and the fair turn to update."""

from __future__ import annotations

import threading
import time

import pytest

from openclaw_trl.errors import UserError
from openclaw_trl.users import UserKeys, find_user, parse_users, plan_users, user_args

TWO = [{"name": "alice", "api_key_env": "ALICE_KEY"}, {"name": "bob", "api_key_env": "BOB_KEY"}]


def _config(tmp_path, **fields):
    from openclaw_trl.config import OpenClawConfig

    return OpenClawConfig(output_dir=str(tmp_path / "run"), **{"report_to": "none", **fields})


# ------------------------------------------------------------------------------------------ the recipe


def test_users_get_their_own_folder_and_store(tmp_path):
    config = _config(tmp_path, users=TWO)
    assert config.max_adapters == 2
    plan = plan_users(config)[0]
    assert plan.name == "alice" and plan.api_key_env == TWO[0]["api_key_env"]
    alice = user_args(config, plan, model_init_kwargs=None)
    assert alice.output_dir == plan.output_dir == str(tmp_path / "run" / "users" / "alice")
    assert alice.store_path == str(tmp_path / "run" / "users" / "alice" / "openclaw.sqlite")
    assert alice.users is None and alice.run_name == "run-alice"
    assert config.output_dir == str(tmp_path / "run") and config.users == TWO  # the recipe's is untouched


def test_a_run_without_users_has_one_user_named_none_in_the_recipes_folder(tmp_path):
    config = _config(tmp_path)
    (only,) = plan_users(config)
    assert only.name is None and only.output_dir == config.output_dir and only.store_path == config.store_path
    args = user_args(config, only, model_init_kwargs={"dtype": "float32"})
    assert args.model_init_kwargs == {"dtype": "float32"} and config.model_init_kwargs is None  # a copy
    assert args.output_dir == config.output_dir and args.batch_size == config.batch_size


def test_a_server_without_user_keys_serves_exactly_one_user_named_none():
    from openclaw_trl.serving.app import UserParts, create_tenants_app

    two = [UserParts("alice", None, None, None), UserParts("bob", None, None, None)]
    for users in (two, two[:1], []):
        with pytest.raises(ValueError, match="exactly one user, named None"):
            create_tenants_app(users)


@pytest.mark.parametrize(
    ("users", "match"),
    [
        ([], "at least one"),
        ([{"name": "Alice", "api_key_env": "K"}], "user name"),
        ([{"name": "../x", "api_key_env": "K"}], "user name"),
        ([{"name": "a" * 33, "api_key_env": "K"}], "user name"),
        ([{"name": "alice"}], "api_key_env"),
        ([{"name": "alice", "api_key_env": "K", "role": "admin"}], "unknown fields"),
        ([{"name": "alice", "api_key_env": "K"}, {"name": "alice", "api_key_env": "L"}], "duplicate"),
        ([{"name": "alice", "api_key_env": "K"}, {"name": "bob", "api_key_env": "K"}], "of their own"),
        (["alice"], "name:API_KEY_ENV"),
        ([7], "mapping"),
        ([{"name": f"u{i}", "api_key_env": f"K{i}"} for i in range(65)], "at most 64"),
    ],
)
def test_bad_users_are_refused(tmp_path, users, match):
    with pytest.raises(ValueError, match=match):
        _config(tmp_path, users=users)


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"store_path": "/tmp/x.sqlite"}, "store_path"),
        ({"api_key_env": "SERVER_KEY"}, "api_key_env"),
        ({"source": "replay", "replay_path": "x.jsonl"}, "replay"),
        ({"max_adapters": 0}, "max_adapters"),
        ({"max_adapters": 65}, "max_adapters"),
        ({"report_to": "trackio"}, "one run per process"),
        ({"report_to": ["tensorboard", "wandb"]}, "one run per process"),
        ({"report_to": "all"}, "one run per process"),
    ],
)
def test_what_would_mix_users_is_refused(tmp_path, fields, match):
    with pytest.raises(ValueError, match=match):
        _config(tmp_path, users=TWO, **fields)


def test_max_adapters_without_users_is_refused(tmp_path):
    with pytest.raises(ValueError, match="only applies with users"):
        _config(tmp_path, max_adapters=2)


def test_a_command_must_name_a_listed_user():
    specs = parse_users(TWO)
    assert find_user(specs, "bob").name == "bob"
    assert find_user((), None) is None
    with pytest.raises(UserError, match="alice, bob"):
        find_user(specs, None)
    with pytest.raises(UserError, match="no such user"):
        find_user(specs, "carol")
    with pytest.raises(UserError, match="lists no users"):
        find_user((), "alice")


# ------------------------------------------------------------------------------------------ the keys


def test_a_key_selects_its_user_and_nothing_else():
    keys = UserKeys(parse_users(TWO), environ={"ALICE_KEY": "a-secret", "BOB_KEY": " b-secret\n"})
    assert keys.user_of("a-secret") == "alice" and keys.user_of("b-secret") == "bob"
    for wrong in (None, "", "a-secre", "a-secret ", "A-SECRET", "b-secret\x00", "é" * 9):
        assert keys.user_of(wrong) is None
    assert keys.check("alice", "a-secret") and not keys.check("bob", "a-secret")


@pytest.mark.parametrize(
    ("environ", "match"),
    [
        ({"ALICE_KEY": "a"}, "BOB_KEY"),
        ({"ALICE_KEY": "a", "BOB_KEY": "  "}, "BOB_KEY"),
        ({"ALICE_KEY": "same", "BOB_KEY": "same"}, "same API key"),
    ],
)
def test_keys_fail_closed(environ, match):
    with pytest.raises(UserError, match=match):
        UserKeys(parse_users(TWO), environ=environ)


# ------------------------------------------------------------------------------------------ the base


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    from openclaw_trl.testing import build_tiny_model

    return str(build_tiny_model(tmp_path_factory.mktemp("tiny")))


def test_users_share_the_base_weights_and_train_apart(tiny_path):
    import torch
    from peft import LoraConfig, get_peft_model

    from openclaw_trl.trainer.sharing import SharedBase

    shared = SharedBase.load(tiny_path, "cpu", dtype=torch.float32)
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    alice = get_peft_model(shared.copy_for_user(), lora)
    bob = get_peft_model(shared.copy_for_user(), lora)
    assert shared.shares_base(alice) and shared.shares_base(bob)
    base_bytes = sum(p.numel() for p in shared.model.parameters())
    distinct = {p.data_ptr() for m in (alice, bob) for p in m.parameters()}
    lora_numel = sum(p.numel() for n, p in alice.named_parameters() if "lora_" in n)
    assert len(distinct) == len(list(shared.model.parameters())) + 2 * len(
        [n for n, _ in alice.named_parameters() if "lora_" in n]
    )
    assert lora_numel < base_bytes
    ids = torch.tensor([[1, 5, 9, 12, 3]])
    with torch.no_grad():
        before_bob = bob(ids).logits.clone()
        before_alice = alice(ids).logits.clone()
    frozen = {n: p.clone() for n, p in shared.model.named_parameters()}
    trainable = [p for p in alice.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=1e-2)
    for _ in range(3):
        alice(ids, labels=ids).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    with torch.no_grad():
        assert not torch.allclose(alice(ids).logits, before_alice)  # alice learned
        assert torch.equal(bob(ids).logits, before_bob)  # bob did not
    for name, param in shared.model.named_parameters():  # and the base weights never moved
        assert torch.equal(param, frozen[name]), name


# ------------------------------------------------------------------------------------------ the schedule


def test_turns_go_round_robin_among_ready_users():
    from openclaw_trl.trainer.sharing import UpdateTurns

    turns = UpdateTurns()
    done = {"alice": 0, "bob": 0, "carol": 0}
    holding = []

    def trainer(name, updates):
        for _ in range(updates):
            turns.take(name)
            holding.append(name)
            assert turns.holder() == name
            time.sleep(0.005)  # the update
            done[name] += 1
            turns.give_back(name)

    threads = [threading.Thread(target=trainer, args=(n, 6)) for n in ("alice", "bob", "carol")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert done == {"alice": 6, "bob": 6, "carol": 6}
    # a user who just updated queues behind the others: no user runs twice while another waits
    for i in range(3, len(turns.order) - 3):
        window = turns.order[i : i + 3]
        assert len(set(window)) == 3, turns.order
    assert turns.holder() is None


def test_giving_back_a_turn_not_held_does_nothing():
    from openclaw_trl.trainer.sharing import UpdateTurns

    turns = UpdateTurns()
    turns.give_back("alice")
    assert turns.take("alice") >= 0 and turns.take("alice") == 0.0  # re-taking a held turn does not queue
    turns.give_back("bob")
    assert turns.holder() == "alice"
    turns.give_back("alice")
    assert turns.holder() is None
