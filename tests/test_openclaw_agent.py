"""The real OpenClaw agent (npm ``openclaw``, Node 24) in front of ``app.py`` on ``recipes/tiny_openclaw.yaml``:
OpenClaw's default agent configuration plus one provider entry, nothing else (no session header, no turn type).

Run by ``make test-openclaw``, which installs Node and OpenClaw into an ignored cache folder and sets
``OPENCLAW_BIN`` (the CLI) and ``OPENCLAW_NODE_DIR`` (the folder of the ``node`` binary). Checked: every turn is
answered; each OpenClaw session is one trainable conversation; ratings through ``POST /v1/feedback`` become
samples and an update; the next turn is served by the new adapter; the same through the Responses API and the
Anthropic Messages API (``api: "anthropic-messages"``: OpenClaw sends ``x-api-key``, ``anthropic-version:
2023-06-01``, ``stream: true``, its system prompt as two text blocks and its tools with ``cache_control``, and each
user message as text blocks, its per-turn internal context a user message of its own); and a session over the
Anthropic Messages API that OpenClaw compacts (its memory flush and summary requests stored as side turns, the
turns before and after the compaction one trainable conversation that learns from ratings).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.openclaw

ROOT = Path(__file__).parent.parent
RECIPE = "recipes/tiny_openclaw.yaml"
TURN_TIMEOUT_S = 600


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def openclaw() -> tuple[str, str]:
    binary, node_dir = os.environ.get("OPENCLAW_BIN"), os.environ.get("OPENCLAW_NODE_DIR")
    if not binary or not Path(binary).exists() or not node_dir:
        pytest.fail(
            "OPENCLAW_BIN / OPENCLAW_NODE_DIR are not set: run `make test-openclaw`, which installs them"
        )
    return binary, node_dir


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """``app.py`` on the tiny OpenClaw recipe, on a free port; yields (base URL, store path)."""
    run = tmp_path_factory.mktemp("openclaw-run")
    with app_server(run) as url:
        yield url, run / "openclaw.sqlite"


@contextlib.contextmanager
def app_server(run: Path, *extra: str, extra_env: dict | None = None):
    """``app.py`` on the tiny OpenClaw recipe (plus ``extra`` arguments), on a free port, its output in
    ``run``; yields its base URL once ``/healthz`` answers."""
    port = _free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False", "PYTHONPATH": str(ROOT)}
    env.update(extra_env or {})
    log = (run / "app.log").open("w")
    cmd = [
        sys.executable,
        "app.py",
        "--config",
        RECIPE,
        "--output_dir",
        str(run),
        "--port",
        str(port),
        *extra,
    ]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 600
    while True:
        if proc.poll() is not None:
            pytest.fail(f"app.py ended at start: {(run / 'app.log').read_text()[-3000:]}")
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail("app.py did not answer within 600 s")
        time.sleep(1)
    try:
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def _home(
    tmp_path: Path,
    url: str,
    api: str,
    api_key: str = "sk-local",
    compat: dict | None = None,
    compaction: dict | None = None,
) -> Path:
    """A throwaway HOME whose OpenClaw config is the default agent plus one provider entry (``api``, with
    ``api_key`` as the provider's key; the Anthropic client adds ``/v1/messages`` to the server's root itself;
    ``compat``: the model entry's compat flags, e.g. ``sendSessionAffinityHeaders``; ``compaction``: the agent's
    ``agents.defaults.compaction`` settings)."""
    home, workspace = tmp_path / "home", tmp_path / "workspace"
    (home / ".openclaw").mkdir(parents=True)
    workspace.mkdir()
    base_url = url if api == "anthropic-messages" else f"{url}/v1"
    model = {
        "id": "openclaw",
        "name": "openclaw-trl",
        "reasoning": False,
        "input": ["text"],
        "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0},
        "contextWindow": 65536,
        "maxTokens": 32,
        **({"compat": compat} if compat else {}),
    }
    config = {
        "agents": {
            "defaults": {
                "model": {"primary": "trl/openclaw"},
                "workspace": str(workspace),
                **({"compaction": compaction} if compaction else {}),
            }
        },
        "models": {
            "mode": "merge",
            "providers": {"trl": {"baseUrl": base_url, "apiKey": api_key, "api": api, "models": [model]}},
        },
    }
    (home / ".openclaw" / "openclaw.json").write_text(json.dumps(config))
    return home


def _agent_turn(openclaw, home: Path, session: str, message: str) -> str:
    """One ``openclaw agent --local`` turn; returns the reply text OpenClaw shows (asserting it answered)."""
    binary, node_dir = openclaw
    env = {**os.environ, "HOME": str(home), "PATH": f"{node_dir}:{os.environ.get('PATH', '')}"}
    cmd = [binary, "agent", "--local", "--session-id", session, "--message", message, "--json"]
    done = subprocess.run(
        cmd, cwd=home.parent / "workspace", env=env, capture_output=True, text=True, timeout=TURN_TIMEOUT_S
    )
    assert done.returncode == 0, f"openclaw exited {done.returncode}: {done.stderr[-3000:]}"
    result = json.loads(done.stdout)
    texts = [p.get("text") or "" for p in result.get("payloads", [])]
    assert texts and any(t.strip() for t in texts), f"no reply shown: {done.stdout[-2000:]}"
    assert not any("error" in t.lower() and "context" in t.lower() for t in texts), texts
    return "\n".join(texts)


def _rows(store: Path, sql: str, *params) -> list[tuple]:
    with sqlite3.connect(store) as conn:
        return conn.execute(sql, params).fetchall()


def _main_turns(store: Path, since_turn: int) -> list[tuple]:
    """``(turn id, session id, session key, trainable, status, policy version)`` of main turns after a turn id."""
    return _rows(
        store,
        "SELECT t.id, t.session_id, s.key, t.trainable, t.status, t.policy_version FROM turns t"
        " JOIN sessions s ON s.id = t.session_id WHERE t.turn_type = 'main' AND t.id > ? ORDER BY t.id",
        since_turn,
    )


def _last_turn(store: Path) -> int:
    return _rows(store, "SELECT COALESCE(MAX(id), 0) FROM turns")[0][0]


def _rate(url: str, turn_id: int, session_key: str, rating: int) -> None:
    body = {"turn_id": turn_id, "rating": rating, "session_id": session_key}
    response = httpx.post(f"{url}/v1/feedback", json=body, timeout=60)
    assert response.status_code == 200, response.text


def _wait_for_version(url: str, version: int, timeout: float = 900) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = httpx.get(f"{url}/v1/status", timeout=30).json()
        if status.get("policy_version", 0) >= version:
            return
        time.sleep(2)
    pytest.fail(f"no update to policy version {version} within {timeout} s: {status}")


def _session_turns_are_one_conversation(turns: list[tuple], n: int) -> tuple[int, str]:
    assert len(turns) == n, turns
    sessions = {t[1] for t in turns}
    assert len(sessions) == 1, f"one OpenClaw session became {len(sessions)} conversations: {turns}"
    assert all(t[3] == 1 for t in turns), f"turns not trainable: {turns}"
    return turns[0][1], turns[0][2]


def _check_side_turns(store: Path, since_turn: int) -> None:
    """Whatever side calls OpenClaw made were stored as side turns, never trainable."""
    rows = _rows(store, "SELECT trainable, status FROM turns WHERE turn_type = 'side' AND id > ?", since_turn)
    assert all(trainable == 0 and status == "closed" for trainable, status in rows), rows


def _rated_then_served_by_the_update(openclaw, server, home, agent, turns, version, start, message) -> None:
    """Rate the first two turns (+1, -1), wait for the update, and check that ``message``'s turn joins the same
    conversation and is served by the new version."""
    url, store = server
    session_id, key = turns[0][1], turns[0][2]
    _rate(url, turns[0][0], key, 1)
    _rate(url, turns[1][0], key, -1)
    _wait_for_version(url, version + 1)
    _agent_turn(openclaw, home, agent, message)
    latest = _main_turns(store, start)[-1]
    assert latest[1] == session_id and latest[5] >= version + 1, latest


def test_openclaw_chat_completions_sessions_learn(openclaw, server, tmp_path):
    url, store = server
    home = _home(tmp_path, url, "openai-completions")
    start = _last_turn(store)
    for message in ("Hello! What can you do?", "Tell me about apples.", "Thanks, and about pears?"):
        _agent_turn(openclaw, home, "alpha", message)
    turns = _main_turns(store, start)
    session_id, key = _session_turns_are_one_conversation(turns, 3)
    # each of the first two took the next message as its next state (the feedback judge reads ratings only)
    states = _rows(store, "SELECT next_state_source FROM turns WHERE id IN (?, ?)", turns[0][0], turns[1][0])
    assert states == [("request",), ("request",)], states
    _check_side_turns(store, start)

    # a second OpenClaw session is its own conversation
    second_start = _last_turn(store)
    for message in ("Write a haiku.", "Shorter, please."):
        _agent_turn(openclaw, home, "beta", message)
    other = _main_turns(store, second_start)
    other_session, _ = _session_turns_are_one_conversation(other, 2)
    assert other_session != session_id

    # ratings become samples and an update; the next turn is served by the new adapter
    _rate(url, turns[0][0], key, 1)
    _rate(url, turns[1][0], key, -1)
    _wait_for_version(url, 1)
    _agent_turn(openclaw, home, "alpha", "One more thing: plums?")
    latest = _main_turns(store, _last_turn(store) - 50)[-1]
    assert latest[1] == session_id and latest[5] >= 1, latest


def test_openclaw_responses_api_sessions_learn(openclaw, server, tmp_path):
    url, store = server
    home = _home(tmp_path, url, "openai-responses")
    start = _last_turn(store)
    version = httpx.get(f"{url}/v1/status", timeout=30).json().get("policy_version", 0)
    for message in ("Hi there.", "What is a pear?", "And a plum?"):
        _agent_turn(openclaw, home, "gamma", message)
    turns = _main_turns(store, start)
    session_id, key = _session_turns_are_one_conversation(turns, 3)
    assert _rows(store, "SELECT COUNT(*) FROM responses")[0][0] == 0  # store: false: nothing kept by id
    _check_side_turns(store, start)
    _rate(url, turns[0][0], key, 1)
    _rate(url, turns[1][0], key, 1)
    _wait_for_version(url, version + 1)
    _agent_turn(openclaw, home, "gamma", "Thanks!")
    latest = _main_turns(store, start)[-1]
    assert latest[1] == session_id and latest[5] >= version + 1, latest


def test_openclaw_anthropic_messages_sessions_learn(openclaw, server, tmp_path):
    url, store = server
    home = _home(tmp_path, url, "anthropic-messages")
    start = _last_turn(store)
    version = httpx.get(f"{url}/v1/status", timeout=30).json().get("policy_version", 0)
    for message in ("Hi there.", "What is an apple?", "And a pear?"):
        _agent_turn(openclaw, home, "delta", message)
    turns = _main_turns(store, start)
    _session_turns_are_one_conversation(turns, 3)
    states = _rows(store, "SELECT next_state_source FROM turns WHERE id IN (?, ?)", turns[0][0], turns[1][0])
    assert states == [("request",), ("request",)], states
    _check_side_turns(store, start)
    _rated_then_served_by_the_update(openclaw, server, home, "delta", turns, version, start, "Thanks!")


COMPACT_EARLY = {
    "maxActiveTranscriptBytes": 2000,  # compact before a turn once the transcript reaches 2,000 bytes
    "keepRecentTokens": 200,  # keep only a short tail verbatim, so that there is something to summarise
    "memoryFlush": {
        "forceFlushTranscriptBytes": 2000
    },  # and flush memories first, as before a real compaction
    "qualityGuard": {"enabled": False},  # the tiny model's summaries lack the required headings
}
NOTES = "Please remember these notes. " + " ".join(
    f"Note {i}: the quick brown fox jumps over the lazy dog near project Falcon." for i in range(30)
)


def _side_turns(store: Path, since_turn: int) -> list[tuple[str | None, int, str]]:
    """``(side call kind, trainable, status)`` of the side turns after a turn id."""
    from openclaw_trl.sessions.side_calls import side_call_kind

    rows = _rows(
        store,
        "SELECT prompt_messages, tools, trainable, status FROM turns WHERE turn_type = 'side' AND id > ?",
        since_turn,
    )
    return [(side_call_kind(json.loads(p), json.loads(t) if t else None), tr, st) for p, t, tr, st in rows]


def test_openclaw_anthropic_messages_session_compacts_and_learns(openclaw, server, tmp_path):
    """A session over ``anthropic-messages`` that OpenClaw compacts (a memory flush, then a summary of the
    history, before its second turn) stays one trainable conversation and learns from ratings."""
    url, store = server
    home = _home(tmp_path, url, "anthropic-messages", compaction=COMPACT_EARLY)
    start = _last_turn(store)
    version = httpx.get(f"{url}/v1/status", timeout=30).json().get("policy_version", 0)
    _agent_turn(openclaw, home, "epsilon", NOTES)
    _agent_turn(openclaw, home, "epsilon", "Thanks. What is an apple?")
    turns = _main_turns(store, start)
    _session_turns_are_one_conversation(turns, 2)
    after = json.loads(_rows(store, "SELECT prompt_messages FROM turns WHERE id = ?", turns[1][0])[0][0])
    assert "compacted into the following summary" in json.dumps(after), "OpenClaw did not compact"
    side = _side_turns(store, start)
    kinds = [kind for kind, _, _ in side]
    assert "memory_flush" in kinds and "compaction" in kinds, side
    assert all(trainable == 0 and status == "closed" for _, trainable, status in side), side
    state = _rows(store, "SELECT next_state_source, next_state FROM turns WHERE id = ?", turns[0][0])[0]
    assert state[0] == "request" and "What is an apple?" in state[1], state

    _rated_then_served_by_the_update(openclaw, server, home, "epsilon", turns, version, start, "And a pear?")
