"""The OpenAI-compatible API with the real ``openai`` client, against the tiny model on 127.0.0.1.

One server for the module (UI mounted, so the API routes are checked to win over the Gradio mount); a
``ScriptedEngine`` lets a test make the model emit a tool call or a ``<think>`` block.
"""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from tests._server_helpers import running_stack, scripted_hf_engine, turns
from tests.helpers import wait_until, wait_until_steady

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
TOOL_CALL_TEXT = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    with scripted_hf_engine(tiny_model_dir) as eng:
        yield eng


@pytest.fixture(scope="module")
def stack(engine, tmp_path_factory):
    with running_stack(
        engine, tmp_path_factory.mktemp("srv") / "store.db", ui=True, max_context_len=512
    ) as s:
        yield s


@pytest.fixture
def client(stack):
    return openai.OpenAI(base_url=stack.url + "/v1", api_key="unused", max_retries=0, timeout=60)


@pytest.fixture
def script(engine):
    """Set ``engine.script`` for one test."""
    yield engine
    engine.script = None


def _turn(stack, turn_id):
    return stack.store.conversations.get_turn(int(turn_id))


def test_chat_sync_stores_the_turn_before_replying(stack, client):
    raw = client.chat.completions.with_raw_response.create(
        model="openclaw", messages=[{"role": "user", "content": "hello there"}], max_tokens=6, temperature=0.8
    )
    reply = raw.parse()
    turn_id = int(raw.headers["x-openclaw-turn-id"])
    assert reply.system_fingerprint == f"openclaw-v{stack.engine.policy_version}"
    assert reply.choices[0].finish_reason in ("stop", "length")
    assert reply.usage.completion_tokens <= 6
    turn = _turn(stack, turn_id)  # the reply is out, so the turn must already be committed
    assert turn is not None and turn.turn_type == "main"
    assert len(turn.completion_ids) == reply.usage.completion_tokens == len(turn.sampling_logprobs)
    assert len(turn.prompt_ids) == reply.usage.prompt_tokens
    # an anonymous conversation is trainable, so sampled at the training temperature whatever it asks
    assert turn.temperature == pytest.approx(stack.app.state.tenants[None].service.settings.train_temperature)
    assert reply.model_extra["openclaw"]["turn_id"] == turn_id


def test_stream_real_tokens_and_turn_before_final_chunk(stack, client):
    stream = client.chat.completions.create(
        model="openclaw",
        messages=[{"role": "user", "content": "count to three"}],
        max_tokens=8,
        stream=True,
        stream_options={"include_usage": True},
        extra_headers={"X-Session-Id": "stream-1"},
    )
    text, content_chunks, final, usage = "", 0, None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        if delta.content:
            text += delta.content
            content_chunks += 1
        if chunk.choices[0].finish_reason:
            final = chunk
            # the turn is committed before the chunk that carries finish_reason is sent
            assert _turn(stack, chunk.model_extra["openclaw"]["turn_id"]) is not None
    assert final is not None and usage is not None and usage.completion_tokens <= 8
    turn = _turn(stack, final.model_extra["openclaw"]["turn_id"])
    assert turn.response_message["content"] == text
    assert content_chunks >= 2  # real streaming: one delta per (decodable) token, not one blob


def test_multi_turn_session_headers_attach_next_states(stack, client):
    headers = {"X-Session-Id": "multi-1", "X-Turn-Type": "main"}
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    ids = []
    for follow_up in ("tell me more", "thanks", None):
        raw = client.chat.completions.with_raw_response.create(
            model="openclaw", messages=messages, max_tokens=5, extra_headers=headers
        )
        ids.append(int(raw.headers["x-openclaw-turn-id"]))
        assert raw.headers["x-openclaw-session-id"] == "multi-1"
        messages = messages + [raw.parse().choices[0].message.model_dump(exclude_none=True)]
        if follow_up:
            messages.append({"role": "user", "content": follow_up})
    stored = [_turn(stack, i) for i in ids]
    assert len({t.session_id for t in stored}) == 1
    assert [t.idx for t in stored] == [0, 1, 2]
    assert stored[0].next_state["content"] == "tell me more"
    assert stored[1].next_state["content"] == "thanks"
    assert stored[2].status == "awaiting" and stored[2].next_state is None
    # a side turn in the same session is served and stored, but does not take the next state
    side = client.chat.completions.with_raw_response.create(
        model="openclaw",
        messages=messages + [{"role": "user", "content": "summarise (memory flush)"}],
        max_tokens=3,
        extra_headers={"X-Session-Id": "multi-1", "X-Turn-Type": "side"},
    )
    assert _turn(stack, side.headers["x-openclaw-turn-id"]).turn_type == "side"
    assert _turn(stack, ids[2]).next_state is None


