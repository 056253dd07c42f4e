"""What the OpenClaw feedback plugin (``integrations/openclaw``) needs from the server, over real HTTP on a tiny
HF engine: ``POST /v1/feedback`` on ``turn_id: "latest"`` of the session OpenClaw names with its
session-affinity header (``x-session-affinity: <session id>:<n>``), only for that session and that user's key;
bad input is a 400 that stores nothing; the plugin's chat commands, kept in the history OpenClaw re-sends, are
never a turn's next state."""

from __future__ import annotations

import contextlib

import httpx
import pytest

from tests._server_helpers import running_stack
from tests.helpers import tiny_hf_engine

OPENCLAW_SESSION = "ce2f59b1-d59b-438e-ad25-ddcf71413c06"  # what OpenClaw's command handler sees as sessionId


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    with tiny_hf_engine(tiny_model_dir) as engine:
        yield engine


def _chat(
    url: str, messages: list[dict], session: str = OPENCLAW_SESSION, cycle: int = 0, key: str | None = None
):
    """One chat turn as OpenClaw sends it with ``compat.sendSessionAffinityHeaders``; returns its ``openclaw``
    object and the conversation with the reply."""
    headers = {"x-session-affinity": f"{session}:{cycle}", "session_id": f"{session}:{cycle}"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    body = {"model": "openclaw", "messages": messages, "max_tokens": 4}
    r = httpx.post(f"{url}/v1/chat/completions", json=body, headers=headers, timeout=60)
    assert r.status_code == 200, r.text
    reply = r.json()["choices"][0]["message"]["content"] or "..."
    return r.json()["openclaw"], [*messages, {"role": "assistant", "content": reply}]


def _feedback(url: str, body: dict, key: str | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.post(f"{url}/v1/feedback", json=body, headers=headers, timeout=60)


def test_latest_turn_of_the_affinity_session_takes_the_signal(engine, tmp_path):
    with running_stack(engine, tmp_path / "store.db") as stack:
        first, messages = _chat(stack.url, [{"role": "user", "content": "Tell me about apples."}])
        assert first["session_id"] == OPENCLAW_SESSION  # the ":0" compaction counter is not part of the name
        messages.append({"role": "user", "content": "And pears?"})
        second, messages = _chat(stack.url, messages, cycle=1)  # after a compaction: the same session
        assert second["session_id"] == OPENCLAW_SESSION
        store = stack.store
        hint = "Please answer as a bulleted list."
        r = _feedback(
            stack.url, {"turn_id": "latest", "session_id": OPENCLAW_SESSION, "rating": -1, "text": hint}
        )
        assert r.status_code == 200, r.text
        assert r.json()["turn_id"] == second["turn_id"] and r.json()["attached"]
        turn = store.conversations.get_turn(second["turn_id"])
        assert (turn.next_state_source, turn.next_state["text"], turn.next_state["rating"]) == (
            "feedback",
            hint,
            -1,
        )
        assert store.conversations.get_turn(first["turn_id"]).next_state["content"] == "And pears?"

        # the command stays in the history OpenClaw re-sends; it is not the next state of the turn before it
        messages += [
            {"role": "user", "content": "[Mon 2026-12-07 15:38 UTC] /bad " + hint},
            {"role": "user", "content": "[Mon 2026-12-07 15:39 UTC] /learning"},
            {"role": "user", "content": "[Mon 2026-12-07 15:40 UTC] And plums?"},
        ]
        third, messages = _chat(stack.url, messages)
        messages += [{"role": "user", "content": "/learning pause"}, {"role": "user", "content": "Thanks."}]
        _chat(stack.url, messages)
        assert store.conversations.get_turn(third["turn_id"]).next_state["content"] == "Thanks."
        assert (
            store.conversations.get_turn(second["turn_id"]).next_state["text"] == hint
        )  # the feedback stays

        # /good and /undo on the latest turn (the third one)
        fourth = store.conversations.last_main_turn(turn.session_id).id
        r = _feedback(stack.url, {"turn_id": "latest", "session_id": OPENCLAW_SESSION, "rating": 1})
        assert r.status_code == 200 and r.json()["turn_id"] == fourth
        undo = {"turn_id": "latest", "session_id": OPENCLAW_SESSION, "action": "withdraw"}
        r = _feedback(stack.url, undo)
        assert r.status_code == 200 and r.json()["turn_id"] == fourth and r.json()["already"] is False
        assert store.conversations.get_turn(fourth).close_reason == "withdrawn"


def test_latest_turn_of_another_session_or_none_is_a_404_and_bad_input_a_400(engine, tmp_path):
    with running_stack(engine, tmp_path / "store.db") as stack:
        mine, _ = _chat(stack.url, [{"role": "user", "content": "hi"}])
        store = stack.store
        before = store.queries.counts()
        for session in ("someone-else", f"{OPENCLAW_SESSION}:0", "chain-0123"):
            r = _feedback(stack.url, {"turn_id": "latest", "session_id": session, "rating": -1, "text": "no"})
            assert r.status_code == 404, r.text
            assert r.json()["error"]["code"] == "turn_not_found" and session in r.json()["error"]["message"]
        bad = [
            {"turn_id": "latest", "rating": 1},  # no session named
            {"turn_id": "Latest", "session_id": OPENCLAW_SESSION, "rating": 1},
            {"turn_id": "last", "session_id": OPENCLAW_SESSION, "rating": 1},
            {"turn_id": "latest", "session_id": OPENCLAW_SESSION},  # neither a rating nor a text
            {"turn_id": "latest", "session_id": OPENCLAW_SESSION, "rating": 1, "text": "x" * 100_000},
            {"turn_id": "latest", "session_id": "s" * 10_000, "rating": 1},
            {"turn_id": "latest", "session_id": OPENCLAW_SESSION, "action": "undo"},
        ]
        for body in bad:
            r = _feedback(stack.url, body)
            assert r.status_code == 400, (body, r.text)
            assert r.json()["error"]["message"]
        assert store.queries.counts() == before
        assert store.conversations.get_turn(mine["turn_id"]).status == "awaiting"


@contextlib.contextmanager
def _two_users(engine, root):
    """alice and bob, each with their own key, store and collector, on one server: yields (url, stores)."""
    from openclaw_trl.engines.views import AdapterView
    from openclaw_trl.serving.app import ServerThread, UserParts, create_tenants_app
    from openclaw_trl.serving.settings import ServerSettings
    from openclaw_trl.sessions import TurnCollector
    from openclaw_trl.store import Store
    from openclaw_trl.users import UserKeys, UserSpec

    stores, parts = {}, []
    for name in ("alice", "bob"):
        stores[name] = store = Store(root / f"{name}.db")
        parts.append(UserParts(name, AdapterView(engine, name), TurnCollector(store), store))
    environ = {"ALICE_KEY": "sk-alice", "BOB_KEY": "sk-bob"}
    keys = UserKeys((UserSpec("alice", "ALICE_KEY"), UserSpec("bob", "BOB_KEY")), environ=environ)
    server = ServerThread(
        create_tenants_app(parts, ServerSettings(ui=False, default_max_tokens=4), keys)
    ).start()
    try:
        yield server.url, stores
    finally:
        server.stop()
        for store in stores.values():
            store.close()


def test_latest_turn_is_found_only_with_the_users_own_key(tiny_model_dir, tmp_path):
    from openclaw_trl.engines.hf import HFEngine

    engine = HFEngine(tiny_model_dir)
    try:
        with _two_users(engine, tmp_path) as (url, stores):
            alice, _ = _chat(url, [{"role": "user", "content": "hi"}], key="sk-alice")
            before = stores["alice"].queries.counts()
            body = {"turn_id": "latest", "session_id": OPENCLAW_SESSION, "rating": -1, "text": "no"}
            assert _feedback(url, body, key="sk-bob").status_code == 404
            assert _feedback(url, body).status_code == 401
            assert stores["alice"].queries.counts() == before
            r = _feedback(url, body, key="sk-alice")
            assert r.status_code == 200 and r.json()["turn_id"] == alice["turn_id"]
    finally:
        engine.close()


def test_the_plugin_is_installable_and_its_commands_are_the_ones_the_server_skips():
    """The plugin folder holds what ``openclaw plugins install`` reads (the manifest, with the id the entry
    registers, and the entry ``package.json`` names), and the commands it registers are those whose messages
    the server never takes as a next state."""
    import json
    import re
    from pathlib import Path

    from openclaw_trl.sessions.requests import next_state_after
    from openclaw_trl.sessions.side_calls import FEEDBACK_COMMANDS

    folder = Path(__file__).parent.parent / "integrations" / "openclaw"
    manifest = json.loads((folder / "openclaw.plugin.json").read_text())
    package = json.loads((folder / "package.json").read_text())
    entry = folder / package["openclaw"]["extensions"][0]
    source = entry.read_text()
    assert manifest["configSchema"]["type"] == "object" and f'id: "{manifest["id"]}"' in source
    assert sorted(re.findall(r'name: "(\w+)",\n\s+description: "openclaw-trl', source)) == sorted(
        FEEDBACK_COMMANDS
    )

    reply = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    commands = [
        {"role": "user", "content": f"[Mon 2026-12-07 15:38 UTC] /{name} x"} for name in FEEDBACK_COMMANDS
    ]
    assert next_state_after([*reply, *commands], 1) is None
    after = next_state_after([*reply, *commands, {"role": "user", "content": "/goodness me, thanks"}], 1)
    assert after["content"] == "/goodness me, thanks"  # only the commands themselves are skipped


def test_latest_turn_of_a_responses_conversation_named_by_the_session_id_header(engine, tmp_path):
    """OpenClaw's ``openai-responses`` provider with ``compat.sendSessionIdHeader`` sends ``session_id: <id>``."""
    with running_stack(engine, tmp_path / "store.db") as stack:
        body = {"model": "openclaw", "input": "Tell me about apples.", "max_output_tokens": 4, "store": False}
        r = httpx.post(
            f"{stack.url}/v1/responses", json=body, headers={"session_id": OPENCLAW_SESSION}, timeout=60
        )
        assert r.status_code == 200, r.text
        served = stack.store.conversations.last_main_turn_of_key(OPENCLAW_SESSION)
        assert served is not None
        r = _feedback(stack.url, {"turn_id": "latest", "session_id": OPENCLAW_SESSION, "rating": 1})
        assert r.status_code == 200 and r.json()["turn_id"] == served.id and r.json()["attached"]
