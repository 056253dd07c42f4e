"""Bad input gets a 4xx with an OpenAI-style error, never a 5xx, a crash or a stored turn; plus concurrency.

Table-driven with httpx against the real stack (tiny model). After the table the server must still serve,
and nothing that was rejected may have reached the store (a rejected request never becomes a next state).
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from openclaw_trl.serving.limits import RequestLimits
from tests._server_helpers import running_stack, turns

CONTEXT = 256
OK_MSG = [{"role": "user", "content": "hi"}]


def chat(**fields) -> dict:
    return {"model": "openclaw", "messages": OK_MSG, "max_tokens": 4, **fields}


# (name, path, body: dict/list/str/bytes, extra headers, expected status, expected error code or None)
CASES = [
    ("invalid json", "chat", b'{"messages": [', {}, 400, "invalid_json"),
    ("empty body", "chat", b"", {}, 400, "invalid_json"),
    ("invalid utf-8", "chat", b'{"messages": "\xff\xfe"}', {}, 400, "invalid_json"),
    ("deeply nested json", "chat", b"[" * 100_000 + b"]" * 100_000, {}, 400, "invalid_json"),
    ("body is a list", "chat", [OK_MSG], {}, 400, "invalid_json"),
    ("body is a string", "chat", "hello", {}, 400, "invalid_json"),
    ("missing messages", "chat", {"model": "openclaw"}, {}, 400, "invalid_value"),
    ("empty messages", "chat", chat(messages=[]), {}, 400, "invalid_value"),
    ("messages not a list", "chat", chat(messages="hi"), {}, 400, "invalid_value"),
    ("message not an object", "chat", chat(messages=["hi"]), {}, 400, "invalid_value"),
    ("unknown role", "chat", chat(messages=[{"role": "robot", "content": "x"}]), {}, 400, "invalid_value"),
    ("missing role", "chat", chat(messages=[{"content": "x"}]), {}, 400, "invalid_value"),
    ("user without content", "chat", chat(messages=[{"role": "user"}]), {}, 400, "invalid_value"),
    (
        "content is a number",
        "chat",
        chat(messages=[{"role": "user", "content": 5}]),
        {},
        400,
        "invalid_value",
    ),
    (
        "image content part",
        "chat",
        chat(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]),
        {},
        400,
        "unsupported_content",
    ),
    (
        "assistant with neither content nor tool_calls",
        "chat",
        chat(messages=[{"role": "assistant"}, {"role": "user", "content": "x"}]),
        {},
        400,
        "invalid_value",
    ),
    ("temperature not numeric", "chat", chat(temperature="hot"), {}, 400, "invalid_value"),
    ("temperature numeric string", "chat", chat(temperature="0.7"), {}, 400, "invalid_value"),
    ("temperature bool", "chat", chat(temperature=True), {}, 400, "invalid_value"),
    ("temperature out of range", "chat", chat(temperature=5), {}, 400, "invalid_value"),
    (
        "temperature NaN",
        "chat",
        b'{"messages": [{"role": "user", "content": "x"}], "temperature": NaN}',
        {},
        400,
        None,
    ),
    ("top_p zero", "chat", chat(top_p=0), {}, 400, "invalid_value"),
    ("top_p above one", "chat", chat(top_p=1.5), {}, 400, "invalid_value"),
    ("max_tokens zero", "chat", chat(max_tokens=0), {}, 400, "invalid_value"),
    ("max_tokens negative", "chat", chat(max_tokens=-3), {}, 400, "invalid_value"),
    ("max_tokens float", "chat", chat(max_tokens=2.5), {}, 400, "invalid_value"),
    ("max_completion_tokens string", "chat", chat(max_completion_tokens="ten"), {}, 400, "invalid_value"),
    ("seed not an int", "chat", chat(seed="abc"), {}, 400, "invalid_value"),
    ("stream not a bool", "chat", chat(stream="yes"), {}, 400, "invalid_value"),
    ("n above one", "chat", chat(n=2), {}, 400, "invalid_value"),
    ("empty stop string", "chat", chat(stop=[""]), {}, 400, "invalid_value"),
    (
        "too many stop strings",
        "chat",
        chat(stop=[str(i) for i in range(20)]),
        {},
        400,
        "array_above_max_length",
    ),
    ("top_logprobs without logprobs", "chat", chat(top_logprobs=2), {}, 400, "invalid_value"),
    ("top_logprobs too large", "chat", chat(logprobs=True, top_logprobs=50), {}, 400, "invalid_value"),
    (
        "tool without a name",
        "chat",
        chat(tools=[{"type": "function", "function": {}}]),
        {},
        400,
        "invalid_value",
    ),
    ("tools not a list", "chat", chat(tools={"type": "function"}), {}, 400, "invalid_value"),
    ("unknown model", "chat", chat(model="gpt-17"), {}, 404, "model_not_found"),
    (
        "prompt over the context limit",
        "chat",
        chat(messages=[{"role": "user", "content": "apple " * 2000}]),
        {},
        400,
        "context_length_exceeded",
    ),
    ("bad turn type header", "chat", chat(), {"X-Turn-Type": "sidequest"}, 400, "invalid_session"),
    ("bad session_done value", "chat", chat(session_done="maybe"), {}, 400, "invalid_session"),
    ("session id not a string", "chat", chat(session_id=["a"]), {}, 400, "invalid_value"),
    (
        "body over the size limit",
        "chat",
        {"messages": OK_MSG, "pad": "x" * 300_000},
        {},
        413,
        "request_too_large",
    ),
    ("unknown route", "/v1/completions", {"prompt": "hi"}, {}, 404, "unknown_url"),
    ("feedback invalid json", "feedback", b"{nope", {}, 400, "invalid_json"),
    ("feedback without turn_id", "feedback", {"rating": 1}, {}, 400, "invalid_value"),
    (
        "feedback rating 5",
        "feedback",
        {"turn_id": 1, "session_id": "s", "rating": 5},
        {},
        400,
        "invalid_value",
    ),
    (
        "feedback rating bool",
        "feedback",
        {"turn_id": 1, "session_id": "s", "rating": True},
        {},
        400,
        "invalid_value",
    ),
    (
        "feedback text not a string",
        "feedback",
        {"turn_id": 1, "session_id": "s", "rating": -1, "text": 3},
        {},
        400,
        "invalid_value",
    ),
    (
        "feedback with neither rating nor text",
        "feedback",
        {"turn_id": 1, "session_id": "s"},
        {},
        400,
        "invalid_value",
    ),
    (
        "feedback unknown turn",
        "feedback",
        {"turn_id": 987654, "session_id": "s", "rating": 1},
        {},
        404,
        "turn_not_found",
    ),  # fmt: skip
]


@pytest.fixture(scope="module")
def stack(tiny_model_dir, tmp_path_factory):
    from openclaw_trl.engines.hf import HFEngine

    engine = HFEngine(tiny_model_dir, max_batch_size=16)
    db = tmp_path_factory.mktemp("malformed") / "store.db"
    with running_stack(
        engine, db, max_context_len=CONTEXT, limits=RequestLimits(max_request_bytes=256 * 1024)
    ) as s:
        yield s
    engine.close()


def _send(url: str, path: str, body, headers: dict) -> httpx.Response:
    target = {"chat": "/v1/chat/completions", "feedback": "/v1/feedback"}.get(path, path)
    if isinstance(body, bytes):
        content = body
    else:
        content = json.dumps(body).encode()
    return httpx.post(
        url + target, content=content, headers={"Content-Type": "application/json", **headers}, timeout=60
    )


def test_at_least_twenty_cases():
    assert len(CASES) >= 20


@pytest.mark.parametrize("name,path,body,headers,status,code", CASES, ids=[c[0] for c in CASES])
def test_malformed_request(stack, name, path, body, headers, status, code):
    before = len(turns(stack.store))
    r = _send(stack.url, path, body, headers)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert isinstance(error["message"], str) and error["message"]
    assert error["type"] in ("invalid_request_error", "not_found_error")
    if code is not None:
        assert error["code"] == code, error
    assert len(turns(stack.store)) == before  # nothing rejected reaches the store


def test_context_error_states_the_limits(stack):
    r = _send(stack.url, "chat", chat(messages=[{"role": "user", "content": "apple " * 2000}]), {})
    message = r.json()["error"]["message"]
    assert str(CONTEXT) in message and "tokens" in message


def test_a_reply_gets_its_room_or_the_prompt_is_refused(stack):
    """``max_tokens`` is clamped to the room the prompt leaves; a prompt that leaves less than
    ``min(min_reply_tokens, max_tokens)`` is refused as ``context_length_exceeded`` (never a reply cut short)."""
    from openclaw_trl.chat import render_prompt_ids

    words = 1
    while True:  # a prompt that leaves at most 6 tokens of room
        messages = [{"role": "user", "content": "apple " * words}]
        room = CONTEXT - len(render_prompt_ids(stack.engine.tokenizer, messages))
        if room <= 6:
            break
        words += max(1, room // 2)
    assert room >= 2
    r = _send(stack.url, "chat", chat(max_tokens=10**9, messages=messages), {})
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
    assert f"leaves {room} for the reply" in r.json()["error"]["message"]
    r = _send(stack.url, "chat", chat(max_tokens=room, messages=messages), {})
    assert r.status_code == 200 and r.json()["usage"]["total_tokens"] <= CONTEXT
    half = CONTEXT // 2  # min_reply_tokens (256) is capped at half the context
    words = 1
    while (
        CONTEXT
        - len(render_prompt_ids(stack.engine.tokenizer, [{"role": "user", "content": "apple " * words}]))
        > half + 8
    ):
        words += 1
    r = _send(
        stack.url,
        "chat",
        chat(max_tokens=10**9, messages=[{"role": "user", "content": "apple " * words}]),
        {},
    )
    assert r.status_code == 200 and r.json()["usage"]["total_tokens"] <= CONTEXT


def test_server_still_serves_after_the_table(stack):
    r = _send(stack.url, "chat", chat(), {"X-Session-Id": "after-table"})
    assert r.status_code == 200 and r.headers["x-openclaw-turn-id"]


def test_concurrent_sessions_every_turn_stored_once(stack):
    """8 sessions x 5 turns in parallel: no 5xx, each turn stored once, next states chained per session."""
    n_sessions, n_turns = 8, 5

    def session(k: int) -> list[int]:
        key = f"conc-{k}"
        messages, ids = [], []
        with httpx.Client(base_url=stack.url, timeout=120) as http:
            for t in range(n_turns):
                messages.append({"role": "user", "content": f"session {k} turn {t}"})
                r = http.post(
                    "/v1/chat/completions", json=chat(messages=messages), headers={"X-Session-Id": key}
                )
                assert r.status_code == 200, r.text
                ids.append(int(r.headers["x-openclaw-turn-id"]))
                messages.append(r.json()["choices"][0]["message"])
        return ids

    with ThreadPoolExecutor(n_sessions) as pool:
        all_ids = list(pool.map(session, range(n_sessions)))
    flat = [i for ids in all_ids for i in ids]
    assert len(flat) == len(set(flat)) == n_sessions * n_turns
    stored = {t.id: t for t in turns(stack.store) if str(t.session_key).startswith("conc-")}
    assert sorted(stored) == sorted(flat)
    for k, ids in enumerate(all_ids):
        rows = [stored[i] for i in ids]
        assert {r.session_key for r in rows} == {f"conc-{k}"} and len({r.session_id for r in rows}) == 1
        assert [r.idx for r in rows] == list(range(n_turns))
        for t, row in enumerate(rows[:-1]):
            assert row.next_state["content"] == f"session {k} turn {t + 1}"
        assert rows[-1].next_state is None


def test_no_error_while_adapters_are_published(tiny_model_dir, tmp_path):
    """Training publishes a new adapter after every step; requests in flight must never fail (no 503)."""
    import threading

    import torch
    from peft import LoraConfig, get_peft_model, get_peft_model_state_dict
    from transformers import AutoModelForCausalLM

    from openclaw_trl.engines.hf import HFEngine

    config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    engine = HFEngine(tiny_model_dir, lora_config=config)
    trainer_copy = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model_dir), config)
    adapter = {k: v.detach().clone() for k, v in get_peft_model_state_dict(trainer_copy).items()}
    stop = threading.Event()
    published = []

    def publisher():
        gen = torch.Generator().manual_seed(0)
        while not stop.is_set():
            version = len(published) + 1
            state = {k: v + 0.01 * torch.randn(v.shape, generator=gen) for k, v in adapter.items()}
            engine.publish_adapter(state, version)
            published.append(version)

    try:
        with running_stack(engine, tmp_path / "pub.db") as s:
            thread = threading.Thread(target=publisher, daemon=True)
            thread.start()
            versions = set()

            def session(k: int) -> list[int]:
                codes, messages = [], []
                with httpx.Client(base_url=s.url, timeout=120) as http:
                    for t in range(3):
                        messages.append({"role": "user", "content": f"hi {k} {t}"})
                        r = http.post(
                            "/v1/chat/completions",
                            json=chat(messages=messages),
                            headers={"X-Session-Id": f"p{k}"},
                        )
                        codes.append(r.status_code)
                        if r.status_code == 200:
                            versions.add(r.json()["system_fingerprint"])
                            messages.append(r.json()["choices"][0]["message"])
                return codes

            with ThreadPoolExecutor(4) as pool:
                codes = [c for cs in pool.map(session, range(4)) for c in cs]
            stop.set()
            thread.join(timeout=30)
            assert codes == [200] * 12
            assert len(published) >= 2 and len(versions) >= 2  # adapters really changed under the requests
            assert len(turns(s.store)) == 12
    finally:
        stop.set()
        engine.close()
