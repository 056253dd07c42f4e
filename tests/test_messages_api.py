"""``POST /v1/messages`` (the Anthropic Messages API), with the real ``anthropic`` client against the tiny model on
127.0.0.1: plain and streamed messages, a tool round trip, ``count_tokens``, ``x-api-key`` and bearer auth,
errors as the SDK's exception classes, the turns in the store with feedback by the header's turn id, and bad
requests (each a 4xx in Anthropic's shape that stores nothing)."""

from __future__ import annotations

import json

import anthropic
import httpx
import pytest

from tests._server_helpers import running_stack, scripted_hf_engine, turns

WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Weather of a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
TOOL_CALL_TEXT = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
THINKING_TEXT = "<think>\nthe user wants a plan\n</think>\n\nHere is the plan."
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    with scripted_hf_engine(tiny_model_dir) as eng:
        yield eng


@pytest.fixture(scope="module")
def stack(engine, tmp_path_factory):
    with running_stack(engine, tmp_path_factory.mktemp("msg") / "store.db", max_context_len=512) as s:
        yield s


@pytest.fixture
def client(stack):
    return anthropic.Anthropic(base_url=stack.url, api_key="unused", max_retries=0, timeout=60)


@pytest.fixture
def says(engine):
    """``says("text")`` makes the model answer ``text`` for the rest of the test."""

    def set_text(text: str | None) -> None:
        engine.script = None if text is None else (lambda _ids: text)

    yield set_text
    engine.script = None


def _turn(stack, raw):
    return stack.store.conversations.get_turn(int(raw.headers["x-openclaw-turn-id"]))


def test_a_message_is_a_stored_session_turn(stack, client, says):
    says(THINKING_TEXT)
    raw = client.messages.with_raw_response.create(
        model="openclaw",
        system=[{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        messages=[{"role": "user", "content": "make a plan"}],
        max_tokens=40,
        metadata={"user_id": "msg-plain"},
    )
    message = raw.parse()
    assert message.id.startswith("msg_") and message.type == "message" and message.role == "assistant"
    assert [b.type for b in message.content] == ["thinking", "text"]
    assert message.content[0].thinking == "the user wants a plan"
    assert message.content[1].text == "Here is the plan."
    assert message.stop_reason == "end_turn" and message.stop_sequence is None
    turn = _turn(stack, raw)
    assert turn.prompt_messages == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "make a plan"},
    ]
    assert message.usage.input_tokens == len(turn.prompt_ids)
    assert message.usage.output_tokens == len(turn.completion_ids)
    assert raw.headers["x-openclaw-session-id"] == "msg-plain"
    assert raw.headers["x-openclaw-policy-version"] == str(stack.engine.policy_version)
    assert message.model_extra["openclaw"]["turn_id"] == turn.id
    assert turn.turn_type == "main" and turn.trainable
    assert stack.store.conversations.get_session(turn.session_id).key == "msg-plain"


def test_streaming_with_the_sdk_helpers(stack, client, says):
    says(THINKING_TEXT)
    kw = dict(model="openclaw", messages=[{"role": "user", "content": "plan?"}], max_tokens=40)
    with client.messages.stream(**kw, extra_headers={"X-Session-Id": "msg-stream"}) as stream:
        events = list(stream)
        final = stream.get_final_message()
    kinds = [e.type for e in events]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert [b.type for b in final.content] == ["thinking", "text"]
    assert final.content[1].text == "Here is the plan." and final.stop_reason == "end_turn"
    deltas = [e.delta.type for e in events if e.type == "content_block_delta"]
    assert deltas.count("text_delta") >= 2 and "thinking_delta" in deltas  # token by token, not one blob
    # the raw events: a ping after message_start, the session in the headers
    r = httpx.post(
        f"{stack.url}/v1/messages",
        json={**kw, "stream": True},
        headers={"X-Session-Id": "msg-stream"},
        timeout=60,
    )
    lines = [line for line in r.text.splitlines() if line.startswith("event: ")]
    assert lines[:2] == ["event: message_start", "event: ping"] and lines[-1] == "event: message_stop"
    assert r.headers["content-type"].startswith("text/event-stream")
    assert r.headers["x-openclaw-session-id"] == "msg-stream"


