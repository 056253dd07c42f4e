"""A run with two users end to end: real HTTP on 127.0.0.1 with the ``openai`` client, the tiny model, real
SQLite stores, real training threads. Every boundary between the users is crossed with the other user's key:
turns, sessions, feedback, stored responses, versions, rollback, pause, status, hints and adapters."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.helpers import wait_until

KEYS = {"ALICE_KEY": "alice-secret-key", "BOB_KEY": "bob-secret-key"}


def _argv(tmp_path, *extra):
    argv = ["--config", "recipes/tiny_simulated.yaml", "--output_dir", str(tmp_path / "run")]
    argv += [
        "--users",
        "alice:ALICE_KEY",
        "bob:BOB_KEY",
        "--batch_size",
        "2",
        "--per_device_train_batch_size",
        "2",
    ]
    return argv + list(extra)


@pytest.fixture
def keys(monkeypatch):
    for env, key in KEYS.items():
        monkeypatch.setenv(env, key)
    return {"alice": KEYS["ALICE_KEY"], "bob": KEYS["BOB_KEY"]}


def _load(argv):
    from openclaw_trl.runtime import load_recipe

    return load_recipe(argv)


def test_two_users_train_their_own_adapters_and_continue_after_a_restart(tmp_path, keys, capsys):
    from openclaw_trl.runtime import build_runtime, run

    config, model_args, recipe = _load(_argv(tmp_path, "--max_steps", "1"))
    runtime = build_runtime(config, model_args, recipe)
    assert [u.name for u in runtime.users] == ["alice", "bob"] and all(u.trainer for u in runtime.users)
    metrics = run(runtime)
    assert set(metrics) == {"alice", "bob"}
    for user in runtime.users:
        assert metrics[user.name]["policy_version"] == 1
        assert runtime.engine.adapter_version(user.name) == 1
        folder = tmp_path / "run" / "users" / user.name
        assert (folder / "adapter_model.safetensors").exists() and (folder / "openclaw.sqlite").exists()
        assert (folder / "checkpoint-1").is_dir()
        sessions = {t.session_key for t in user.store.queries.iter_turns(include_private=True)}
        assert sessions and all(s and s.startswith("sim") for s in sessions)
    assert not (tmp_path / "run" / "openclaw.sqlite").exists()  # no shared store
    # the trainers took turns on the device: each updated once
    order = runtime.users[0].trainer.update_turns.order
    assert sorted(order) == ["alice", "bob"]
    # the two adapters differ (each learned from its own turns)
    import safetensors.torch as st

    a = st.load_file(str(tmp_path / "run" / "users" / "alice" / "adapter_model.safetensors"))
    b = st.load_file(str(tmp_path / "run" / "users" / "bob" / "adapter_model.safetensors"))
    assert a.keys() == b.keys() and any(not (a[k] == b[k]).all() for k in a)

    # the same command with a higher max_steps continues each user from their checkpoint
    from openclaw_trl.commands.train import run_argv

    capsys.readouterr()
    assert run_argv(_argv(tmp_path, "--max_steps", "2", "--json-summary")) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["users"]
    assert {name: s["policy_version"] for name, s in summary.items()} == {"alice": 2, "bob": 2}
    for name in ("alice", "bob"):
        path = tmp_path / "run" / "users" / name / "metrics.jsonl"
        logged = [json.loads(line) for line in path.read_text().splitlines()]
        assert sorted({m["step"] for m in logged if "loss" in m}) == [1, 2]  # continued, not restarted

    # one user's training that fails stops the run with that error, every user's checkpoint kept
    (tmp_path / "run" / "users" / "bob" / "checkpoint-2" / "rng_state.pth").write_bytes(b"not a checkpoint")
    config, model_args, recipe = _load(_argv(tmp_path, "--max_steps", "4"))
    runtime = build_runtime(config, model_args, recipe)
    with pytest.raises(RuntimeError, match="the training of user bob ended with an error"):
        run(runtime)
    for name in ("alice", "bob"):
        assert (tmp_path / "run" / "users" / name / "checkpoint-2" / "trainer_state.json").exists()


@pytest.fixture
def live(tmp_path, keys):
    """A two-user server (UI off) with scorers, no trainer: the routes on real HTTP."""
    from openclaw_trl.runtime import build_runtime, start_server

    config, model_args, recipe = _load(_argv(tmp_path, "--source", "live", "--correction_window_s", "0"))
    runtime = build_runtime(config, model_args, recipe, train=False)
    for user in runtime.users:
        user.scorer.start()
    server = start_server(runtime, port=0, ui=False)
    yield runtime, server.url, keys
    runtime.close()


def _client(url, key):
    from openai import OpenAI

    return OpenAI(base_url=url + "/v1", api_key=key, max_retries=0)


def _chat(url, key, session, text="Tell me about apples."):
    response = httpx.post(
        url + "/v1/chat/completions",
        headers={"Authorization": f"Bearer {key}", "X-Session-Id": session},
        json={"model": "openclaw", "messages": [{"role": "user", "content": text}], "max_tokens": 8},
        timeout=120,
    )
    assert response.status_code == 200, response.text
    return response


def test_each_key_reaches_only_its_user(live):
    runtime, url, keys = live
    alice, bob = (next(u for u in runtime.users if u.name == n) for n in ("alice", "bob"))

    # the openai client with each key: each turn lands in its user's store only
    reply = _client(url, keys["alice"]).chat.completions.create(
        model="openclaw", messages=[{"role": "user", "content": "hi from alice"}], max_tokens=8
    )
    assert reply.choices[0].message is not None
    first = _chat(url, keys["alice"], "shared-name")
    _chat(url, keys["bob"], "shared-name", "hi from bob")  # the same session id is another conversation
    a_turns = list(alice.store.queries.iter_turns(include_private=True))
    b_turns = list(bob.store.queries.iter_turns(include_private=True))
    assert len(a_turns) == 2 and len(b_turns) == 1
    assert all("bob" not in json.dumps(t.prompt_messages) for t in a_turns)
    assert "hi from bob" in json.dumps(b_turns[0].prompt_messages)
    alice_turn = int(first.headers["x-openclaw-turn-id"])

    # bob cannot rate, correct, reject or withdraw alice's turn (it does not exist for him)
    for body in (
        {"turn_id": alice_turn, "session_id": "shared-name", "rating": -1},
        {
            "turn_id": alice_turn,
            "session_id": "shared-name",
            "action": "correct",
            "text": "Please use bullets.",
        },
        {"turn_id": alice_turn, "session_id": "shared-name", "action": "reject"},
        {"turn_id": alice_turn, "session_id": "shared-name", "action": "withdraw"},
    ):
        answer = httpx.post(
            url + "/v1/feedback", headers={"Authorization": f"Bearer {keys['bob']}"}, json=body
        )
        assert answer.status_code == 404, (body, answer.text)
    assert all(t.next_state is None for t in alice.store.queries.iter_turns(include_private=True))

    # alice corrects her own turn: the hint is hers alone (bob's judge and teacher never see it)
    answer = httpx.post(
        url + "/v1/feedback",
        headers={"Authorization": f"Bearer {keys['alice']}"},
        json={
            "turn_id": alice_turn,
            "session_id": "shared-name",
            "action": "correct",
            "text": "Please answer as a bulleted list.",
        },
    )
    assert answer.status_code == 200, answer.text
    wait_until(lambda: alice.store.queries.recent_hints(16), timeout=60, what="alice's hint")
    assert any("bullet" in h for h in alice.store.queries.recent_hints(16))
    assert bob.store.queries.recent_hints(16) == []

    # status, versions and the learning switch are each user's own
    for name in ("alice", "bob"):
        headers = {"Authorization": f"Bearer {keys[name]}"}
        status = httpx.get(url + "/v1/status", headers=headers).json()
        assert status["policy_version"] == 0
        assert httpx.get(url + "/v1/learning", headers=headers).json()["paused"] is False
    paused = httpx.post(
        url + "/v1/learning", headers={"Authorization": f"Bearer {keys['bob']}"}, json={"paused": True}
    )
    assert paused.status_code == 200 and bob.learning.paused and not alice.learning.paused

    # keys: none, wrong, another user's name as a key, alice's key with a stray space inside
    for auth in (None, "Bearer nope", "Bearer alice", "Bearer alice-secret key", "alice-secret-key"):
        headers = {"Authorization": auth} if auth else {}
        answer = httpx.get(url + "/v1/status", headers=headers)
        assert answer.status_code == 401 and answer.json()["error"]["code"] in (
            "missing_api_key",
            "invalid_api_key",
        )
    assert httpx.get(url + "/healthz").json()["policy_version"] == 0  # open, and names no user's version

    # a user's oversized or malformed request gets the same 4xx JSON as without users, and stores nothing
    stored = {u.name: len(list(u.store.queries.iter_turns(include_private=True))) for u in runtime.users}
    headers = {"Authorization": f"Bearer {keys['alice']}", "Content-Type": "application/json"}
    limit = runtime.config.max_request_bytes
    too_big = httpx.post(url + "/v1/chat/completions", headers=headers, content=b"{" + b" " * limit + b"}")
    assert too_big.status_code == 413 and too_big.json()["error"]["code"]
    broken = httpx.post(url + "/v1/chat/completions", headers=headers, content=b'{"model": "openclaw", "mess')
    assert broken.status_code == 400 and broken.json()["error"]["code"] == "invalid_json"
    assert stored == {
        u.name: len(list(u.store.queries.iter_turns(include_private=True))) for u in runtime.users
    }


def test_a_stored_response_is_read_only_by_its_user(live):
    runtime, url, keys = live
    created = httpx.post(
        url + "/v1/responses",
        headers={"Authorization": f"Bearer {keys['alice']}"},
        json={"model": "openclaw", "input": "hello", "max_output_tokens": 8},
        timeout=120,
    )
    assert created.status_code == 200, created.text
    rid = created.json()["id"]
    mine = httpx.get(url + f"/v1/responses/{rid}", headers={"Authorization": f"Bearer {keys['alice']}"})
    theirs = httpx.get(url + f"/v1/responses/{rid}", headers={"Authorization": f"Bearer {keys['bob']}"})
    assert mine.status_code == 200 and theirs.status_code == 404
    # nor can bob continue alice's conversation by its id
    follow = httpx.post(
        url + "/v1/responses",
        headers={"Authorization": f"Bearer {keys['bob']}"},
        json={"model": "openclaw", "input": "and then?", "previous_response_id": rid, "max_output_tokens": 8},
        timeout=120,
    )
    assert follow.status_code == 404, follow.text


class _App:
    """``app.py`` with two users on the tiny simulated recipe, in a subprocess whose output goes to files (a
    pipe nobody reads would block the server once full). Used as a context manager: the process is killed on
    the way out, whatever happened, so a failing test never leaves a server training in the background."""

    def __init__(self, run, name: str, *extra):
        import os
        import subprocess
        import sys
        from pathlib import Path

        root = Path(__file__).parent.parent
        env = {**os.environ, **KEYS, "HF_HUB_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False"}
        cmd = [
            sys.executable,
            "app.py",
            *_argv(run.parent, "--output_dir", str(run), *extra),
            "--json-summary",
        ]
        self.run, self.out_path, self.err_path = run, run.parent / f"{name}.out", run.parent / f"{name}.err"
        with open(self.out_path, "w") as out, open(self.err_path, "w") as err:
            self.proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=out, stderr=err, text=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def stderr(self) -> str:
        return self.err_path.read_text()

    def stdout(self) -> str:
        return self.out_path.read_text()

    def state(self) -> str:
        """What each user's store shows (for a failure message): updates consumed, samples waiting, turns
        judged and failed, and the end of the server's log."""
        lines = [f"process alive: {self.proc.poll() is None}"]
        for name in ("alice", "bob"):
            lines.append(f"{name}: {_store_counts(self.run, name)}")
        lines.append("log tail:\n" + "\n".join(self.stderr().splitlines()[-30:]))
        return "\n".join(lines)


