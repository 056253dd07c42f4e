"""OpenClaw's compaction over ``POST /v1/messages`` (``api: "anthropic-messages"``), from the request bodies and
headers OpenClaw 2026.9.6 sent (``tests/data/openclaw/recorded/messages_*.json``: a mock server's replies
``Reply N: ...``): the memory flush and the compaction summary are recognised as side calls, and the main turns
before and after the compaction stay one trainable conversation, over real HTTP on the tiny agent model."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from openclaw_trl.serving.protocols.messages.convert import to_chat
from openclaw_trl.sessions.side_calls import side_call_kind
from tests._server_helpers import ScriptedEngine, running_stack, turns

RECORDED = Path(__file__).parent / "data" / "openclaw" / "recorded"
IN_ORDER = (  # the requests of the recorded session, in the order OpenClaw sent them
    "messages_main_before_compaction",
    "messages_memory_flush",
    "messages_compaction_turn_prefix",
    "messages_main_after_compaction",
)


def recorded(name: str) -> dict:
    """A recorded request: ``path``, ``headers`` and ``body`` as OpenClaw sent them (system prompt trimmed)."""
    return json.loads((RECORDED / f"{name}.json").read_text())


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("messages_main_before_compaction", None),
        ("messages_memory_flush", "memory_flush"),
        ("messages_compaction_turn_prefix", "compaction"),
        ("messages_main_after_compaction", None),
    ],
)
def test_recorded_messages_requests_are_told_apart_by_content(name, kind):
    body = recorded(name)["body"]
    chat = to_chat(body.get("system"), body["messages"], body.get("tools"), body.get("tool_choice"))
    assert side_call_kind(chat.messages, chat.tools) == kind


def test_a_recorded_compaction_keeps_one_trainable_conversation(agent_engine, tmp_path):
    engine = ScriptedEngine(agent_engine)
    with running_stack(engine, tmp_path / "messages.db", max_context_len=65_536) as stack:
        for n, name in enumerate(IN_ORDER, start=1):
            request = recorded(name)
            engine.script = lambda _ids, n=n: f"Reply {n}: fox dog turnip banana {n}."
            response = httpx.post(
                f"{stack.url}{request['path']}", json=request["body"], headers=request["headers"], timeout=600
            )
            assert response.status_code == 200, response.text
            assert "event: message_stop" in response.text
        before, flush, summary, after = turns(stack.store)
        assert (flush.turn_type, summary.turn_type) == ("side", "side")
        assert not flush.trainable and not summary.trainable
        assert flush.status == summary.status == "closed"
        assert (before.turn_type, after.turn_type) == ("main", "main")
        assert after.session_id == before.session_id and after.trainable
        first = stack.store.conversations.get_turn(before.id)
        assert first.trainable and first.status == "ready", first.status
        assert first.next_state["content"] == "Thanks. What is an apple?"
        assert first.next_state_source == "request"
