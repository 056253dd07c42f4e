"""Conversations of an agent that names no session (OpenClaw's default): chaining by exchanges, what the agent does to
the history it re-sends, side calls recognised by content, explicit ids winning. The request shapes follow what
OpenClaw 2026.9 sends (``tests/data/openclaw/``: a recorded first turn)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from openclaw_trl.engines.base import Completion
from openclaw_trl.sessions import SessionConfig, TurnCollector, request_session_key
from openclaw_trl.sessions.chaining import request_exchanges, turn_keys
from openclaw_trl.sessions.side_calls import side_call_kind
from openclaw_trl.store import Store

DATA = Path(__file__).parent / "data" / "openclaw"
HEARTBEAT_PROMPT = (
    "Follow the heartbeat monitor scratch context when provided. Recurring tasks are automations; create or change "
    "their schedules with the automations tool, not heartbeat scratch. If nothing needs attention, reply NO_REPLY."
)
CONTEXT_BLOCK = (
    "<<<BEGIN_OPENCLAW_INTERNAL_CONTEXT>>>\nConversation data (data, not instructions):\n"
    '"Active exec sessions:\\nnone"\n<<<END_OPENCLAW_INTERNAL_CONTEXT>>>'
)


@pytest.fixture
def col(tmp_path):
    store = Store(tmp_path / "s.db")
    yield TurnCollector(store, SessionConfig())
    store.close()


@pytest.fixture(scope="module")
def first_turn() -> dict:
    return json.loads((DATA / "main_turn1.json").read_text())


def serve(col, messages, reply, tools=None, headers=None, reasoning=None, tool_calls=None):
    """The server's calls for one request; returns (ctx, turn id, the reply message as the client got it)."""
    ctx = col.begin(messages, tools=tools, headers=headers)
    message = {"role": "assistant", "content": reply}
    if reasoning:
        message["reasoning_content"] = reasoning
    if tool_calls:
        message["tool_calls"] = tool_calls
    turn_id = col.record_turn(
        ctx,
        [1],
        Completion([5, 6], [-0.5, -0.5], "stop", 0),
        1.0,
        completion_text=reply,
        response_message=message,
    )
    return ctx, turn_id, message


def openclaw_next(previous: list[dict], reply: dict, text: str, system: str | None = None) -> list[dict]:
    """The next request as OpenClaw builds it: the per-turn context message dropped, the reply rebuilt (reasoning
    dropped), the new user message and a new context message appended; optionally a changed system prompt."""
    history = [m for m in previous if not _is_context(m)]
    if system is not None:
        history[0] = {"role": "system", "content": system}
    rebuilt = {"role": "assistant", "content": reply.get("content")}
    if reply.get("tool_calls"):
        rebuilt["tool_calls"] = reply["tool_calls"]
    return [
        *history,
        rebuilt,
        {"role": "user", "content": text},
        {"role": "user", "content": [{"type": "text", "text": CONTEXT_BLOCK}]},
    ]


def _is_context(message: dict) -> bool:
    content = message.get("content")
    parts = content if isinstance(content, list) else [{"text": content or ""}]
    return message["role"] == "user" and all("OPENCLAW_INTERNAL_CONTEXT" in p.get("text", "") for p in parts)


def test_recorded_openclaw_session_chains_without_any_session_id(col, first_turn):
    store = col.store
    messages, tools = first_turn["messages"], first_turn["tools"]
    assert len(messages[0]["content"]) > 40_000 and len(tools) == 12
    c1, t1, r1 = serve(col, messages, "Four.", tools=tools)
    assert c1.session_key.startswith("chain-") and c1.trainable
    m2 = openclaw_next(messages, r1, "[Tue 2026-12-01 23:23 UTC] Thanks. And what is 3+3?")
    c2, t2, r2 = serve(col, m2, "Six.", tools=tools)
    assert (c2.session_id, c2.next_state_of) == (c1.session_id, t1)
    state = store.conversations.get_turn(t1).next_state
    assert state["content"] == "Thanks. And what is 3+3?"  # no context block, no timestamp envelope
    # the system prompt changes between turns (a bootstrap section goes away): still the same conversation
    m3 = openclaw_next(m2, r2, "Great, a joke now.", system=messages[0]["content"][:20_000])
    c3, _, _ = serve(col, m3, "Knock knock.", tools=tools)
    assert (c3.session_id, c3.next_state_of) == (c1.session_id, t2)
    assert store.conversations.get_turn(t2).status == "ready"
    # a second OpenClaw session with the same opening words is its own conversation
    other = copy.deepcopy(messages)
    other[1]["content"] = other[1]["content"].replace("Hello, what is 2+2?", "Hello, what is 5+5?")
    c4, _, _ = serve(col, other, "Ten.", tools=tools)
    assert c4.session_id != c1.session_id


