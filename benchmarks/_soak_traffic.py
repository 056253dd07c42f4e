"""The soak benchmark's traffic: simulated people talking without pause, and an agent replaying OpenClaw requests.

Every request goes through ``POST /v1/chat/completions`` over HTTP, as a person's client or an agent gateway
sends it. Each one is logged as a :class:`Request` (when it ended, how long it took, its HTTP status or the
error that stood for one), which the benchmark cuts into windows.

The agent replays the requests OpenClaw 2026.9 recorded (``tests/data/openclaw/recorded``: heartbeats, main
turns around them, the compaction's summary calls), cut to fit the toy model's 512-token context: every text
keeps its first and last lines, cut to their first characters (what tells a heartbeat or a compaction apart), and the tools keep their
names with an empty parameter schema; the long histories keep their last messages.
"""

from __future__ import annotations

import copy
import json
import random
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from openclaw_trl.toy import world as toy_world

RECORDED = Path(__file__).resolve().parents[1] / "tests" / "data" / "openclaw" / "recorded"
# The order an agent sends them in: a heartbeat, the person's turn after heartbeats, the compaction's summary
# calls, the first main turns after it, another heartbeat.
REPLAY = (
    "heartbeat_first",
    "heartbeat",
    "main_after_heartbeats",
    "main_after_silent_heartbeats",
    "compaction_merge",
    "compaction_turn_prefix",
    "main_after_compaction",
    "main_after_compaction_2",
)
REPLAY_LINES = (2, 1)  # each text keeps its first and last lines (the toy's context is 512 tokens) ...
REPLAY_LINE_CHARS = 48  # ... each cut to its first characters
REPLAY_TOOLS = 1
REPLAY_MESSAGES = 4  # the system prompt and the last messages


@dataclass
class Request:
    """One request as its client saw it: ``status`` 0 when no HTTP answer came (``error`` says why)."""

    source: str
    ended: float  # time.monotonic() when the answer (or the failure) came
    latency_s: float
    status: int
    error: str | None = None


class RequestLog:
    """Every request of the run, appended by the traffic threads, read by the sampler (thread-safe)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._items: list[Request] = []

    def add(self, item: Request) -> None:
        with self._lock:
            self._items.append(item)

    def between(self, start: float, end: float) -> list[Request]:
        with self._lock:
            return [r for r in self._items if start <= r.ended < end]

    def all(self) -> list[Request]:
        with self._lock:
            return list(self._items)


def _post(client: httpx.Client, log: RequestLog, source: str, body: dict, headers: dict) -> dict | None:
    t0 = time.monotonic()
    try:
        response = client.post("/v1/chat/completions", json=body, headers=headers)
    except httpx.HTTPError as err:
        now = time.monotonic()
        log.add(Request(source, now, now - t0, 0, f"{type(err).__name__}: {err}"))
        return None
    now = time.monotonic()
    error = None if response.status_code == 200 else response.text[:300]
    log.add(Request(source, now, now - t0, response.status_code, error))
    return response.json() if response.status_code == 200 else None


def person(base_url: str, index: int, log: RequestLog, stop: threading.Event, max_tokens: int) -> None:
    """One simulated person (the toy world's, who wants bulleted answers) in conversation after conversation
    until ``stop``: each reply is judged from the person's next message (thanks, or a request for the style)."""
    user = toy_world.make_user("bullets")
    rng = random.Random(index)
    n = 0
    with httpx.Client(base_url=base_url, timeout=600) as client:
        while not stop.is_set():
            session = f"soak-{index}-{n}"
            n += 1
            messages = [{"role": "user", "content": user.opening(rng)}]
            for turn in range(user.max_turns):
                if stop.is_set():
                    return
                headers = {"X-Session-Id": session, "X-Turn-Type": "main"}
                body = {"model": "openclaw", "messages": messages, "max_tokens": max_tokens}
                answer = _post(client, log, "person", body, headers)
                if answer is None:
                    time.sleep(1.0)  # a failed request: the person tries a new conversation
                    break
                reply = answer["choices"][0]["message"].get("content") or ""
                reaction = user.react(reply, rng)
                messages += [
                    {"role": "assistant", "content": reply},
                    {"role": "user", "content": reaction.text},
                ]
                if reaction.satisfied or turn == user.max_turns - 1:
                    headers["X-Session-Done"] = "true"
                    _post(client, log, "person", {**body, "messages": messages}, headers)
                    break


def _cut_text(text: str) -> str:
    lines = text.split("\n")
    if len(lines) > REPLAY_LINES[0] + REPLAY_LINES[1]:
        lines = lines[: REPLAY_LINES[0]] + lines[-REPLAY_LINES[1] :]
    return "\n".join(line[:REPLAY_LINE_CHARS] for line in lines)


def _cut(content):
    if isinstance(content, str):
        return _cut_text(content)
    if isinstance(content, list):
        return [
            {**part, "text": _cut_text(part["text"])} if isinstance(part.get("text"), str) else part
            for part in content
        ]
    return content


def replay_bodies(max_tokens: int) -> list[dict]:
    """The recorded OpenClaw requests of :data:`REPLAY`, cut to fit the toy model (see the module's docstring)."""
    bodies = []
    for name in REPLAY:
        body = copy.deepcopy(json.loads((RECORDED / f"{name}.json").read_text())["body"])
        body = {k: v for k, v in body.items() if not k.startswith("_") and k != "stream_options"}
        body["stream"] = False
        body["max_completion_tokens"] = max_tokens
        messages = body["messages"]
        system = [m for m in messages[:1] if m.get("role") == "system"]
        body["messages"] = system + messages[len(system) :][-REPLAY_MESSAGES:]
        for message in body["messages"]:
            message["content"] = _cut(message.get("content"))
        for message in system:  # its first line only (the agent's identity, or the summariser's)
            message["content"] = message["content"].split("\n")[0]
        if body.get("tools"):
            names = [
                t if isinstance(t, str) else t.get("function", {}).get("name", "tool") for t in body["tools"]
            ]
            body["tools"] = [
                {
                    "type": "function",
                    "function": {"name": n, "parameters": {"type": "object", "properties": {}}},
                }
                for n in names[:REPLAY_TOOLS]
            ]
        bodies.append(body)
    return bodies


def agent(base_url: str, log: RequestLog, stop: threading.Event, max_tokens: int) -> None:
    """The recorded OpenClaw requests, in their order, over and over until ``stop`` (no session headers: stock
    OpenClaw sends none; the server chains them by content)."""
    bodies = replay_bodies(max_tokens)
    with httpx.Client(base_url=base_url, timeout=600) as client:
        while not stop.is_set():
            for body in bodies:
                if stop.is_set():
                    return
                _post(client, log, "agent", body, {})
