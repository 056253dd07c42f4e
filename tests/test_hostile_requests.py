"""Hostile bytes and numbers against the real server: every case is a 4xx JSON error in OpenAI's format, stores
nothing, and a well-formed request sent at the same moment is served as usual.

Classes of cases (``CASES``): integers out of range (huge, negative), floats where integers belong, non-ASCII
digits, lone UTF-16 surrogates in every text field (values and field names), wrong types,
unknown fields with hostile names, a ``tool_choice`` naming an unknown function, ``function_call_output`` items
that answer no call, and signals on another session's turn. Raw bodies are written by hand where JSON must
carry what ``json.dumps`` would not (``\\ud800``).
"""

from __future__ import annotations

import json
import re
import threading

import httpx
import pytest

from tests._server_helpers import running_stack

LONE = "\\ud800"  # a lone surrogate as it appears in JSON text
LOW = "\\udfff"
USER = [{"role": "user", "content": "hi"}]
TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
RTOOL = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}
CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}


def chat(**fields) -> dict:
    return {"model": "openclaw", "messages": USER, "max_tokens": 2, **fields}


def resp(**fields) -> dict:
    return {"model": "openclaw", "input": "hi", "max_output_tokens": 2, **fields}


def raw(body: dict, where: str, text: str) -> bytes:
    """``body`` as JSON with the string ``"@@"`` replaced by ``text`` (raw JSON: escapes stay escapes)."""
    encoded = json.dumps(body)
    assert '"@@"' in encoded or "@@" in encoded, where
    return encoded.replace("@@", text).encode()