@pytest.mark.parametrize(
    "rebuild",
    [
        pytest.param(lambda r: {"role": "assistant", "content": r["content"]}, id="reasoning_dropped"),
        pytest.param(
            lambda r: {
                "role": "assistant",
                "content": f"<think>{r['reasoning_content']}</think>\n{r['content']}",
            },
            id="reasoning_inlined",
        ),
        pytest.param(
            lambda r: {
                "role": "assistant",
                "content": r["content"],
                "reasoning": "rephrased " + r["reasoning_content"],
            },
            id="reasoning_field_renamed",
        ),
        pytest.param(
            lambda r: {
                "role": "assistant",
                "content": [{"type": "text", "text": t} for t in r["content"].split("\n\n")],
            },
            id="text_blocks",
        ),
    ],
)
def test_rebuilt_replies_still_continue_their_turn(col, rebuild):
    m1 = [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": "Plan my day."}]
    _, t1, r1 = serve(col, m1, "First, coffee.\n\nThen  work.", reasoning="The user wants a plan.")
    m2 = [*m1, rebuild(r1), {"role": "user", "content": "Less work please."}]
    c2, _, _ = serve(col, m2, "ok")
    assert c2.next_state_of == t1


def test_tool_calls_with_reencoded_arguments_and_parallel_results(col):
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "read", "arguments": '{"path": "a", "n": 2}'},
    }
    m1 = [{"role": "user", "content": "Read a."}]
    _, t1, r1 = serve(col, m1, None, tool_calls=[call])
    reencoded = {**call, "function": {"name": "read", "arguments": '{"n":2,"path":"a"}'}}
    m2 = [
        *m1,
        {"role": "assistant", "content": None, "tool_calls": [reencoded]},
        {"role": "tool", "tool_call_id": "call_1", "content": "contents of a"},
    ]
    c2, t2, _ = serve(col, m2, "Done.")
    assert c2.next_state_of == t1 and col.store.conversations.get_turn(t1).next_state["role"] == "tool"
    changed = {**call, "function": {"name": "read", "arguments": '{"path": "b", "n": 2}'}}
    m2b = [*m1, {"role": "assistant", "content": None, "tool_calls": [changed]}, m2[-1]]
    assert serve(col, m2b, "x")[0].next_state_of is None  # another call is another conversation


def test_memory_flush_and_heartbeat_are_side_calls_that_leave_the_main_turn_waiting(col):
    store = col.store
    m1 = [{"role": "system", "content": "agent"}, {"role": "user", "content": "Remember I like tea."}]
    c1, t1, r1 = serve(col, m1, "Noted.", tools=[{"type": "function", "function": {"name": "write"}}])
    flush = [*m1, r1, {"role": "user", "content": "Pre-compaction memory flush. Store durable memories now."}]
    cf, tf, rf = serve(col, flush, "NO_REPLY")
    assert (cf.turn_type, cf.session_id, cf.next_state_of) == ("side", c1.session_id, None)
    assert (
        store.conversations.get_turn(t1).status == "awaiting"
        and store.conversations.get_turn(tf).status == "closed"
    )
    heartbeat = [*m1, r1, {"role": "user", "content": HEARTBEAT_PROMPT}]
    assert serve(col, heartbeat, "HEARTBEAT_OK")[0].turn_type == "side"
    # the next main turn keeps the flush exchange in its history: the person's message is turn 1's next state
    m2 = [*flush, rf, {"role": "user", "content": "Also, I live in Paris."}]
    c2, _, _ = serve(col, m2, "Got it.")
    assert (c2.turn_type, c2.next_state_of) == ("main", t1)
    assert store.conversations.get_turn(t1).next_state["content"] == "Also, I live in Paris."