def _store_counts(run, name) -> dict:
    import sqlite3

    queries = {
        "last consumed step": "SELECT MAX(consumed_step) FROM samples",
        "samples waiting": "SELECT COUNT(*) FROM samples WHERE consumed_step IS NULL AND dropped_reason IS NULL",
        "turns": "SELECT COUNT(*) FROM turns",
        "turns judged": "SELECT COUNT(*) FROM turns WHERE status = 'judged'",
        "turns failed": "SELECT COUNT(*) FROM turns WHERE status = 'failed'",
    }
    try:
        with sqlite3.connect(run / "users" / name / "openclaw.sqlite") as conn:
            return {k: conn.execute(q).fetchone()[0] for k, q in queries.items()}
    except sqlite3.Error as err:
        return {"store": str(err)}


def _consumed_step(run, name) -> int:
    return _store_counts(run, name).get("last consumed step") or 0


def _wait_for_users(app: _App, predicate, what: str, timeout: float = 600) -> None:
    """``wait_until`` that names, on a timeout, what each user's store held and what the server logged."""

    def ready():
        if app.proc.poll() is not None:
            raise AssertionError(f"the server exited (code {app.proc.returncode}) while waiting for {what}")
        return predicate()

    try:
        wait_until(ready, timeout=timeout, what=what)
    except AssertionError as err:
        raise AssertionError(f"{err}\n{app.state()}") from None


