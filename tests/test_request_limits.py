"""Every request bound (``RequestLimits``) on the real stack: just over it is a 400/413 OpenAI-style error that
names the limit and stores nothing; just under it is served. Real HTTP on 127.0.0.1, the real ``openai`` client."""

from __future__ import annotations

import dataclasses
import json

import httpx
import openai
import pytest

from openclaw_trl.chat import render_prompt_ids
from openclaw_trl.serving.limits import RequestLimits
from tests._server_helpers import running_stack
from tests.helpers import tiny_hf_engine

USER = [{"role": "user", "content": "hello there"}]


def _tool(name: str, description: str = "") -> dict:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {}}}


def _padded_chat(size: int) -> bytes:
    """A chat body of exactly ``size`` bytes (a padding field the server ignores)."""
    body = {"messages": USER, "max_tokens": 2, "pad": ""}
    overhead = len(json.dumps(body).encode())
    return json.dumps({**body, "pad": "x" * (size - overhead)}).encode()


def _prompt_of_tokens(tokenizer) -> tuple[int, str, str]:
    """A limit and two user texts whose rendered prompts are exactly at it and just above it."""
    under = "apple pie " * 5
    limit = len(render_prompt_ids(tokenizer, [{"role": "user", "content": under}]))
    over = under + " pie"
    assert len(render_prompt_ids(tokenizer, [{"role": "user", "content": over}])) > limit
    return limit, under, over


def _chat(**fields) -> dict:
    return {"messages": USER, "max_tokens": 2, **fields}


def _cases(tokenizer):
    """(limit name, limit value, route, under (body, headers), over (body, headers), status, code)."""
    tools_under = [_tool("a", "x" * 10)]
    tools_size = len(json.dumps(tools_under, ensure_ascii=False))
    prompt_limit, prompt_under, prompt_over = _prompt_of_tokens(tokenizer)
    three = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, *USER]
    return [
        (
            "max_request_bytes",
            2000,
            "chat",
            (_padded_chat(2000), {}),
            (_padded_chat(2001), {}),
            413,
            "request_too_large",
        ),
        (
            "max_messages",
            3,
            "chat",
            (_chat(messages=three), {}),
            (_chat(messages=[{"role": "system", "content": "s"}, *three]), {}),
            400,
            "array_above_max_length",
        ),
        (
            "max_message_chars",
            50,
            "chat",
            (_chat(messages=[{"role": "user", "content": "y" * 50}]), {}),
            (_chat(messages=[{"role": "user", "content": "y" * 51}]), {}),
            400,
            "string_above_max_length",
        ),
        (
            "max_total_chars",
            80,
            "chat",
            (
                _chat(
                    messages=[
                        {"role": "user", "content": "y" * 40},
                        {"role": "assistant", "content": "z" * 20},
                        {"role": "user", "content": "w" * 20},
                    ]
                ),
                {},
            ),
            (
                _chat(
                    messages=[
                        {"role": "user", "content": "y" * 40},
                        {"role": "assistant", "content": "z" * 20},
                        {"role": "user", "content": "w" * 21},
                    ]
                ),
                {},
            ),
            400,
            "string_above_max_length",
        ),
        (
            "max_tools",
            2,
            "chat",
            (_chat(tools=[_tool("a"), _tool("b")]), {}),
            (_chat(tools=[_tool("a"), _tool("b"), _tool("c")]), {}),
            400,
            "array_above_max_length",
        ),
        (
            "max_tools_chars",
            tools_size,
            "chat",
            (_chat(tools=tools_under), {}),
            (_chat(tools=[_tool("a", "x" * 11)]), {}),
            400,
            "string_above_max_length",
        ),
        (
            "max_stop",
            2,
            "chat",
            (_chat(stop=["q1", "q2"]), {}),
            (_chat(stop=["q1", "q2", "q3"]), {}),
            400,
            "array_above_max_length",
        ),
        (
            "max_stop_chars",
            5,
            "chat",
            (_chat(stop=["abcde"]), {}),
            (_chat(stop=["abcdef"]), {}),
            400,
            "string_above_max_length",
        ),
        (
            "max_session_id_chars",
            10,
            "chat",
            (_chat(), {"X-Session-Id": "s" * 10}),
            (_chat(), {"X-Session-Id": "s" * 11}),
            400,
            "string_above_max_length",
        ),
        (
            "max_session_id_chars",
            128,
            "chat",
            (_chat(session_id="user@example.com:7"), {}),
            (_chat(session_id="bad id\u00e9"), {}),
            400,
            "invalid_session",
        ),
        (
            "max_feedback_chars",
            20,
            "feedback",
            ({"session_id": "fb", "rating": -1, "text": "f" * 20}, {}),
            ({"session_id": "fb", "rating": -1, "text": "f" * 21}, {}),
            400,
            "string_above_max_length",
        ),
        (
            "max_prompt_tokens",
            prompt_limit,
            "chat",
            (_chat(messages=[{"role": "user", "content": prompt_under}]), {}),
            (_chat(messages=[{"role": "user", "content": prompt_over}]), {}),
            400,
            "context_length_exceeded",
        ),
    ]


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    with tiny_hf_engine(tiny_model_dir, max_batch_size=16) as engine:
        yield engine


def _post(stack, route: str, body, headers: dict) -> httpx.Response:
    path = {"chat": "/v1/chat/completions", "feedback": "/v1/feedback"}[route]
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(
        stack.url + path, content=content, headers={"Content-Type": "application/json", **headers}, timeout=60
    )