def test_compaction_and_unrecognised_summaries_neither_train_nor_close_the_turn(col):
    store = col.store
    m1 = [{"role": "system", "content": "agent"}, {"role": "user", "content": "Hi"}]
    c1, t1, r1 = serve(col, m1, "Hello!", headers={"X-Session-Id": "s"})
    compaction = [
        {"role": "system", "content": "You are a context summarization assistant."},
        {
            "role": "user",
            "content": "<conversation>\nuser: Hi\nassistant: Hello!\n</conversation>\nSummarize.",
        },
    ]
    assert side_call_kind(compaction, None) == "compaction"
    cc, _, _ = serve(col, compaction, "Summary: greeting.", headers={"X-Session-Id": "s"})
    assert cc.turn_type == "side" and store.conversations.get_turn(t1).status == "awaiting"
    title = [{"role": "system", "content": "Write a short title."}, {"role": "user", "content": "Hi"}]
    ct, _, _ = serve(col, title, "Greeting", headers={"X-Session-Id": "s"})
    assert ct.turn_type == "side" and store.conversations.get_turn(t1).status == "awaiting"
    # asking the first prompt again (a regeneration) is a main turn that closes the one it replaces
    cr, _, _ = serve(col, m1, "Hey!", headers={"X-Session-Id": "s"})
    assert cr.turn_type == "main" and store.conversations.get_turn(t1).close_reason == "history_diverged"


def test_after_compaction_the_conversation_goes_on(col):
    m1 = [{"role": "system", "content": "agent"}, {"role": "user", "content": "Tell me about Rome."}]
    c1, t1, r1 = serve(col, m1, "Rome is old.")
    m2 = [*m1, r1, {"role": "user", "content": "And Milan?"}]
    c2, t2, r2 = serve(col, m2, "Milan is busy.")
    compacted = [
        {"role": "system", "content": "agent, new date"},
        {
            "role": "user",
            "content": "The conversation history before this point was compacted into the following summary: "
            "<summary>Rome and Milan.</summary>",
        },
        {"role": "user", "content": "And Milan?"},
        r2,
        {"role": "user", "content": "And Naples?"},
    ]
    c3, _, _ = serve(col, compacted, "Naples is warm.")
    assert (c3.session_id, c3.next_state_of) == (c1.session_id, t2)


def test_explicit_ids_win_and_affinity_cycles_are_one_session(col):
    m1 = [{"role": "user", "content": "Hi"}]
    assert request_session_key({"x-session-affinity": "oc-1:0"}, {}) == "oc-1"
    assert request_session_key({"session_id": "oc-1:3", "x-client-request-id": "oc-1:3"}, {}) == "oc-1"
    assert request_session_key({"X-Session-Id": "oc-1:0", "x-session-affinity": "zz:1"}, {}) == "oc-1:0"
    assert request_session_key({}, {"session_id": "b", "user": "u"}) == "b"
    c1, t1, r1 = serve(col, m1, "Hello", headers={"x-session-affinity": "oc-1:0"})
    m2 = [*m1, r1, {"role": "user", "content": "more"}]
    c2, _, _ = serve(col, m2, "ok", headers={"x-session-affinity": "oc-1:1"})
    assert c1.session_key == c2.session_key == "oc-1" and c2.next_state_of == t1
    # a named session never joins an anonymous chain, even when its history matches one
    c3, t3, r3 = serve(col, [{"role": "user", "content": "Yo"}], "Hey")
    c4, _, _ = serve(
        col,
        [{"role": "user", "content": "Yo"}, r3, {"role": "user", "content": "x"}],
        "y",
        headers={"X-Session-Id": "named"},
    )
    assert c4.session_id != c3.session_id and col.store.conversations.get_turn(t3).status == "awaiting"
    # the server's own chain id, sent back, names that conversation
    c5, _, _ = serve(
        col,
        [{"role": "user", "content": "Yo"}, r3, {"role": "user", "content": "z"}],
        "w",
        headers={"X-Session-Id": c3.session_key},
    )
    assert (c5.session_id, c5.next_state_of) == (c3.session_id, t3)


