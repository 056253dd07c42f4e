"""The feedback plugin (``integrations/openclaw``) in the real OpenClaw gateway (npm ``openclaw``, Node 24) in
front of ``app.py`` on ``recipes/tiny_openclaw.yaml``.

``openclaw agent --message`` does not run chat commands, so the test drives OpenClaw the way its own chat
clients do: ``openclaw plugins install`` puts the plugin into a throwaway HOME, ``openclaw gateway run`` serves
that HOME, and every message (the person's questions and the commands alike) goes through the gateway's
``chat.send`` (``openclaw gateway call``); ``chat.history`` shows what the person sees. Checked: a command is
answered by the plugin, never by the model (no turn is served for it); ``/good`` and
``/bad Please answer as a bulleted list.`` land on the right turns (that text is the turn's stored
correction, the hint); the update they make follows; ``/learning`` reports it, and pauses and resumes learning.

Run by ``make test-openclaw`` (``OPENCLAW_BIN`` / ``OPENCLAW_NODE_DIR`` as for ``tests/test_openclaw_agent.py``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import time
import uuid
from pathlib import Path

import httpx
import pytest

from tests.test_openclaw_agent import (  # noqa: F401 - openclaw is a fixture
    _free_port,
    _home,
    _main_turns,
    _rows,
    _wait_for_version,
    app_server,
    openclaw,
)

pytestmark = pytest.mark.openclaw

ROOT = Path(__file__).parent.parent
PLUGIN = ROOT / "integrations" / "openclaw"
HINT = "Please answer as a bulleted list."
TOKEN = "gateway-test-token"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _env(home: Path, node_dir: str) -> dict:
    return {**os.environ, "HOME": str(home), "PATH": f"{node_dir}:{os.environ.get('PATH', '')}"}


def _openclaw(openclaw, home: Path, *args: str, timeout: float = 300) -> str:  # noqa: F811
    binary, node_dir = openclaw
    done = subprocess.run(
        [binary, *args], cwd=home.parent / "workspace", env=_env(home, node_dir), capture_output=True, text=True,
        timeout=timeout,
    )  # fmt: skip
    assert done.returncode == 0, (
        f"openclaw {args[:3]} exited {done.returncode}: {done.stdout[-2000:]} {done.stderr[-2000:]}"
    )
    return done.stdout


@contextlib.contextmanager
def _gateway(openclaw, home: Path):  # noqa: F811
    """``openclaw gateway run`` on a free loopback port; yields the port once it says it is ready."""
    binary, node_dir = openclaw
    port = _free_port()
    log = (home.parent / "gateway.log").open("w")
    cmd = [binary, "gateway", "run", "--port", str(port), "--bind", "loopback", "--auth", "token"]
    cmd += ["--token", TOKEN, "--allow-unconfigured"]
    proc = subprocess.Popen(
        cmd, cwd=home.parent / "workspace", env=_env(home, node_dir), stdout=log, stderr=log
    )
    try:
        deadline = time.monotonic() + 300
        while True:
            if proc.poll() is not None:
                pytest.fail(
                    f"the gateway ended at start: {(home.parent / 'gateway.log').read_text()[-3000:]}"
                )
            lines = ANSI.sub("", (home.parent / "gateway.log").read_text()).splitlines()
            if any(line.rstrip().endswith("[gateway] ready") for line in lines):
                break
            if time.monotonic() > deadline:
                pytest.fail("the gateway was not ready within 300 s")
            time.sleep(1)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


class Chat:
    """One OpenClaw conversation through the gateway's chat RPCs."""

    def __init__(self, openclaw, home: Path, port: int):  # noqa: F811
        self.openclaw, self.home, self.port = openclaw, home, port
        self.key = f"agent:main:plugin-{uuid.uuid4().hex[:8]}"

    def _call(self, method: str, params: dict, tries: int = 3) -> dict:
        """One gateway RPC (tried again when the gateway, busy on two shared cores, answers too late)."""
        binary, node_dir = self.openclaw
        args = ["gateway", "call", method, "--port", str(self.port), "--token", TOKEN, "--json", "--timeout"]
        cmd = [binary, *args, "60000", "--params", json.dumps(params)]
        for _ in range(tries):
            done = subprocess.run(
                cmd, cwd=self.home.parent / "workspace", env=_env(self.home, node_dir), capture_output=True,
                text=True, timeout=120,
            )  # fmt: skip
            if done.returncode == 0:
                return json.loads(done.stdout)
            time.sleep(2)
        pytest.fail(
            f"gateway call {method} failed {tries} times: {done.stdout[-2000:]} {done.stderr[-2000:]}"
        )

    def history(self) -> dict:
        return self._call("chat.history", {"sessionKey": self.key})

    def send(self, message: str, timeout: float = 600) -> str:
        """Sends ``message``; returns the text of the answer that follows it, once it is there."""
        before = len(self.history().get("messages", []))
        self._call(
            "chat.send", {"sessionKey": self.key, "message": message, "idempotencyKey": uuid.uuid4().hex}
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            messages = self.history().get("messages", [])[before:]
            answers = [m for m in messages if m.get("role") == "assistant" and _text(m).strip()]
            if answers:
                return _text(answers[-1])
            time.sleep(2)
        pytest.fail(f"no answer to {message!r} within {timeout} s: {self.history()}")


def _text(message: dict) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    return "\n".join(part.get("text") or "" for part in content or [] if isinstance(part, dict))


def test_chat_commands_rate_the_last_reply_and_report_the_update(openclaw, tmp_path):  # noqa: F811
    run = tmp_path / "run"
    run.mkdir()
    with app_server(run) as url:
        store = run / "openclaw.sqlite"
        home = _home(tmp_path, url, "openai-completions", compat={"sendSessionAffinityHeaders": True})
        out = _openclaw(openclaw, home, "plugins", "install", "--force", "--accept-capabilities", str(PLUGIN))
        assert "Installed plugin: openclaw-trl" in out, out
        with _gateway(openclaw, home) as port:
            chat = Chat(openclaw, home, port)
            chat.send("Tell me about apples.")
            session = chat.history()["sessionId"]
            first = _main_turns(store, 0)
            assert first and {t[2] for t in first} == {session}, (
                first
            )  # the server names it OpenClaw's session id
            answer = chat.send("/good")
            assert "👍" in answer and f"turn {first[-1][0]}" in answer, answer
            chat.send("And pears?")
            turns = _main_turns(store, 0)
            assert len(turns) == len(first) + 1 and turns[-1][2] == session, turns
            answer = chat.send(f"/bad {HINT}")
            assert "👎" in answer and f"turn {turns[-1][0]}" in answer, answer
            assert len(_main_turns(store, 0)) == len(turns)  # the commands reached no model
            rows = _rows(store, "SELECT turn_id, rating, text FROM feedback ORDER BY id")
            assert rows == [(first[-1][0], 1, None), (turns[-1][0], -1, HINT)], rows
            state = json.loads(_rows(store, "SELECT next_state FROM turns WHERE id = ?", turns[-1][0])[0][0])
            assert state["text"] == HINT and state["rating"] == -1, state

            _wait_for_version(url, 1)
            answer = chat.send("/learning")
            assert "Serving version 1" in answer and "Learning is on" in answer, answer
            assert "paused" in chat.send("/learning pause")
            assert httpx.get(f"{url}/v1/learning", timeout=30).json()["paused"] is True
            assert "resumed" in chat.send("/learning resume")
            assert httpx.get(f"{url}/v1/learning", timeout=30).json()["paused"] is False
            assert "/learning takes nothing, pause or resume" in chat.send("/learning faster")

            # the next message is served by the new adapter; the commands in the history are no next state
            chat.send("And plums?")
            latest = _main_turns(store, 0)[-1]
            assert latest[2] == session and latest[5] >= 1, latest
            answer = chat.send("/undo")
            assert "Withdrawn" in answer and f"turn {latest[0]}" in answer, answer
            assert _rows(store, "SELECT close_reason FROM turns WHERE id = ?", latest[0]) == [("withdrawn",)]


def test_the_plugins_own_tests_pass(openclaw):  # noqa: F811
    """``feedback.test.mjs`` (Node's test runner): config resolution, the requests sent, the refusals."""
    _, node_dir = openclaw
    done = subprocess.run(
        [str(Path(node_dir) / "node"), "--test", str(PLUGIN / "feedback.test.mjs")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
