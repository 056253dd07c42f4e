"""Two people's OpenClaw agents (npm ``openclaw``, Node 24) in front of one ``app.py`` with ``users``: each
agent's provider key is its user's API key, and nothing else tells them apart.

Run by ``make test-openclaw`` (see ``tests/test_openclaw_agent.py``). Checked: each agent's turns land in its
user's store only, the same OpenClaw session id of two users is two conversations, one user's ratings update
only that user's adapter, and an agent with a key of no user is refused without storing anything.
"""

from __future__ import annotations

import os
import subprocess
import time

import httpx
import pytest

from tests.test_openclaw_agent import (  # noqa: F401 - openclaw is a fixture
    _agent_turn,
    _home,
    _main_turns,
    _rows,
    app_server,
    openclaw,
)

pytestmark = pytest.mark.openclaw

KEYS = {"alice": "alice-openclaw-key", "bob": "bob-openclaw-key"}


@pytest.fixture(scope="module")
def users_server(tmp_path_factory):
    run = tmp_path_factory.mktemp("openclaw-users")
    env = {"ALICE_KEY": KEYS["alice"], "BOB_KEY": KEYS["bob"]}
    with app_server(run, "--users", "alice:ALICE_KEY", "bob:BOB_KEY", extra_env=env) as url:
        yield url, {name: run / "users" / name / "openclaw.sqlite" for name in KEYS}


def _status(url: str, name: str) -> dict:
    headers = {"Authorization": f"Bearer {KEYS[name]}"}
    return httpx.get(f"{url}/v1/status", headers=headers, timeout=30).json()


def test_each_agent_teaches_its_own_user(openclaw, users_server, tmp_path):  # noqa: F811
    url, stores = users_server
    alice_home = _home(tmp_path / "alice", url, "openai-completions", KEYS["alice"])
    bob_home = _home(tmp_path / "bob", url, "openai-completions", KEYS["bob"])

    for message in ("Hello! What can you do?", "Tell me about apples.", "Thanks, and about pears?"):
        _agent_turn(openclaw, alice_home, "alpha", message)
    _agent_turn(openclaw, bob_home, "alpha", "Hi, I am the other agent.")  # the same session id

    alice_turns, bob_turns = _main_turns(stores["alice"], 0), _main_turns(stores["bob"], 0)
    assert len(alice_turns) == 3 and len({t[1] for t in alice_turns}) == 1, alice_turns
    assert len(bob_turns) == 1, bob_turns
    prompts = _rows(stores["alice"], "SELECT prompt_messages FROM turns")
    assert not any("other agent" in p for (p,) in prompts)

    # alice rates her turns with her key: her adapter updates, bob's does not
    key = alice_turns[0][2]
    for turn, rating in ((alice_turns[0][0], 1), (alice_turns[1][0], -1)):
        answer = httpx.post(
            f"{url}/v1/feedback",
            headers={"Authorization": f"Bearer {KEYS['alice']}"},
            json={"turn_id": turn, "rating": rating, "session_id": key},
            timeout=60,
        )
        assert answer.status_code == 200, answer.text
    deadline = time.monotonic() + 900
    while _status(url, "alice").get("policy_version", 0) < 1:
        assert time.monotonic() < deadline, _status(url, "alice")
        time.sleep(2)
    assert _status(url, "bob")["policy_version"] == 0
    _agent_turn(openclaw, alice_home, "alpha", "One more thing: plums?")
    assert _main_turns(stores["alice"], 0)[-1][5] >= 1  # served by her new adapter
    assert _main_turns(stores["bob"], 0)[-1][5] == 0


def test_an_agent_with_a_key_of_no_user_is_refused(openclaw, users_server, tmp_path):  # noqa: F811
    url, stores = users_server
    before = {name: len(_main_turns(store, 0)) for name, store in stores.items()}
    home = _home(tmp_path, url, "openai-completions", "not-a-user-key")
    binary, node_dir = openclaw
    env = {**os.environ, "HOME": str(home), "PATH": f"{node_dir}:{os.environ.get('PATH', '')}"}
    cmd = [binary, "agent", "--local", "--session-id", "intruder", "--message", "Hello?", "--json"]
    done = subprocess.run(
        cmd, cwd=home.parent / "workspace", env=env, capture_output=True, text=True, timeout=600
    )
    shown = (done.stdout + done.stderr).lower()
    assert done.returncode != 0 or "401" in shown or "api key" in shown or "error" in shown, shown[-2000:]
    assert {name: len(_main_turns(store, 0)) for name, store in stores.items()} == before