def test_tools_round_trip_tool_result_is_the_next_state(stack, client, script):
    script.script = lambda _ids: TOOL_CALL_TEXT  # the first reply is a tool call
    headers = {"X-Session-Id": "tools-1"}
    messages = [{"role": "user", "content": "weather in Paris?"}]
    raw = client.chat.completions.with_raw_response.create(
        model="openclaw", messages=messages, tools=[WEATHER_TOOL], max_tokens=40, extra_headers=headers
    )
    reply = raw.parse()
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}
    script.script = None
    messages += [
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": '{"temp_c": 21}'},
    ]
    second = client.chat.completions.with_raw_response.create(
        model="openclaw", messages=messages, tools=[WEATHER_TOOL], max_tokens=5, extra_headers=headers
    )
    assert second.parse().model_extra["openclaw"]["next_state_of"] == int(raw.headers["x-openclaw-turn-id"])
    first = _turn(stack, raw.headers["x-openclaw-turn-id"])
    assert first.tools[0]["function"]["name"] == "get_weather"
    assert first.next_state["role"] == "tool" and first.next_state["content"] == '{"temp_c": 21}'


def test_stream_tool_call_and_reasoning_deltas_carry_index(client, script):
    script.script = lambda _ids: "<think>\nthe user wants weather\n</think>\n\nChecking." + TOOL_CALL_TEXT
    stream = client.chat.completions.create(
        model="openclaw",
        messages=[{"role": "user", "content": "weather?"}],
        tools=[WEATHER_TOOL],
        max_tokens=60,
        stream=True,
    )
    reasoning, content, calls, finish = "", "", [], None
    for chunk in stream:
        delta = chunk.choices[0].delta
        reasoning += (delta.model_extra or {}).get("reasoning_content") or ""
        content += delta.content or ""
        calls += delta.tool_calls or []
        finish = chunk.choices[0].finish_reason or finish
    assert reasoning == "the user wants weather" and content == "Checking."
    assert [c.index for c in calls] == [0] and calls[0].function.name == "get_weather"
    assert finish == "tool_calls"


def test_stop_strings_are_not_returned(client, script):
    script.script = lambda _ids: "alpha beta gamma"
    kw = dict(model="openclaw", messages=[{"role": "user", "content": "x"}], stop=[" beta"], max_tokens=20)
    assert client.chat.completions.create(**kw).choices[0].message.content == "alpha"
    streamed = "".join(
        c.choices[0].delta.content or "" for c in client.chat.completions.create(**kw, stream=True)
    )
    assert streamed == "alpha"


def test_judge_reads_the_reply_as_served_after_stop_strings(stack, client, script):
    from openclaw_trl.judging.voters import response_text_for_judge

    script.script = lambda _ids: "alpha beta gamma"
    kw = dict(model="openclaw", messages=[{"role": "user", "content": "x"}], stop=[" beta"], max_tokens=20)
    for stream in (False, True):
        reply = client.chat.completions.create(
            **kw, stream=stream, extra_headers={"X-Session-Id": f"stop-{stream}"}
        )
        last = list(reply)[-1] if stream else reply  # the final chunk carries the openclaw object
        turn = _turn(stack, last.model_extra["openclaw"]["turn_id"])
        assert "beta" in turn.completion_text  # the ids keep what the model sampled
        assert turn.response_message["content"] == "alpha"
        assert response_text_for_judge(turn) == "alpha"


def test_trainable_turns_are_sampled_at_the_training_temperature(stack, client):
    def ask(temperature, **headers):
        raw = client.chat.completions.with_raw_response.create(
            model="openclaw",
            messages=[{"role": "user", "content": "one temperature"}],
            max_tokens=3,
            temperature=temperature,
            extra_headers=headers,
        )
        used = raw.parse().model_extra["openclaw"]["temperature"]
        return used, _turn(stack, raw.headers["x-openclaw-turn-id"]).temperature

    train_t = stack.app.state.tenants[None].service.settings.train_temperature
    assert ask(0.3, **{"X-Session-Id": "temp-main"}) == (train_t, train_t)
    assert ask(0.0, **{"X-Session-Id": "temp-greedy"}) == (train_t, train_t)  # never greedy when trainable
    assert ask(0.3) == (train_t, train_t)  # anonymous: trained on as a conversation recognised by its history
    assert ask(0.0, **{"X-Turn-Type": "side"}) == (0.0, 0.0)  # recorded as greedy
    assert ask(0.3, **{"X-Session-Id": "temp-side", "X-Turn-Type": "side"}) == (0.3, 0.3)
    assert ask(0.3, **{"X-Session-Id": "temp-private", "X-Session-Private": "true"}) == (0.3, 0.3)