def test_every_limit_has_a_config_field_and_a_case(tiny_tokenizer):
    from openclaw_trl.config import OpenClawConfig

    config_fields = {f.name: f.default for f in dataclasses.fields(OpenClawConfig)}
    for f in dataclasses.fields(RequestLimits):
        assert config_fields[f.name] == f.default, f.name  # one set of defaults
        assert f"{f.name} (`int`" in OpenClawConfig.__doc__, f.name
    assert {c[0] for c in _cases(tiny_tokenizer)} == {f.name for f in dataclasses.fields(RequestLimits)}


@pytest.mark.parametrize("index", range(12))
def test_limit_just_over_refused_just_under_served(engine, tiny_tokenizer, tmp_path, index):
    name, value, route, under, over, status, code = _cases(tiny_tokenizer)[index]
    limits = RequestLimits(**{name: value})
    with running_stack(engine, tmp_path / "store.db", limits=limits, max_context_len=4096) as stack:
        if route == "feedback":
            turn = _post(stack, "chat", _chat(), {"X-Session-Id": "fb"}).headers["x-openclaw-turn-id"]
            under = ({**under[0], "turn_id": int(turn)}, under[1])
            over = ({**over[0], "turn_id": int(turn)}, over[1])
        before = stack.store.queries.counts()
        refused = _post(stack, route, *over)
        assert refused.status_code == status, refused.text
        error = refused.json()["error"]
        assert set(error) == {"message", "type", "code", "param"}
        assert error["code"] == code and error["type"] == "invalid_request_error"
        if code != "invalid_session":
            assert f"{name}={value}" in error["message"], error["message"]
        assert stack.store.queries.counts() == before  # nothing stored, no session opened
        served = _post(stack, route, *under)
        assert served.status_code == 200, served.text


def test_huge_feedback_and_session_id_refused_then_chat_served(engine, tmp_path):
    """A 2 MB correction and a 100,000-character session id are JSON errors, store nothing, and the next chat
    request is answered."""
    with running_stack(engine, tmp_path / "store.db", max_context_len=512) as stack:
        client = openai.OpenAI(base_url=stack.url + "/v1", api_key="unused", max_retries=0, timeout=60)
        first = client.chat.completions.with_raw_response.create(
            model="openclaw", messages=USER, max_tokens=4, extra_headers={"X-Session-Id": "alice"}
        )
        turn_id = int(first.headers["x-openclaw-turn-id"])
        before = stack.store.queries.counts()

        feedback = httpx.post(
            stack.url + "/v1/feedback",
            json={"turn_id": turn_id, "session_id": "alice", "rating": -1, "text": "z" * 2_000_000},
            timeout=60,
        )
        assert feedback.status_code == 400
        assert feedback.json()["error"]["code"] == "string_above_max_length"
        assert "max_feedback_chars=8000" in feedback.json()["error"]["message"]

        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(
                model="openclaw", messages=USER, max_tokens=4, extra_headers={"X-Session-Id": "s" * 100_000}
            )
        assert refused.value.body["code"] == "string_above_max_length"
        assert "max_session_id_chars=128" in refused.value.body["message"]
        assert stack.store.queries.counts() == before

        reply = client.chat.completions.create(  # still served after the refusals
            model="openclaw", messages=USER, max_tokens=4, extra_headers={"X-Session-Id": "bob"}
        )
        assert reply.choices[0].message.content is not None


def test_config_validates_the_limits_and_passes_them_on(tmp_path):
    from openclaw_trl.config import OpenClawConfig

    with pytest.raises(ValueError, match="max_messages must be a positive integer"):
        OpenClawConfig(output_dir=str(tmp_path), max_messages=0)
    with pytest.raises(ValueError, match="max_hint_chars must be a positive integer"):
        OpenClawConfig(output_dir=str(tmp_path), max_hint_chars=0)
    config = OpenClawConfig(output_dir=str(tmp_path), max_feedback_chars=99, max_judge_prompt_tokens=777)
    assert config.server_settings(ui=False).limits.max_feedback_chars == 99
    judge = config.judge_config()
    assert (judge.max_prompt_tokens, judge.max_hint_chars) == (777, 2000)


def test_the_ui_path_gets_readable_errors(engine, tmp_path):
    """The Gradio UI calls the same ChatService and collector: over a limit it gets an ApiError whose message it
    shows."""
    from openclaw_trl.serving.errors import ApiError
    from openclaw_trl.serving.protocols.chat_completions.convert import turn_request  # what the UI sends
    from openclaw_trl.serving.ui.blocks import UiHandlers
    from openclaw_trl.serving.ui.guide import guide_for

    with running_stack(engine, tmp_path / "store.db", limits=RequestLimits(max_feedback_chars=10)) as stack:
        service = stack.app.state.tenants[None].service
        with pytest.raises(ApiError, match=r"above the limit max_message_chars=100000"):
            service.prepare(
                turn_request(
                    {"messages": [{"role": "user", "content": "x" * 100_001}]},
                    {"x-session-id": "ui"},
                    service.settings,
                )
            )
        prep = service.prepare(turn_request({"messages": USER}, {"x-session-id": "ui"}, service.settings))
        result = service.finish(prep, service.generate(prep))
        handlers = UiHandlers(service, stack.collector, guide_for(None))  # the UI's corrections
        conv = {"session_id": "ui", "target": result.turn_id}
        _box, _conv, note, _prompt = handlers.on_correct("a much longer correction", conv)
        assert note.startswith("Correction not recorded:") and "above the limit max_feedback_chars=10" in note
        assert stack.store.queries.counts()["feedback"] == 0