def text_cases(kind: str, escape: str) -> list[tuple]:
    """``escape`` (a lone surrogate, as JSON text) in each text field a request can carry."""
    tool_msgs = [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "content": "sunny", "tool_call_id": "call_1"},
    ]
    fields = {
        "content": chat(messages=[{"role": "user", "content": "a@@b"}]),
        "content part": chat(messages=[{"role": "user", "content": [{"type": "text", "text": "@@"}]}]),
        "system content": chat(messages=[{"role": "system", "content": "@@"}, *USER]),
        "message name": chat(messages=[{"role": "user", "content": "hi", "name": "@@"}]),
        "reasoning_content": chat(
            messages=[*USER, {"role": "assistant", "content": "x", "reasoning_content": "@@"}, *USER]
        ),
        "reasoning": chat(messages=[*USER, {"role": "assistant", "content": "x", "reasoning": "@@"}, *USER]),
        "tool_call_id": chat(messages=[*tool_msgs[:2], {**tool_msgs[2], "tool_call_id": "@@"}]),
        "tool call arguments": chat(
            messages=[
                tool_msgs[0],
                {**tool_msgs[1], "tool_calls": [{**CALL, "function": {"name": "f", "arguments": "@@"}}]},
            ]
        ),
        "tool name": chat(tools=[{"type": "function", "function": {"name": "@@"}}]),
        "tool description": chat(
            tools=[{"type": "function", "function": {"name": "f", "description": "@@"}}]
        ),
        "stop": chat(stop=["@@"]),
        "model": chat(model="@@"),
        "user": chat(user="@@"),
        "session_id": chat(session_id="@@"),
        "turn_type": chat(turn_type="@@"),
        "unknown chat field value": chat(extra_field="@@"),
        "unknown chat field name": chat(**{"@@": 1}),
        "tool parameters key": chat(
            tools=[{"type": "function", "function": {"name": "f", "parameters": {"@@": 1}}}]
        ),
        "responses input": resp(input="@@"),
        "responses input_text": resp(
            input=[{"role": "user", "content": [{"type": "input_text", "text": "@@"}]}]
        ),
        "responses instructions": resp(instructions="@@"),
        "responses metadata value": resp(metadata={"k": "@@"}),
        "responses metadata key": resp(metadata={"@@": "v"}),
        "responses unknown field name": resp(**{"@@": 1}),
        "responses function_call output": resp(
            input=[
                {"type": "function_call", "call_id": "c", "name": "get_weather", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c", "output": "@@"},
            ]
        ),
        "responses previous_response_id": resp(previous_response_id="resp_@@"),
        "responses tool name": resp(tools=[{"type": "function", "name": "@@"}]),
        "feedback text": {"turn_id": "@TURN", "session_id": "owner", "rating": -1, "text": "@@"},
        "feedback session_id": {"turn_id": "@TURN", "session_id": "@@", "rating": 1},
        "feedback action": {"turn_id": "@TURN", "session_id": "owner", "action": "@@"},
        "feedback unknown field name": {"turn_id": "@TURN", "session_id": "owner", "rating": 1, "@@": 1},
    }
    out = []
    for field, body in fields.items():
        route = (
            "responses" if field.startswith("responses") else "feedback" if "feedback" in field else "chat"
        )
        out.append((f"{kind} in {field}", route, raw(body, field, escape), {}, 400, "invalid_text"))
    return out


NUMBER_CASES = [
    # huge integers
    ("seed 2**63", "chat", chat(seed=2**63), {}, 400, "invalid_value"),
    ("seed 2**64", "chat", chat(seed=2**64), {}, 400, "invalid_value"),
    ("seed -2**64", "chat", chat(seed=-(2**64)), {}, 400, "invalid_value"),
    ("seed 10**30", "chat", chat(seed=10**30), {}, 400, "invalid_value"),
    ("max_tokens 2**70", "chat", chat(max_tokens=2**70), {}, 400, "invalid_value"),
    ("max_completion_tokens 2**64", "chat", chat(max_completion_tokens=2**64), {}, 400, "invalid_value"),
    ("top_k 2**31", "chat", chat(top_k=2**31), {}, 400, "invalid_value"),
    ("top_k 2**70", "chat", chat(top_k=2**70), {}, 400, "invalid_value"),
    ("top_logprobs 2**70", "chat", chat(logprobs=True, top_logprobs=2**70), {}, 400, "invalid_value"),
    ("n 2**70", "chat", chat(n=2**70), {}, 400, "invalid_value"),
    ("max_output_tokens 2**70", "responses", resp(max_output_tokens=2**70), {}, 400, "invalid_value"),
    ("temperature 10**400 as int", "chat", b'{"messages": [{"role": "user", "content": "x"}], "temperature": '
     + b"9" * 400 + b"}", {}, 400, "invalid_value"),  # fmt: skip
    ("integer of 5000 digits", "chat", b'{"messages": [{"role": "user", "content": "x"}], "seed": '
     + b"9" * 5000 + b"}", {}, 400, "invalid_json"),  # fmt: skip
    ("feedback turn_id 2**63", "feedback", {"turn_id": 2**63, "session_id": "owner", "rating": 1}, {}, 400, "invalid_value"),
    ("feedback turn_id 2**70", "feedback", {"turn_id": 2**70, "session_id": "owner", "rating": 1}, {}, 400, "invalid_value"),
    ("feedback turn_id '9'*30", "feedback", {"turn_id": "9" * 30, "session_id": "owner", "rating": 1}, {}, 400, "invalid_value"),
    ("feedback rating 2**70", "feedback", {"turn_id": "@TURN", "session_id": "owner", "rating": 2**70}, {}, 400, "invalid_value"),
    # negative
    ("max_tokens -1", "chat", chat(max_tokens=-1), {}, 400, "invalid_value"),
    ("top_k -1", "chat", chat(top_k=-1), {}, 400, "invalid_value"),
    ("top_logprobs -1", "chat", chat(logprobs=True, top_logprobs=-1), {}, 400, "invalid_value"),
    ("max_output_tokens -5", "responses", resp(max_output_tokens=-5), {}, 400, "invalid_value"),
    ("feedback turn_id -5", "feedback", {"turn_id": -5, "session_id": "owner", "rating": 1}, {}, 400, "invalid_value"),
    ("feedback turn_id 0", "feedback", {"turn_id": 0, "session_id": "owner", "rating": 1}, {}, 400, "invalid_value"),
    ("feedback rating -2", "feedback", {"turn_id": "@TURN", "session_id": "owner", "rating": -2}, {}, 400, "invalid_value"),
    # floats where integers belong
    ("max_tokens 2.0", "chat", chat(max_tokens=2.0), {}, 400, "invalid_value"),
    ("max_tokens 1e300", "chat", chat(max_tokens=1e300), {}, 400, "invalid_value"),
    ("seed 1.5", "chat", chat(seed=1.5), {}, 400, "invalid_value"),
    ("top_k 1.0", "chat", chat(top_k=1.0), {}, 400, "invalid_value"),
    ("n 1.0", "chat", chat(n=1.0), {}, 400, "invalid_value"),
    ("top_logprobs 1.0", "chat", chat(logprobs=True, top_logprobs=1.0), {}, 400, "invalid_value"),
    ("max_output_tokens 3.0", "responses", resp(max_output_tokens=3.0), {}, 400, "invalid_value"),
    ("feedback turn_id 1.5", "feedback", {"turn_id": 1.5, "session_id": "owner", "rating": 1}, {}, 400, "invalid_value"),
    ("feedback turn_id as float", "feedback", {"turn_id": "@TURNF", "session_id": "owner", "rating": 1}, {}, 400, "invalid_value"),
    ("feedback rating 0.5", "feedback", {"turn_id": "@TURN", "session_id": "owner", "rating": 0.5}, {}, 400, "invalid_value"),
    ("temperature NaN", "chat", b'{"messages": [{"role": "user", "content": "x"}], "temperature": NaN}', {}, 400, None),
    ("top_p Infinity", "chat", b'{"messages": [{"role": "user", "content": "x"}], "top_p": Infinity}', {}, 400, None),
    # non-ASCII digits
    ("feedback turn_id arabic-indic 3", "feedback", {"turn_id": "\u0663", "session_id": "owner", "rating": 1}, {}, 400, "invalid_value"),
    ("feedback turn_id superscript 2", "feedback", {"turn_id": "\u00b2", "session_id": "owner", "rating": 1}, {}, 400, "invalid_value"),
    ("feedback turn_id fullwidth 12", "feedback", {"turn_id": "\uff11\uff12", "session_id": "owner", "rating": 1}, {}, 400, "invalid_value"),
    ("feedback turn_id mixed digits", "feedback", {"turn_id": "1\u0663", "session_id": "owner", "rating": 1}, {}, 400, "invalid_value"),
    ("feedback turn_id with spaces", "feedback", {"turn_id": " 1 ", "session_id": "owner", "rating": 1}, {}, 400, "invalid_value"),
    ("max_tokens fullwidth string", "chat", chat(max_tokens="\uff13"), {}, 400, "invalid_value"),
    ("seed arabic-indic string", "chat", chat(seed="\u0663"), {}, 400, "invalid_value"),
]  # fmt: skip

TYPE_CASES = [
    ("messages an object", "chat", chat(messages={"role": "user"}), {}, 400, "invalid_value"),
    ("message name a number", "chat", chat(messages=[{**USER[0], "name": 5}]), {}, 400, "invalid_value"),
    ("tool_call_id a list", "chat", chat(messages=[{"role": "tool", "content": "x", "tool_call_id": ["a"]}]), {}, 400, "invalid_value"),
    ("stop a number", "chat", chat(stop=5), {}, 400, "invalid_value"),
    ("tool_choice a number", "chat", chat(tool_choice=3), {}, 400, "invalid_value"),
    ("stream a string", "chat", chat(stream="true"), {}, 400, "invalid_value"),
    ("metadata value a number", "responses", resp(metadata={"k": 1}), {}, 400, "invalid_value"),
    ("metadata a list", "responses", resp(metadata=["k"]), {}, 400, "invalid_value"),
    ("input a number", "responses", resp(input=5), {}, 400, "invalid_value"),
    ("tools a string", "responses", resp(tools="get_weather"), {}, 400, "invalid_value"),
    ("feedback text a list", "feedback", {"turn_id": "@TURN", "session_id": "owner", "rating": -1, "text": ["x"]}, {}, 400, "invalid_value"),
    ("feedback session_id a number", "feedback", {"turn_id": "@TURN", "session_id": 7, "rating": 1}, {}, 400, "invalid_value"),
    ("feedback turn_id a list", "feedback", {"turn_id": [1], "session_id": "owner", "rating": 1}, {}, 400, "invalid_value"),
    ("feedback turn_id an object", "feedback", {"turn_id": {"id": 1}, "session_id": "owner", "rating": 1}, {}, 400, "invalid_value"),
    ("feedback turn_id true", "feedback", {"turn_id": True, "session_id": "owner", "rating": 1}, {}, 400, "invalid_value"),
    ("feedback rating a string", "feedback", {"turn_id": "@TURN", "session_id": "owner", "rating": "1"}, {}, 400, "invalid_value"),
    # unknown fields with hostile names (the Responses API refuses unknown fields)
    ("responses unknown field __proto__", "responses", resp(__proto__={"x": 1}), {}, 400, "unknown_parameter"),
    ("responses unknown field empty name", "responses", resp(**{"": 1}), {}, 400, "unknown_parameter"),
    ("responses unknown field 10k name", "responses", resp(**{"n" * 10_000: 1}), {}, 400, "unknown_parameter"),
    ("responses unknown field RTL override", "responses", resp(**{"\u202emodel": 1}), {}, 400, "unknown_parameter"),
    ("responses unknown field emoji", "responses", resp(**{"\U0001f600": 1}), {}, 400, "unknown_parameter"),
    ("responses unknown field ${jndi}", "responses", resp(**{"${jndi:ldap://x}": 1}), {}, 400, "unknown_parameter"),
]  # fmt: skip

TOOL_CASES = [
    ("chat tool_choice unknown function", "chat", chat(tools=[TOOL], tool_choice={"type": "function", "function": {"name": "rm_rf"}}), {}, 400, "unknown_function"),
    ("chat tool_choice function without tools", "chat", chat(tool_choice={"type": "function", "function": {"name": "x"}}), {}, 400, "unknown_function"),
    ("chat tool_choice unknown string", "chat", chat(tools=[TOOL], tool_choice="banana"), {}, 400, "invalid_value"),
    ("chat tool_choice without a name", "chat", chat(tools=[TOOL], tool_choice={"type": "function"}), {}, 400, "invalid_value"),
    ("responses tool_choice unknown function", "responses", resp(tools=[RTOOL], tool_choice={"type": "function", "name": "rm_rf"}), {}, 400, "unknown_function"),
    ("responses tool_choice function without tools", "responses", resp(tool_choice={"type": "function", "name": "x"}), {}, 400, "unknown_function"),
    ("orphan function_call_output", "responses", resp(input=[*USER, {"type": "function_call_output", "call_id": "nope", "output": "x"}]), {}, 400, "unknown_call_id"),
    ("function_call_output of another call id", "responses", resp(input=[*USER, {"type": "function_call", "call_id": "a", "name": "get_weather", "arguments": "{}"}, {"type": "function_call_output", "call_id": "b", "output": "x"}]), {}, 400, "unknown_call_id"),
    ("function_call_output before its call", "responses", resp(input=[*USER, {"type": "function_call_output", "call_id": "a", "output": "x"}, {"type": "function_call", "call_id": "a", "name": "get_weather", "arguments": "{}"}]), {}, 400, "unknown_call_id"),
    ("function_call_output after a response without calls", "responses", resp(previous_response_id="@RESP", input=[{"type": "function_call_output", "call_id": "call_1", "output": "x"}]), {}, 400, "unknown_call_id"),
]  # fmt: skip

OWNERSHIP_CASES = [
    ("rate another session's turn", "feedback", {"turn_id": "@TURN", "session_id": "intruder", "rating": -1}, {}, 404, "turn_not_found"),
    ("correct another session's turn", "feedback", {"turn_id": "@TURN", "session_id": "intruder", "action": "correct", "text": "no"}, {}, 404, "turn_not_found"),
    ("reject another session's turn", "feedback", {"turn_id": "@TURN", "session_id": "intruder", "action": "reject"}, {}, 404, "turn_not_found"),
    ("withdraw another session's turn", "feedback", {"turn_id": "@TURN", "session_id": "intruder", "action": "withdraw"}, {}, 404, "turn_not_found"),
    ("another session named by header", "feedback", {"turn_id": "@TURN", "rating": 1}, {"X-Session-Id": "intruder"}, 404, "turn_not_found"),
    ("feedback naming no session", "feedback", {"turn_id": "@TURN", "rating": 1}, {}, 400, "missing_session"),
    ("an anonymous turn by a wrong name", "feedback", {"turn_id": "@ANON", "session_id": "chain-0000000000000000", "rating": 1}, {}, 404, "turn_not_found"),
    ("an anonymous turn by a session key", "feedback", {"turn_id": "@ANON", "session_id": "owner", "rating": 1}, {}, 404, "turn_not_found"),
]  # fmt: skip

CASES = (
    NUMBER_CASES
    + text_cases("lone high surrogate", LONE)
    + text_cases("lone low surrogate", LOW)[:6]
    + TYPE_CASES
    + TOOL_CASES
    + OWNERSHIP_CASES
)


@pytest.fixture(scope="module")
def stack(tiny_model_dir, tmp_path_factory):
    from openclaw_trl.engines.hf import HFEngine

    engine = HFEngine(tiny_model_dir, max_batch_size=16, batch_wait_s=0.05)
    with running_stack(engine, tmp_path_factory.mktemp("hostile") / "store.db", max_context_len=512) as s:
        post = lambda path, body, headers: httpx.post(s.url + path, json=body, headers=headers, timeout=60)  # noqa: E731
        owned = post("/v1/chat/completions", chat(), {"X-Session-Id": "owner"}).json()
        anonymous = post(
            "/v1/chat/completions", chat(messages=[{"role": "user", "content": "anon"}]), {}
        ).json()
        previous = post("/v1/responses", resp(), {"X-Session-Id": "owner-r"}).json()
        s.marks = {
            "@TURN": owned["openclaw"]["turn_id"],
            "@TURNF": float(owned["openclaw"]["turn_id"]),
            "@ANON": anonymous["openclaw"]["turn_id"],
            "@RESP": previous["id"],
        }
        yield s
    engine.close()


def snapshot(store) -> dict:
    """Every row that a request other than the concurrent well-formed ones (sessions ``good-*``) could have
    written or changed: row counts per table, and each turn's state."""
    conn = store.db.conn()
    mine = "SELECT id FROM sessions WHERE key IS NULL OR key NOT LIKE 'good-%'"
    turns = f"SELECT id FROM turns WHERE session_id IN ({mine})"
    out = {
        "sessions": conn.execute(f"SELECT COUNT(*) FROM ({mine})").fetchone()[0],
        "turns": conn.execute(
            f"SELECT id, status, close_reason, next_state FROM turns WHERE id IN ({turns}) ORDER BY id"
        ).fetchall(),
    }
    for table in ("feedback", "responses", "candidate_groups", "samples", "votes"):
        out[table] = conn.execute(f"SELECT COUNT(*) FROM {table} WHERE turn_id IN ({turns})").fetchone()[0]
    return {k: [tuple(r) for r in v] if isinstance(v, list) else v for k, v in out.items()}


def _content(body, marks: dict) -> bytes:
    text = body.decode() if isinstance(body, bytes) else json.dumps(body)
    for mark, value in marks.items():
        text = text.replace(f'"{mark}"', json.dumps(value))
    return text.encode()


def test_about_a_hundred_cases_in_every_class():
    assert len(CASES) >= 100 and len({c[0] for c in CASES}) == len(CASES)


@pytest.mark.parametrize("name,route,body,headers,status,code", CASES, ids=[c[0] for c in CASES])
def test_hostile_request_is_a_4xx_that_stores_nothing_and_harms_no_other(
    stack, name, route, body, headers, status, code
):
    path = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "feedback": "/v1/feedback"}[route]
    content = _content(body, stack.marks)
    before = snapshot(stack.store)
    replies: dict[str, httpx.Response] = {}
    start = threading.Barrier(2)

    def send(kind: str) -> None:
        start.wait()
        if kind == "hostile":
            replies[kind] = httpx.post(
                stack.url + path,
                content=content,
                headers={"Content-Type": "application/json", **headers},
                timeout=120,
            )
        else:
            good = chat(messages=[{"role": "user", "content": f"well-formed beside {name}"}])
            session = "good-" + re.sub(r"[^A-Za-z0-9]+", "-", name)
            replies[kind] = httpx.post(
                stack.url + "/v1/chat/completions", json=good, headers={"X-Session-Id": session}, timeout=120
            )

    threads = [threading.Thread(target=send, args=(kind,)) for kind in ("hostile", "good")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    reply = replies["hostile"]
    assert reply.status_code == status, reply.text
    error = reply.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    assert error["type"] in ("invalid_request_error", "not_found_error")
    if code is not None:
        assert error["code"] == code, error
    assert replies["good"].status_code == 200, replies["good"].text
    assert snapshot(stack.store) == before


@pytest.mark.parametrize(
    "raw_json,param",
    [
        (b'{"a": "x\\u0000"}', None),  # NUL is text (a model's own reply may hold one)
        (b'{"\\ud800": 1}', "\\ud800"),
        (b'{"m": [{"k": "\\uDFFF"}]}', "m[0].k"),
        (b'{"a": "\\ud83d\\ude00"}', None),  # a surrogate pair: one character, valid
        (b'{"a": "\\\\u0000"}', None),  # an escaped backslash then "u0000": plain text
        (b'{"a": "caf\xc3\xa9 \\u00e9"}', None),
    ],
)
def test_check_text_names_the_field_and_passes_valid_text(raw_json, param):
    from openclaw_trl.serving.errors import ApiError
    from openclaw_trl.serving.text_check import check_text

    value = json.loads(raw_json)
    for raw_form in (raw_json, None):  # from the HTTP body, and from a parsed value alone (the UI)
        if param is None:
            check_text(value, raw=raw_form)
            continue
        with pytest.raises(ApiError) as refused:
            check_text(value, raw=raw_form)
        assert refused.value.status == 400 and refused.value.param == param
        assert refused.value.code == "invalid_text"


def test_a_nul_in_text_is_served_and_stored(stack):
    """A model may write any byte, NUL included; a client that sends such a reply back is served."""
    messages = [
        {"role": "user", "content": "a\u0000b"},
        {"role": "assistant", "content": "c\u0000d"},
        {"role": "user", "content": "more"},
    ]
    r = httpx.post(stack.url + "/v1/chat/completions", json=chat(messages=messages), timeout=60)
    assert r.status_code == 200, r.text
    turn = stack.store.conversations.get_turn(r.json()["openclaw"]["turn_id"])
    assert turn.prompt_messages[0]["content"] == "a\u0000b"