def test_trainable_turns_are_sampled_from_the_full_distribution(stack, client, monkeypatch):
    """A client's top_p / top_k truncate only untrainable turns: the stored log-probs of a trainable turn are
    those of the distribution it was sampled from (the importance weight and the PPO ratio need that)."""
    engine, seen = stack.app.state.tenants[None].service.engine, []
    real = engine.generate

    def spy(requests, **kwargs):
        seen.append(requests[0].sampling)
        return real(requests, **kwargs)

    monkeypatch.setattr(engine, "generate", spy)

    def ask(**headers):
        client.chat.completions.create(
            model="openclaw",
            messages=[{"role": "user", "content": "truncated"}],
            max_tokens=3,
            top_p=0.5,
            extra_body={"top_k": 3},
            extra_headers=headers,
        )
        return seen[-1].top_p, seen[-1].top_k

    assert ask(**{"X-Session-Id": "trunc-main"}) == (1.0, 0)
    assert ask() == (1.0, 0)  # anonymous: trained on as a conversation recognised by its history
    assert ask(**{"X-Session-Id": "trunc-private", "X-Session-Private": "true"}) == (
        0.5,
        3,
    )  # never trained on
    assert ask(**{"X-Session-Id": "trunc-side", "X-Turn-Type": "side"}) == (0.5, 3)


def test_logprobs_and_top_logprobs(client):
    reply = client.chat.completions.create(
        model="openclaw",
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=4,
        logprobs=True,
        top_logprobs=3,
        seed=7,
    )
    entries = reply.choices[0].logprobs.content
    assert len(entries) == reply.usage.completion_tokens
    assert all(e.logprob <= 0 and len(e.top_logprobs) == 3 for e in entries)


def test_seed_makes_sampling_reproducible(client):
    kw = dict(
        model="openclaw", messages=[{"role": "user", "content": "a story"}], max_tokens=8, temperature=1.0
    )
    first = client.chat.completions.create(**kw, seed=1234).choices[0].message.content
    assert client.chat.completions.create(**kw, seed=1234).choices[0].message.content == first


def test_context_limit_follows_the_model(engine):
    from openclaw_trl.serving.pipeline.prepare import context_limit

    assert context_limit(engine.engine, 10**6) == 2048  # the tiny model's max_position_embeddings
    assert context_limit(engine.engine, 512) == 512


def test_feedback_route_is_the_next_state(stack, client):
    raw = client.chat.completions.with_raw_response.create(
        model="openclaw",
        messages=[{"role": "user", "content": "what is 2+2?"}],
        max_tokens=4,
        extra_headers={"X-Session-Id": "fb-1"},
    )
    turn_id = int(raw.headers["x-openclaw-turn-id"])
    r = httpx.post(
        f"{stack.url}/v1/feedback",
        json={"turn_id": turn_id, "session_id": "fb-1", "rating": -1, "text": "It is 4."},
    )
    assert r.status_code == 200 and r.json()["attached"] is True
    turn = _turn(stack, turn_id)
    assert turn.status == "ready" and turn.next_state["rating"] == -1
    assert turn.next_state["text"] == "It is 4."
    assert any(f.turn_id == turn_id and f.text == "It is 4." for f in stack.store.queries.iter_feedback())
    unknown = {"turn_id": 10**9, "session_id": "fb-1", "rating": 1}
    assert httpx.post(f"{stack.url}/v1/feedback", json=unknown).status_code == 404