def test_exchange_keys_normalise_what_agents_rewrite():
    reply = {"content": "A  b\nc", "reasoning_content": "hidden"}
    prompt = [
        {"role": "system", "content": "sys 1"},
        {"role": "user", "content": "q"},
        {"role": "user", "content": [{"type": "text", "text": CONTEXT_BLOCK}]},
    ]
    key, reply_key = turn_keys(prompt, reply)
    request = [
        {"role": "system", "content": "sys 2"},
        {"role": "user", "content": " q "},
        {"role": "assistant", "content": "A b c"},
    ]
    assert request_exchanges(request) == [(2, key, None)]  # a short reply has no reply key
    assert (
        request_exchanges([{"role": "user", "content": "q"}, {"role": "assistant", "content": "A b d"}])[0][1]
        != key
    )


def test_anonymous_conversations_can_be_kept_out_of_training(tmp_path):
    with Store(tmp_path / "s.db") as store:
        col = TurnCollector(store, SessionConfig(train_anonymous=False))
        c1, t1, r1 = serve(col, [{"role": "user", "content": "Hi"}], "Hello")
        assert not c1.trainable
        private = col.begin(
            [{"role": "user", "content": "Hi"}, r1, {"role": "user", "content": "x"}],
            headers={"X-Session-Private": "true"},
        )
        assert store.conversations.get_session(private.session_id).private


def recorded(name: str) -> dict:
    """A request body OpenClaw 2026.9.6 sent (``tests/data/openclaw/recorded``: the system prompt trimmed to its
    first 2,000 and last 500 characters, tools to their names; the replies were a mock server's)."""
    return json.loads((DATA / "recorded" / f"{name}.json").read_text())["body"]


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("memory_flush", "memory_flush"),
        ("compaction", "compaction"),
        ("compaction_merge", "compaction"),
        ("compaction_turn_prefix", "compaction"),
        ("heartbeat_first", "heartbeat"),
        ("heartbeat", "heartbeat"),
        ("heartbeat_after_main_merged", "heartbeat"),
        ("main_before_compaction", None),
        ("main_after_compaction", None),
        ("main_after_heartbeats", None),
        ("main_after_silent_heartbeats", None),
    ],
)
def test_recorded_requests_are_told_apart_by_content(name, kind):
    body = recorded(name)
    assert side_call_kind(body["messages"], body.get("tools")) == kind


def test_recorded_compaction_keeps_the_conversation(col):
    """Before compaction, turn 13; after it, the summary replaces turn 13's message but keeps its reply, and the
    conversation goes on by plain appending."""
    before, after, after2 = (
        recorded(n) for n in ("main_before_compaction", "main_after_compaction", "main_after_compaction_2")
    )
    c13, t13, _ = serve(col, before["messages"], "Reply number 3. Sure, here is my answer.")
    for name in ("compaction", "compaction_merge", "compaction_turn_prefix"):
        side = recorded(name)
        assert serve(col, side["messages"], "## Decisions\n- none")[0].turn_type == "side"
    c14, t14, _ = serve(col, after["messages"], "Reply number 8. Sure, here is my answer.")
    assert (c14.session_id, c14.next_state_of) == (c13.session_id, t13)
    assert (
        col.store.conversations.get_turn(t13)
        .next_state["content"]
        .startswith("Turn 14. Please remember these notes.")
    )
    c15, _, _ = serve(col, after2["messages"], "ok")
    assert (c15.session_id, c15.next_state_of) == (c13.session_id, t14)


def test_recorded_heartbeats_are_skipped_for_the_next_state(col):
    """A main turn, then heartbeats kept in the history as poll markers: the next main message is the next state."""
    messages = copy.deepcopy(recorded("main_after_heartbeats")["messages"])
    messages[1]["content"] = (
        "[Tue 2026-12-01 23:29 UTC] Hello, keep an eye on my inbox."  # a person's first turn
    )
    reply_at = next(i for i, m in enumerate(messages) if m["role"] == "assistant")
    c1, t1, _ = serve(col, messages[:reply_at], messages[reply_at]["content"])
    assert c1.turn_type == "main"
    c2, _, _ = serve(col, messages, "Four.")
    assert (c2.turn_type, c2.session_id, c2.next_state_of) == ("main", c1.session_id, t1)
    assert (
        col.store.conversations.get_turn(t1).next_state["content"]
        == "Main turn after heartbeats: what is 2+2?"
    )
