"""``POST /v1/responses`` and the reasoning fields, with the real ``openai`` client against the tiny model on
127.0.0.1: sync and streamed responses, a function-call round trip through ``previous_response_id``, the
turns in the store as session turns that the scorer turns into samples, and the errors of bad requests."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from tests._server_helpers import running_stack, scripted_hf_engine, turns

WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    "strict": True,
}
TOOL_CALL_TEXT = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
THINKING_TEXT = "<think>\nthe user wants a plan\n</think>\n\nHere is the plan."


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    with scripted_hf_engine(tiny_model_dir) as eng:
        yield eng


@pytest.fixture(scope="module")
def stack(engine, tmp_path_factory):
    with running_stack(engine, tmp_path_factory.mktemp("resp") / "store.db", max_context_len=512) as s:
        yield s


@pytest.fixture
def client(stack):
    return openai.OpenAI(base_url=stack.url + "/v1", api_key="unused", max_retries=0, timeout=60)


@pytest.fixture
def says(engine):
    """``says("text")`` makes the model answer ``text`` for the rest of the test."""

    def set_text(text: str | None) -> None:
        engine.script = None if text is None else (lambda _ids: text)

    yield set_text
    engine.script = None


def _turn_of(stack, response):
    return stack.store.conversations.get_turn(response.model_extra["openclaw"]["turn_id"])


# --------------------------------------------------------------------------------------------------
# Reasoning under both names (chat completions)
# --------------------------------------------------------------------------------------------------


def test_reasoning_is_sent_as_reasoning_and_reasoning_content(client, says):
    says(THINKING_TEXT)
    kw = dict(model="openclaw", messages=[{"role": "user", "content": "plan?"}], max_tokens=40)
    message = client.chat.completions.create(**kw).choices[0].message
    assert message.content == "Here is the plan."
    assert (
        message.model_extra["reasoning_content"]
        == message.model_extra["reasoning"]
        == "the user wants a plan"
    )
    names = {"reasoning": "", "reasoning_content": ""}
    for chunk in client.chat.completions.create(**kw, stream=True):
        delta = chunk.choices[0].delta.model_extra or {}
        assert ("reasoning" in delta) == ("reasoning_content" in delta)
        for name in names:
            names[name] += delta.get(name) or ""
    assert names == {"reasoning": "the user wants a plan", "reasoning_content": "the user wants a plan"}
    says("No thinking.")
    assert "reasoning" not in (client.chat.completions.create(**kw).choices[0].message.model_extra or {})


@pytest.mark.parametrize(
    "fields",
    [{"reasoning": "r1"}, {"reasoning_content": "r1"}, {"reasoning": "r1", "reasoning_content": "r1"}],
)
def test_reasoning_is_accepted_under_either_name(stack, client, fields):
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello", **fields},
        {"role": "user", "content": "again"},
    ]
    reply = client.chat.completions.create(model="openclaw", messages=messages, max_tokens=2)
    assert _turn_of(stack, reply).prompt_messages[1]["reasoning_content"] == "r1"


def test_two_different_reasoning_texts_are_refused(stack, client):
    before = len(turns(stack.store))
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello", "reasoning": "a", "reasoning_content": "b"},
        {"role": "user", "content": "again"},
    ]
    with pytest.raises(openai.BadRequestError, match="two names of one field") as err:
        client.chat.completions.create(model="openclaw", messages=messages, max_tokens=2)
    assert err.value.body["param"] == "messages[1]"
    assert len(turns(stack.store)) == before


# --------------------------------------------------------------------------------------------------
# POST /v1/responses
# --------------------------------------------------------------------------------------------------


def test_responses_create_sync_stores_a_session_turn(stack, client, says):
    says(THINKING_TEXT)
    r = client.responses.create(
        model="openclaw",
        instructions="Be brief.",
        input="make a plan",
        max_output_tokens=40,
        metadata={"ticket": "42"},
        extra_headers={"X-Session-Id": "resp-sync"},
    )
    assert r.id.startswith("resp_") and r.status == "completed" and r.object == "response"
    assert r.output_text == "Here is the plan."
    assert [item.type for item in r.output] == ["reasoning", "message"]
    assert r.output[0].content[0].text == "the user wants a plan"
    assert r.instructions == "Be brief." and r.metadata == {"ticket": "42"}
    turn = _turn_of(stack, r)
    assert turn.turn_type == "main" and turn.status == "awaiting" and turn.trainable
    assert turn.prompt_messages == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "make a plan"},
    ]
    assert r.usage.input_tokens == len(turn.prompt_ids) and r.usage.output_tokens == len(turn.completion_ids)
    assert 0 < r.usage.output_tokens_details.reasoning_tokens < r.usage.output_tokens
    assert stack.store.conversations.get_session(turn.session_id).key == "resp-sync"
    assert stack.store.responses.get_response(r.id).turn_id == turn.id
    assert client.responses.retrieve(r.id).model_dump() == r.model_dump()  # GET returns it as it was sent


def test_responses_stream_events(stack, client, says):
    says(THINKING_TEXT)
    events = list(
        client.responses.create(
            model="openclaw", input="make a plan", max_output_tokens=40, stream=True, user="resp-stream"
        )
    )
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    thought = "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")
    assert (thought, text) == ("the user wants a plan", "Here is the plan.")
    assert sum(e.type == "response.output_text.delta" for e in events) >= 2  # token by token, not one blob
    (done,) = [e for e in events if e.type == "response.output_text.done"]
    final = events[-1].response
    assert done.text == final.output_text == "Here is the plan."
    assert final.id == events[0].response.id and events[0].response.status == "in_progress"
    added = [e.item.id for e in events if e.type == "response.output_item.added"]
    assert added == [item.id for item in final.output]
    turn = _turn_of(stack, final)
    assert turn.response_message["content"] == "Here is the plan."
    assert stack.store.conversations.get_session(turn.session_id).key == "resp-stream"
    # the SDK's stream helper accumulates the same response from the events
    with client.responses.stream(model="openclaw", input="again", max_output_tokens=40) as stream:
        assert stream.get_final_response().output_text == "Here is the plan."


def test_function_call_round_trip_with_previous_response_id(stack, client, says):
    says(TOOL_CALL_TEXT)
    first = client.responses.create(
        model="openclaw",
        input=[{"role": "user", "content": [{"type": "input_text", "text": "weather in Paris?"}]}],
        tools=[WEATHER_TOOL],
        max_output_tokens=40,
        extra_headers={"X-Session-Id": "resp-tools"},
    )
    (call,) = first.output
    assert call.type == "function_call" and call.name == "get_weather"
    assert json.loads(call.arguments) == {"city": "Paris"} and first.output_text == ""
    says("It is 21 degrees in Paris.")
    output = {"type": "function_call_output", "call_id": call.call_id, "output": '{"temp_c": 21}'}
    second = client.responses.create(
        model="openclaw",
        previous_response_id=first.id,
        input=[output],
        tools=[WEATHER_TOOL],
        max_output_tokens=40,
    )
    assert second.output_text == "It is 21 degrees in Paris." and second.previous_response_id == first.id
    t1, t2 = _turn_of(stack, first), _turn_of(stack, second)
    assert second.model_extra["openclaw"]["next_state_of"] == t1.id
    assert t1.status == "ready" and t1.next_state == {
        **t1.next_state,
        "role": "tool",
        "content": '{"temp_c": 21}',
    }
    assert t2.session_id == t1.session_id and t2.idx == t1.idx + 1
    assert [m["role"] for m in t2.prompt_messages] == ["user", "assistant", "tool"]
    assert t2.prompt_messages[1]["tool_calls"][0]["id"] == call.call_id
    assert t1.tools[0]["function"]["name"] == "get_weather"
    # the same round trip with the history sent back by hand (the output items as input, no previous id)
    says(TOOL_CALL_TEXT)
    ask = [{"role": "user", "content": "weather in Lyon?"}]
    headers = {"X-Session-Id": "resp-manual"}
    first = client.responses.create(model="openclaw", input=ask, tools=[WEATHER_TOOL], extra_headers=headers)
    (call,) = first.output
    says("Sunny.")
    echo = [item.model_dump() for item in first.output]
    output = {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}
    second = client.responses.create(
        model="openclaw", input=ask + echo + [output], tools=[WEATHER_TOOL], extra_headers=headers
    )
    assert second.model_extra["openclaw"]["next_state_of"] == _turn_of(stack, first).id
    # streamed, the call arrives as its own item with its arguments events
    says(TOOL_CALL_TEXT)
    events = list(
        client.responses.create(model="openclaw", input="weather?", tools=[WEATHER_TOOL], stream=True)
    )
    (args,) = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert json.loads(args.arguments) == {"city": "Paris"}
    assert [i.type for i in events[-1].response.output] == ["function_call"]


def test_continued_responses_are_judged_into_samples(stack, client, says):
    from openclaw_trl.judging import JudgeConfig, Scorer

    says("Sure.")
    first = client.responses.create(model="openclaw", input="hi", max_output_tokens=10, user="resp-learn")
    second = client.responses.create(
        model="openclaw", input="thanks, that helps", previous_response_id=first.id, max_output_tokens=10
    )
    t1 = _turn_of(stack, first)
    assert t1.status == "ready" and t1.next_state["content"] == "thanks, that helps"
    assert _turn_of(stack, second).session_id == t1.session_id
    scorer = Scorer(
        stack.store, JudgeConfig(method="rl", backend="callable", callable="tests._scorer_rules:rule_judge")
    )
    try:
        scorer.run_until_idle()
    finally:
        scorer.close()
    samples = {s.turn_id: s for s in stack.store.queue.take_samples(1000)}
    assert samples[t1.id].reward == 1.0  # "thanks" is a +1 under the rule judge, as for a chat turn


def test_anonymous_conversations_continue_by_previous_response_id(stack, client, says):
    says("Hello.")
    first = client.responses.create(model="openclaw", input="hi", max_output_tokens=10)
    second = client.responses.create(
        model="openclaw", input="more", previous_response_id=first.id, max_output_tokens=10
    )
    assert _turn_of(stack, second).session_id == _turn_of(stack, first).session_id
    key = second.model_extra["openclaw"]["session_id"]
    assert (
        key.startswith("chain-")
        and stack.store.conversations.get_session(_turn_of(stack, first).session_id).anonymous
    )
    with pytest.raises(openai.BadRequestError, match=f"session '{key}'"):
        client.responses.create(model="openclaw", input="x", previous_response_id=first.id, user="someone")


def test_unknown_ids_are_404(client):
    with pytest.raises(openai.NotFoundError) as err:
        client.responses.create(model="openclaw", input="x", previous_response_id="resp_nope")
    assert err.value.body["code"] == "previous_response_not_found"
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve("resp_nope")


def test_responses_are_never_deleted(stack, client, says):
    says("ok")
    r = client.responses.create(model="openclaw", input="x", max_output_tokens=4)
    with pytest.raises(openai.BadRequestError, match="not deleted"):
        client.responses.delete(r.id)
    assert client.responses.retrieve(r.id).id == r.id


def test_store_false_is_served_and_learned_from_but_not_kept(stack, client):
    """OpenClaw sends ``store: false`` with every request: served, its turn stored and trainable, the response not
    retrievable by id; a later request that re-sends the conversation continues it (no session id needed)."""
    r = client.responses.create(model="openclaw", input="unstored", max_output_tokens=4, store=False)
    assert r.store is False
    turn = _turn_of(stack, r)
    assert turn.trainable and stack.store.responses.get_response(r.id) is None
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(r.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="openclaw", input="x", previous_response_id=r.id, store=False)
    again = [
        {"role": "user", "content": "unstored"},
        {"role": "assistant", "content": r.output_text},
        {"role": "user", "content": "next"},
    ]
    r2 = client.responses.create(model="openclaw", input=again, max_output_tokens=4, store=False)
    assert _turn_of(stack, r2).session_id == turn.session_id
    assert stack.store.conversations.get_turn(turn.id).next_state["content"] == "next"


def test_store_false_can_be_kept_out_of_learning(engine, tmp_path):
    with running_stack(engine, tmp_path / "unstored.db", learn_unstored_responses=False) as s:
        client = openai.OpenAI(base_url=f"{s.url}/v1", api_key="x")
        r = client.responses.create(model="openclaw", input="private", max_output_tokens=4, store=False)
        turn = s.store.conversations.get_turn(r.model_extra["openclaw"]["turn_id"])
        assert s.store.conversations.get_session(turn.session_id).private


@pytest.mark.parametrize(
    ("body", "match"),
    [
        ({"foo": 1}, "Unknown parameter: 'foo'"),
        ({"background": True}, "background"),
        ({"tools": [{"type": "web_search"}]}, "only function tools"),
        ({"tool_choice": "required"}, "use 'auto' or 'none'"),
        ({"text": {"format": {"type": "json_schema"}}}, "plain text"),
        ({"reasoning": {"effort": "high"}}, "omit 'reasoning'"),
        ({"conversation": "conv_1"}, "previous_response_id"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
            "input_image",
        ),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "item references"),
        ({"input": [{"type": "function_call_output", "output": "x"}]}, "call_id"),
        ({"input": []}, "non-empty"),
        ({"max_output_tokens": 0}, "max_output_tokens"),
        ({"temperature": "hot"}, "temperature"),
        ({"metadata": {f"k{i}": "v" for i in range(17)}}, "at most 16"),
        ({"input": "x" * 100_001}, "max_message_chars=100000"),
    ],
)
def test_bad_requests_are_400_and_store_nothing(stack, body, match):
    before = len(turns(stack.store))
    r = httpx.post(f"{stack.url}/v1/responses", json={"model": "openclaw", "input": "hi", **body})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert match in error["message"] and error["type"] == "invalid_request_error"
    assert len(turns(stack.store)) == before


def test_continuation_refuses_other_instructions_and_other_sessions(client, says):
    says("ok")
    first = client.responses.create(
        model="openclaw", input="hi", instructions="Be brief.", max_output_tokens=4, user="resp-keep"
    )
    same = client.responses.create(
        model="openclaw",
        input="again",
        instructions="Be brief.",
        previous_response_id=first.id,
        max_output_tokens=4,
    )
    assert same.instructions == "Be brief."
    kept = client.responses.create(
        model="openclaw", input="and?", previous_response_id=same.id, max_output_tokens=4
    )
    assert kept.instructions == "Be brief."  # the conversation keeps its instructions
    with pytest.raises(openai.BadRequestError, match="'instructions' differ"):
        client.responses.create(
            model="openclaw", input="x", instructions="Be long.", previous_response_id=first.id
        )
    with pytest.raises(openai.BadRequestError, match="belongs to session 'resp-keep'"):
        client.responses.create(
            model="openclaw",
            input="x",
            previous_response_id=first.id,
            extra_headers={"X-Session-Id": "other"},
        )


def test_a_cut_off_response_is_incomplete(stack, client):
    events = list(
        client.responses.create(model="openclaw", input="a long story", max_output_tokens=1, stream=True)
    )
    final = events[-1].response
    turn = _turn_of(stack, final)
    cut = turn.finish_reason == "length"  # the random tiny model hardly ever ends within one token
    assert events[-1].type == ("response.incomplete" if cut else "response.completed")
    assert final.status == ("incomplete" if cut else "completed")
    assert (final.incomplete_details.reason if cut else None) == ("max_output_tokens" if cut else None)
    assert client.responses.retrieve(final.id).status == final.status


def test_a_failed_stream_ends_with_response_failed_and_stores_nothing(stack, client, engine):
    def broken(_ids):
        raise RuntimeError("engine on fire")

    engine.script = broken
    before = len(turns(stack.store))
    try:
        events = list(client.responses.create(model="openclaw", input="x", stream=True, user="resp-fail"))
    finally:
        engine.script = None
    assert [e.type for e in events][:2] == ["response.created", "response.in_progress"]
    assert events[-1].type == "response.failed" and "engine on fire" in events[-1].response.error.message
    assert len(turns(stack.store)) == before