def test_feedback_route_addresses_any_turn_with_each_action(stack, client):
    """The UI's per-message signals over HTTP with the real client: 👎 on an earlier turn, a correction,
    a rejection (retry) and a withdrawal (undo) of the last turn; bad actions are 400s that write nothing."""
    messages, ids = [], []
    for text in ("first question", "second question", "third question"):
        messages.append({"role": "user", "content": text})
        raw = client.chat.completions.with_raw_response.create(
            model="openclaw", messages=messages, max_tokens=4, extra_headers={"X-Session-Id": "fb-actions"}
        )
        ids.append(int(raw.headers["x-openclaw-turn-id"]))
        messages.append({"role": "assistant", "content": raw.parse().choices[0].message.content})
    post = lambda body: httpx.post(  # noqa: E731
        f"{stack.url}/v1/feedback", json=body, headers={"X-Session-Id": "fb-actions"}
    )
    first, second, last = ids
    r = post({"turn_id": first, "rating": -1})  # an earlier turn, not the last one
    assert r.status_code == 200 and r.json()["attached"] and r.json()["action"] == "rate"
    assert _turn(stack, first).next_state["rating"] == -1
    r = post({"turn_id": str(second), "action": "correct", "text": "The answer is 4."})
    assert r.json()["attached"] and _turn(stack, second).next_state["text"] == "The answer is 4."
    assert _turn(stack, second).next_state["kind"] == "correction"
    before = stack.store.queries.counts()
    for bad in [
        {"turn_id": last, "action": "undo"},
        {"turn_id": last, "action": "reject", "rating": -1},
        {"turn_id": last, "action": "withdraw", "text": "x"},
        {"turn_id": last, "action": "correct"},
        {"turn_id": last, "action": "correct", "text": "x", "rating": 1},
        {
            "turn_id": last,
            "action": "correct",
            "text": "x" * (stack.app.state.tenants[None].service.settings.limits.max_feedback_chars + 1),
        },
    ]:
        r = post(bad)
        assert r.status_code == 400 and r.json()["error"]["param"] in ("action", "text"), (bad, r.text)
    assert post({"turn_id": 10**9, "action": "withdraw"}).status_code == 404
    assert stack.store.queries.counts() == before
    r = post({"turn_id": last, "action": "reject"})
    assert r.json()["attached"] and _turn(stack, last).next_state["kind"] == "reject"
    r = post({"turn_id": last, "action": "withdraw"})
    assert r.status_code == 200
    assert {k: r.json()[k] for k in ("action", "already", "sample_dropped", "trained_step")} == {
        "action": "withdraw",
        "already": False,
        "sample_dropped": False,
        "trained_step": None,
    }
    assert (_turn(stack, last).status, _turn(stack, last).close_reason) == ("closed", "withdrawn")
    assert post({"turn_id": last, "action": "withdraw"}).json()["already"] is True


def test_models_health_status_and_ui_mounted(stack, client):
    assert [m.id for m in client.models.list().data] == ["openclaw"]
    assert httpx.get(f"{stack.url}/healthz").json()["ok"] is True
    status = httpx.get(f"{stack.url}/v1/status").json()
    assert status["policy_version"] == stack.engine.policy_version and "samples_waiting" in status
    page = httpx.get(f"{stack.url}/")
    assert page.status_code == 200 and "gradio" in page.text.lower()