@pytest.mark.slow
def test_sigkill_and_sigterm_keep_every_users_updates(tmp_path):
    """SIGKILL loses nothing that was checkpointed and the rerun continues each user from their own latest
    checkpoint; SIGTERM stops both trainers between updates, each with a checkpoint of its last update."""
    import signal

    run = tmp_path / "run"
    with _App(run, "first", "--max_steps", "1000") as first:
        _wait_for_users(
            first,
            lambda: all(
                (run / "users" / n / "checkpoint-2" / "trainer_state.json").exists() for n in ("alice", "bob")
            ),
            "two checkpointed updates of each user",
        )
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait()
    kept = {}
    for name in ("alice", "bob"):
        steps = [int(p.name.split("-")[1]) for p in (run / "users" / name).glob("checkpoint-*")]
        kept[name] = max(steps)
        assert kept[name] >= 2

    with _App(run, "second", "--max_steps", "1000") as second:
        _wait_for_users(
            second,
            lambda: all(_consumed_step(run, n) > kept[n] for n in kept),
            f"one more update of each user after the restart (checkpoints kept: {kept})",
        )
        second.proc.send_signal(signal.SIGTERM)
        second.proc.wait(timeout=300)
        err = second.stderr()
        assert second.proc.returncode == 0, err[-3000:]
        summary = json.loads(second.stdout().strip().splitlines()[-1])["users"]
    for name in ("alice", "bob"):
        step = summary[name]["policy_version"]
        assert step > kept[name], (name, step, kept)  # continued from the checkpoint, not from 0
        checkpoint = run / "users" / name / f"checkpoint-{step}"
        for part in ("adapter_model.safetensors", "optimizer.pt", "scheduler.pt", "trainer_state.json"):
            assert (checkpoint / part).exists(), (name, part)
        assert _consumed_step(run, name) == step  # the store agrees: nothing consumed after the checkpoint
        assert f"user {name}: stopped at v{step}" in err


def test_trainers_of_one_process_load_checkpoint_rng_states_at_once(tiny_model_dir, tmp_path):
    """Two users' trainers resuming together load their RNG states at the same moment: each load succeeds (the
    Trainer's load goes through torch's process-wide allow-list of safe globals, set and restored around it)."""
    import threading

    from openclaw_trl.store import Store
    from tests.trainer_helpers import make_trainer

    trainers = [
        make_trainer(tiny_model_dir, tmp_path / name, Store(tmp_path / f"{name}.sqlite"))
        for name in ("a", "b")
    ]
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    trainers[0]._save_rng_state(str(checkpoint))  # python, numpy and torch states, as a checkpoint holds them
    errors, start = [], threading.Barrier(2)

    def load(trainer):
        start.wait()
        for _ in range(200):
            try:
                trainer._load_rng_state(str(checkpoint))
            except Exception as err:  # noqa: BLE001 - collected: the assertion below names it
                errors.append(err)

    threads = [threading.Thread(target=load, args=(t,)) for t in trainers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
