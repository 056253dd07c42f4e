"""Agent-sized requests over HTTP with the real ``openai`` client and no session header: OpenClaw's recorded first
turn (a ~43,000-character system prompt and 12 tools, ~12,400 tokens with Qwen's vocabulary) on the tiny model with
a 65,536-token context; the context limit and the reply's minimum room."""

from __future__ import annotations

import json
from pathlib import Path

import openai
import pytest

from tests._server_helpers import running_stack

FIRST_TURN = json.loads((Path(__file__).parent / "data" / "openclaw" / "main_turn1.json").read_text())


def _client(stack) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{stack.url}/v1", api_key="unused", timeout=600)


def test_an_openclaw_turn_is_served_and_the_next_one_continues_it(agent_engine, tmp_path):
    with running_stack(agent_engine, tmp_path / "agent.db", default_max_tokens=8) as stack:
        client = _client(stack)
        messages, tools = FIRST_TURN["messages"], FIRST_TURN["tools"]
        first = client.chat.completions.create(
            model="openclaw", messages=messages, tools=tools, tool_choice="auto", max_completion_tokens=8
        )
        assert first.usage.prompt_tokens > 10_000 and first.choices[0].message is not None
        meta = first.model_extra["openclaw"]
        assert meta["session_id"].startswith("chain-") and meta["turn_type"] == "main"
        # OpenClaw's next request: its context message dropped, the reply rebuilt, a new user message
        history = [m for m in messages[:-1]]
        history += [
            {"role": "assistant", "content": first.choices[0].message.content or ""},
            {"role": "user", "content": "[Tue 2026-12-01 23:23 UTC] Thanks!"},
            messages[-1],
        ]
        second = client.chat.completions.create(
            model="openclaw", messages=history, tools=tools, max_completion_tokens=8
        )
        assert second.model_extra["openclaw"]["session_id"] == meta["session_id"]
        assert second.model_extra["openclaw"]["next_state_of"] == meta["turn_id"]
        turn = stack.store.conversations.get_turn(meta["turn_id"])
        assert turn.trainable and turn.status == "ready" and turn.next_state["content"] == "Thanks!"


def test_the_context_limit_and_the_reply_room(agent_engine, tmp_path):
    n_prompt = None
    with running_stack(agent_engine, tmp_path / "small.db", max_context_len=12_000) as stack:
        with pytest.raises(openai.BadRequestError) as refused:
            _client(stack).chat.completions.create(
                model="openclaw", messages=FIRST_TURN["messages"], tools=FIRST_TURN["tools"]
            )
        error = refused.value.body
        assert error["code"] == "context_length_exceeded" and "12000" in error["message"]
        n_prompt = int(error["message"].split("resulted in ")[1].split(" tokens")[0])
        assert stack.store.conversations.get_session(1) is None  # nothing stored for a refused request
    with running_stack(agent_engine, tmp_path / "room.db", max_context_len=n_prompt + 300) as stack:
        reply = _client(stack).chat.completions.create(
            model="openclaw",
            messages=FIRST_TURN["messages"],
            tools=FIRST_TURN["tools"],
            max_completion_tokens=4096,
        )
        assert reply.usage.completion_tokens <= 300  # clamped to the room left, not refused