def test_bearer_auth(engine, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENCLAW_TEST_KEY", "s3cret")
    with running_stack(engine, tmp_path / "auth.db", api_key_env="OPENCLAW_TEST_KEY") as s:
        messages = [{"role": "user", "content": "hi"}]
        bad = openai.OpenAI(base_url=s.url + "/v1", api_key="wrong", max_retries=0)
        with pytest.raises(openai.AuthenticationError) as err:
            bad.chat.completions.create(model="openclaw", messages=messages, max_tokens=2)
        assert err.value.body["code"] == "invalid_api_key"
        r = httpx.post(f"{s.url}/v1/chat/completions", json={"messages": messages})
        assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
        good = openai.OpenAI(base_url=s.url + "/v1", api_key="s3cret", max_retries=0)
        assert good.chat.completions.create(model="openclaw", messages=messages, max_tokens=2).choices
        assert httpx.get(f"{s.url}/healthz").status_code == 200  # liveness stays open
        assert turns(s.store) and len(turns(s.store)) == 1  # rejected requests stored nothing
    monkeypatch.delenv("OPENCLAW_TEST_KEY")
    with pytest.raises(ValueError, match="OPENCLAW_TEST_KEY"):
        from openclaw_trl.serving.app import create_app
        from openclaw_trl.serving.settings import ServerSettings

        create_app(engine, None, None, ServerSettings(ui=False, api_key_env="OPENCLAW_TEST_KEY"))


def test_build_serving_wires_a_working_stack(tiny_model_dir, tmp_path):
    from openclaw_trl.serving.app import ServerThread
    from openclaw_trl.serving.settings import ServerSettings
    from openclaw_trl.serving_stack import build_serving

    serving = build_serving(
        tiny_model_dir, tmp_path / "serve.db", ServerSettings(ui=False, default_max_tokens=3)
    )
    try:
        with ServerThread(serving.app) as server:
            r = httpx.post(
                f"{server.url}/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}]}
            )
            assert r.status_code == 200
        assert serving.store.conversations.get_turn(int(r.headers["x-openclaw-turn-id"])) is not None
    finally:
        serving.close()


def test_status_with_nan_metrics_is_valid_json(stack):
    service = stack.app.state.tenants[None].service
    service._status = lambda: {
        "policy_version": 2,
        "history": [{"step": 1, "hint_accept_rate": float("nan")}],
    }
    try:
        r = httpx.get(f"{stack.url}/v1/status")
        assert r.status_code == 200 and r.json()["history"][0]["hint_accept_rate"] is None
    finally:
        service._status = None


def test_client_leaving_mid_stream_stores_no_turn(stack, client):
    before = len(turns(stack.store))
    ended = stack.engine.generations_ended
    body = {
        "model": "openclaw",
        "messages": [{"role": "user", "content": "a long story"}],
        "max_tokens": 40,
        "stream": True,
    }
    with httpx.stream(
        "POST", f"{stack.url}/v1/chat/completions", json=body, headers={"X-Session-Id": "gone"}
    ) as r:
        lines = r.iter_lines()
        assert next(lines).startswith("data: ")  # the role chunk, then we hang up
    wait_until(lambda: stack.engine.generations_ended > ended, what="the left stream's generation to end")
    assert (
        wait_until_steady(lambda: len(turns(stack.store)), settle=0.5) == before
    )  # the reply was never seen: no turn to judge
    reply = client.chat.completions.create(model="openclaw", messages=body["messages"], max_tokens=2)
    assert reply.choices  # and the server serves on


def test_client_leaving_at_the_first_chunk_still_ends_a_done_session(stack, client):
    """A stream left before its turn is stored is aborted with the collector, which honours ``session_done``."""
    messages = [{"role": "user", "content": "a long story"}]
    client.chat.completions.create(
        model="openclaw", messages=messages, max_tokens=2, extra_headers={"X-Session-Id": "left-done"}
    )
    assert stack.store.conversations.find_open_session("left-done") is not None
    before = len(turns(stack.store))
    body = {"model": "openclaw", "messages": messages, "max_tokens": 40, "stream": True}
    headers = {"X-Session-Id": "left-done", "X-Session-Done": "1"}
    with httpx.stream("POST", f"{stack.url}/v1/chat/completions", json=body, headers=headers) as r:
        assert next(r.iter_lines()).startswith("data: ")  # the role chunk, then we hang up
    wait_until(  # the abort ends the session
        lambda: stack.store.conversations.find_open_session("left-done") is None, what="the session to end"
    )
    assert len(turns(stack.store)) == before  # and stored no turn


def test_api_key_also_guards_the_ui(engine, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENCLAW_TEST_KEY", "s3cret")
    with running_stack(engine, tmp_path / "ui-auth.db", ui=True, api_key_env="OPENCLAW_TEST_KEY") as s:
        assert httpx.get(f"{s.url}/config").status_code == 401
        with httpx.Client(base_url=s.url) as browser:
            assert browser.post("/login", data={"username": "me", "password": "nope"}).status_code == 400
            assert browser.post("/login", data={"username": "me", "password": "s3cret"}).status_code == 200
            assert browser.get("/config").status_code == 200


def test_stream_decoder_flushes_a_character_cut_by_the_length_limit(tiny_tokenizer):
    """A completion that stops inside a multi-byte character still streams every byte the model produced."""
    from openclaw_trl.serving.pipeline.streaming import StreamDecoder

    ids = tiny_tokenizer.encode("ok 🙂", add_special_tokens=False)
    cut = ids[:-1]  # the last byte token of the emoji never came: the text ends mid-character
    decoder = StreamDecoder(tiny_tokenizer, stops=[])
    streamed = [d for tid in cut for d in decoder.feed(tid)] + decoder.finish()
    text = "".join(d.get("content") or "" for d in streamed)
    assert text == tiny_tokenizer.decode(cut) and text.startswith("ok ")
    assert decoder.message()["content"] == text