def test_message_delta_carries_the_turn(stack, says):
    says("Hello there.")
    body = {"model": "openclaw", "messages": HI, "max_tokens": 10, "stream": True}
    r = httpx.post(f"{stack.url}/v1/messages", json=body, timeout=60)
    events = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: ")]
    (delta,) = [e for e in events if e["type"] == "message_delta"]
    assert delta["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}
    turn = stack.store.conversations.get_turn(delta["openclaw"]["turn_id"])
    assert turn.response_message["content"] == "Hello there."
    assert delta["usage"]["output_tokens"] == len(turn.completion_ids)


def test_tool_round_trip(stack, client, says):
    says(TOOL_CALL_TEXT)
    question = {"role": "user", "content": "weather in Paris?"}
    raw = client.messages.with_raw_response.create(
        model="openclaw",
        messages=[question],
        tools=[WEATHER_TOOL],
        tool_choice={"type": "auto"},
        max_tokens=40,
        extra_headers={"X-Session-Id": "msg-tools"},
    )
    first = raw.parse()
    (call,) = first.content
    assert call.type == "tool_use" and call.name == "get_weather" and call.input == {"city": "Paris"}
    assert first.stop_reason == "tool_use"
    says("It is 21 degrees in Paris.")
    result = {"type": "tool_result", "tool_use_id": call.id, "content": [{"type": "text", "text": "21 C"}]}
    raw2 = client.messages.with_raw_response.create(
        model="openclaw",
        messages=[
            question,
            {"role": "assistant", "content": first.content},
            {"role": "user", "content": [result]},
        ],
        tools=[WEATHER_TOOL],
        max_tokens=40,
        extra_headers={"X-Session-Id": "msg-tools"},
    )
    second = raw2.parse()
    assert second.content[0].text == "It is 21 degrees in Paris." and second.stop_reason == "end_turn"
    t1, t2 = _turn(stack, raw), _turn(stack, raw2)
    assert t2.prompt_messages[-1] == {"role": "tool", "tool_call_id": call.id, "content": "21 C"}
    assert t2.prompt_messages[-2]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert second.model_extra["openclaw"]["next_state_of"] == t1.id
    assert stack.store.conversations.get_turn(t1.id).status == "ready"
    # streamed, the tool call arrives as one input_json_delta the SDK parses
    says(TOOL_CALL_TEXT)
    with client.messages.stream(
        model="openclaw", messages=[question], tools=[WEATHER_TOOL], max_tokens=40
    ) as s:
        final = s.get_final_message()
    assert final.content[0].type == "tool_use" and final.content[0].input == {"city": "Paris"}
    assert final.stop_reason == "tool_use"


def test_an_error_result_is_read_as_an_error(stack, client, says):
    says(TOOL_CALL_TEXT)
    question = {"role": "user", "content": "weather?"}
    first = client.messages.create(model="openclaw", messages=[question], tools=[WEATHER_TOOL], max_tokens=40)
    says("Sorry.")
    result = {
        "type": "tool_result",
        "tool_use_id": first.content[0].id,
        "content": "timeout",
        "is_error": True,
    }
    raw = client.messages.with_raw_response.create(
        model="openclaw",
        messages=[
            question,
            {"role": "assistant", "content": first.content},
            {"role": "user", "content": [result]},
        ],
        tools=[WEATHER_TOOL],
        max_tokens=10,
    )
    assert _turn(stack, raw).prompt_messages[-1]["content"] == "Error: timeout"


def test_stop_sequences_and_max_tokens(client, says):
    says("one two STOP three")
    m = client.messages.create(model="openclaw", messages=HI, max_tokens=40, stop_sequences=["STOP"])
    assert m.stop_reason == "stop_sequence" and m.stop_sequence == "STOP"
    assert m.content[0].text == "one two "
    says(None)
    m = client.messages.create(model="openclaw", messages=HI, max_tokens=2, extra_body=SAMPLING)
    assert m.stop_reason == "max_tokens" and m.usage.output_tokens == 2


SAMPLING = {"temperature": 0.0, "top_k": 5, "top_p": 0.9}  # the SDK's create takes them as extra fields


def test_count_tokens_is_the_rendered_prompt(stack, client, says):
    says("Fine.")
    kw = dict(model="openclaw", system="Be brief.", messages=[{"role": "user", "content": "count me"}])
    counted = client.messages.count_tokens(**kw, tools=[WEATHER_TOOL]).input_tokens
    before = len(turns(stack.store))
    raw = client.messages.with_raw_response.create(**kw, tools=[WEATHER_TOOL], max_tokens=4)
    assert counted == len(_turn(stack, raw).prompt_ids) == raw.parse().usage.input_tokens
    assert len(turns(stack.store)) == before + 1  # counting stored nothing
    assert client.messages.count_tokens(**kw).input_tokens < counted  # the tools are part of the prompt


def test_a_side_call_is_served_and_never_trained(stack, client, says):
    says("A title.")
    raw = client.messages.with_raw_response.create(
        model="openclaw", messages=HI, max_tokens=10, extra_headers={"X-Turn-Type": "side"}
    )
    turn = _turn(stack, raw)
    assert raw.parse().content[0].text == "A title."
    assert turn.turn_type == "side" and not turn.trainable


def test_feedback_by_the_header_turn_id(stack, client, says):
    says("A short answer.")
    raw = client.messages.with_raw_response.create(
        model="openclaw", messages=HI, max_tokens=10, extra_headers={"X-Session-Id": "msg-feedback"}
    )
    turn_id = int(raw.headers["x-openclaw-turn-id"])
    body = {"session_id": "msg-feedback", "turn_id": turn_id, "rating": 1, "text": "good"}
    r = httpx.post(f"{stack.url}/v1/feedback", json=body, timeout=30)
    assert r.status_code == 200, r.text
    assert stack.store.conversations.get_turn(turn_id).status != "awaiting"


def test_x_api_key_and_bearer_auth(engine, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENCLAW_MSG_KEY", "s3cret")
    with running_stack(engine, tmp_path / "auth.db", api_key_env="OPENCLAW_MSG_KEY") as s:
        bad = anthropic.Anthropic(base_url=s.url, api_key="wrong", max_retries=0)
        with pytest.raises(anthropic.AuthenticationError) as err:
            bad.messages.create(model="openclaw", messages=HI, max_tokens=2)
        assert err.value.body == {
            "type": "error",
            "error": {"type": "authentication_error", "message": "Incorrect API key provided"},
        }
        r = httpx.post(f"{s.url}/v1/messages", json={"model": "openclaw", "messages": HI, "max_tokens": 2})
        assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
        good = anthropic.Anthropic(base_url=s.url, api_key="s3cret", max_retries=0)
        assert good.messages.create(model="openclaw", messages=HI, max_tokens=2).content is not None
        bearer = anthropic.Anthropic(base_url=s.url, auth_token="s3cret", max_retries=0)
        assert bearer.messages.count_tokens(model="openclaw", messages=HI).input_tokens > 0
        assert len(turns(s.store)) == 1  # rejected requests stored nothing


def test_each_users_key_selects_their_own_store(engine, tmp_path):
    from openclaw_trl.engines.views import AdapterView
    from openclaw_trl.serving.app import ServerThread, UserParts, create_tenants_app
    from openclaw_trl.serving.settings import ServerSettings
    from openclaw_trl.sessions import TurnCollector
    from openclaw_trl.store import Store
    from openclaw_trl.users import UserKeys, UserSpec

    stores = {name: Store(tmp_path / f"{name}.db") for name in ("alice", "bob")}
    parts = [UserParts(n, AdapterView(engine.engine, n), TurnCollector(s), s) for n, s in stores.items()]
    keys = UserKeys(
        (UserSpec("alice", "ALICE_KEY"), UserSpec("bob", "BOB_KEY")),
        environ={"ALICE_KEY": "ka", "BOB_KEY": "kb"},
    )
    server = ServerThread(
        create_tenants_app(parts, ServerSettings(ui=False, default_max_tokens=4), keys)
    ).start()
    try:
        alice = anthropic.Anthropic(base_url=server.url, api_key="ka", max_retries=0)
        bob = anthropic.Anthropic(base_url=server.url, auth_token="kb", max_retries=0)
        alice.messages.create(model="openclaw", messages=HI, max_tokens=2)
        bob.messages.create(model="openclaw", messages=HI, max_tokens=2)
        alice.messages.create(model="openclaw", messages=HI, max_tokens=2)
        with pytest.raises(anthropic.AuthenticationError):
            anthropic.Anthropic(base_url=server.url, api_key="kc", max_retries=0).messages.create(
                model="openclaw", messages=HI, max_tokens=2
            )
        assert (len(turns(stores["alice"])), len(turns(stores["bob"]))) == (2, 1)
    finally:
        server.stop()
        for store in stores.values():
            store.close()


def test_a_failed_stream_ends_with_an_error_event_and_stores_nothing(stack, client, engine):
    def broken(_ids):
        raise RuntimeError("engine on fire")

    engine.script = broken
    before = len(turns(stack.store))
    try:
        body = {"model": "openclaw", "messages": HI, "max_tokens": 4, "stream": True}
        r = httpx.post(f"{stack.url}/v1/messages", json=body, timeout=60)
    finally:
        engine.script = None
    events = [line for line in r.text.splitlines() if line.startswith("event: ")]
    assert events[0] == "event: message_start" and events[-1] == "event: error"
    last = json.loads(r.text.strip().splitlines()[-1][6:])
    assert last["type"] == "error" and last["error"]["type"] == "api_error"
    assert "engine on fire" in last["error"]["message"]
    assert len(turns(stack.store)) == before


def test_errors_are_the_sdk_exception_classes(stack, client):
    with pytest.raises(anthropic.NotFoundError, match="does not exist") as err:
        client.messages.create(model="claude-9", messages=HI, max_tokens=2)
    assert err.value.body["error"]["type"] == "not_found_error"
    with pytest.raises(anthropic.BadRequestError) as err:
        client.messages.create(model="openclaw", messages=HI, max_tokens=2, extra_body={"temperature": 1.5})
    assert err.value.body["type"] == "error" and err.value.body["error"]["type"] == "invalid_request_error"
    with pytest.raises(anthropic.NotFoundError):
        client.get("/v1/messages/msg_123", cast_to=object)
    r = httpx.post(f"{stack.url}/v1/messages", content=b"x" * (4 * 1024 * 1024 + 1))
    assert r.status_code == 413 and r.json()["error"]["type"] == "request_too_large"
    r = httpx.post(
        f"{stack.url}/v1/chat/completions", json={"messages": []}
    )  # other routes keep OpenAI's shape
    assert "type" not in r.json() and r.json()["error"]["code"]


def _block(**fields):
    return {"model": "openclaw", "max_tokens": 4, "messages": [{"role": "user", "content": [fields]}]}


def _after_call(result: dict) -> dict:
    call = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}
    return {
        "model": "openclaw",
        "max_tokens": 4,
        "tools": [WEATHER_TOOL],
        "messages": [
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": [call]},
            {"role": "user", "content": [result]},
        ],
    }


BASE = {"model": "openclaw", "max_tokens": 4, "messages": HI}
HOSTILE = [
    ({"model": "openclaw", "messages": HI}, 400, "max_tokens: Field required"),
    ({**BASE, "max_tokens": 0}, 400, "max_tokens"),
    ({**BASE, "max_tokens": "4"}, 400, "max_tokens"),
    ({**BASE, "max_tokens": 2**70}, 400, "max_tokens"),
    ({**BASE, "temperature": 1.5}, 400, "temperature"),
    ({**BASE, "top_k": -1}, 400, "top_k"),
    ({**BASE, "stream": "yes"}, 400, "stream"),
    ({**BASE, "foo": 1}, 400, "foo: Extra inputs"),
    ({**BASE, "thinking": {"type": "enabled", "budget_tokens": 1024}}, 400, "omit 'thinking'"),
    ({**BASE, "metadata": {"user_id": "u", "tag": "x"}}, 400, "metadata.tag"),
    ({**BASE, "metadata": {"user_id": "bad id!"}}, 400, "session id"),
    ({**BASE, "metadata": {"user_id": "u" * 129}}, 400, "max_session_id_chars"),
    ({**BASE, "messages": []}, 400, "messages"),
    ({**BASE, "messages": "hi"}, 400, "messages"),
    ({**BASE, "messages": [{"role": "system", "content": "x"}]}, 400, "role"),
    ({**BASE, "messages": [{"role": "user", "content": []}]}, 400, "non-empty"),
    ({**BASE, "messages": [{"role": "user", "content": "x", "name": "a"}]}, 400, "Extra inputs"),
    ({**BASE, "messages": [*HI, {"role": "assistant", "content": "pre"}]}, 400, "prefill"),
    (_block(type="image", source={"type": "base64", "media_type": "image/png", "data": "AA"}), 400, "image"),
    (_block(type="text"), 400, "text"),
    (_block(type="text", text=5), 400, "valid string"),
    (_block(type="text", text="x", extra=1), 400, "extra"),
    (_block(text="no type"), 400, "type"),
    (_block(type="thinking", thinking="x"), 400, "cannot appear in a user message"),
    (_block(type="tool_use", id="toolu_1", name="x", input={}), 400, "cannot appear in a user message"),
    (_block(type="tool_result", tool_use_id="toolu_nope", content="x"), 400, "unexpected tool_use_id"),
    (_after_call({"type": "tool_result", "tool_use_id": "toolu_2", "content": "x"}), 400, "toolu_2"),
    (_after_call({"type": "tool_result", "tool_use_id": "toolu_1", "content": 5}), 400, "content"),
    (_after_call({"type": "tool_result", "tool_use_id": "toolu_1", "is_error": "yes"}), 400, "is_error"),
    (
        _after_call({"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "image"}]}),
        400,
        "image",
    ),
    ({**BASE, "tools": [{"name": "x"}]}, 400, "input_schema"),
    ({**BASE, "tools": [{"type": "web_search_20250305", "name": "web_search"}]}, 400, "server tools"),
    ({**BASE, "tools": [WEATHER_TOOL, WEATHER_TOOL]}, 400, "unique"),
    ({**BASE, "tools": [{**WEATHER_TOOL, "name": "bad name"}]}, 400, "name"),
    ({**BASE, "tools": [WEATHER_TOOL] * 65}, 400, "max_tools"),
    ({**BASE, "tool_choice": {"type": "tool", "name": "nope"}, "tools": [WEATHER_TOOL]}, 400, "nope"),
    ({**BASE, "tool_choice": {"type": "any"}}, 400, "needs tools"),
    ({**BASE, "tool_choice": {"type": "required"}}, 400, "tool_choice.type"),
    ({**BASE, "tool_choice": {"type": "auto", "disable_parallel_tool_use": True}}, 400, "several tools"),
    ({**BASE, "stop_sequences": ["a"] * 5}, 400, "max_stop"),
    ({**BASE, "stop_sequences": [""]}, 400, "non-empty"),
    ({**BASE, "stop_sequences": ["x" * 65]}, 400, "max_stop_chars"),
    ({**BASE, "system": [{"type": "image"}]}, 400, "system[0]"),
    ({**BASE, "system": 5}, 400, "system"),
    ({**BASE, "messages": [{"role": "user", "content": "x" * 100_001}]}, 400, "max_message_chars"),
    ({**BASE, "messages": [{"role": "user", "content": "x"}] * 257}, 400, "max_messages"),
    ({**BASE, "model": "other"}, 404, "does not exist"),
    ([1, 2], 400, "JSON object"),
]


@pytest.mark.parametrize(("body", "status", "match"), HOSTILE)
def test_bad_requests_are_anthropic_errors_and_store_nothing(stack, body, status, match):
    before = len(turns(stack.store))
    r = httpx.post(
        f"{stack.url}/v1/messages", json=body, headers={"anthropic-version": "2023-06-01"}, timeout=30
    )
    assert r.status_code == status, r.text
    error = r.json()
    assert error["type"] == "error" and set(error["error"]) == {"type", "message"}
    assert match.lower() in error["error"]["message"].lower()
    assert len(turns(stack.store)) == before


def test_bad_headers_and_json(stack):
    before = len(turns(stack.store))
    r = httpx.post(f"{stack.url}/v1/messages", json=BASE, headers={"anthropic-version": "2020-01-01"})
    assert r.status_code == 400 and "anthropic-version" in r.json()["error"]["message"]
    r = httpx.post(
        f"{stack.url}/v1/messages", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    r = httpx.post(f"{stack.url}/v1/messages", json=BASE, headers={"X-Session-Id": "bad id"})
    assert r.status_code == 400 and "session id" in r.json()["error"]["message"]
    r = httpx.post(f"{stack.url}/v1/messages/count_tokens", json={**BASE})
    assert r.status_code == 400 and "count_tokens" in r.json()["error"]["message"]
    assert len(turns(stack.store)) == before
