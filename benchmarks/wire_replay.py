"""Wire replay: a fixed list of HTTP requests against an in-process server, every reply recorded byte for byte.

The server runs on 127.0.0.1 with the tiny test model whose replies are scripted (the model "says" a fixed
text, or a tool call when the prompt asks for the weather), so two runs of the same code answer the same bytes.
Each reply is written as its status, content type, the headers a client reads and its body; what changes from
run to run (ids, timestamps, session keys of anonymous conversations) is replaced by a placeholder.

    python benchmarks/wire_replay.py --out /tmp/wire.json                   # record
    python benchmarks/wire_replay.py --out /tmp/new.json --compare /tmp/wire.json   # exit 1 on any difference

Use it to check that a change of the serving code leaves every reply the same.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

KEY_ENV, KEY = "WIRE_REPLAY_KEY", "replay-key"
REPLY_TEXT = "Hello there, friend."
TOOL_TEXT = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
RESPONSES_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather of a city",
    "parameters": WEATHER_TOOL["function"]["parameters"],
}
HEADERS_KEPT = (
    "content-type",
    "www-authenticate",
    "x-openclaw-turn-id",
    "x-openclaw-policy-version",
    "x-openclaw-session-id",
    "cache-control",
    "x-accel-buffering",
)
TIME_KEYS = {"created", "created_at", "completed_at"}
VOLATILE = [
    (re.compile(r"\b(chatcmpl|resp|msg|rs|fc|call|chain)([-_])[0-9a-f]{8,}(_\d+)?"), r"\1\2<id>\3"),
    (re.compile(r"\b\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})?"), "<iso-time>"),
]


def _script(prompt_text: str) -> str:
    return TOOL_TEXT if "weather" in prompt_text else REPLY_TEXT


def _auth(key: str = KEY) -> dict:
    return {"Authorization": f"Bearer {key}"}


def _chat(content: str = "hello there", **fields) -> dict:
    return {
        "model": "openclaw",
        "messages": [{"role": "user", "content": content}],
        "max_tokens": 12,
        **fields,
    }


def requests_to_send(seen: dict) -> list[tuple[str, str, str, dict, object]]:
    """``(name, method, path, headers, body)``: ``body`` a JSON value, raw ``bytes``, or a callable of ``seen``
    (what earlier replies returned, e.g. a response id) that returns one."""
    session = {**_auth(), "X-Session-Id": "replay-1"}
    return [
        ("healthz", "GET", "/healthz", {}, None),
        ("models", "GET", "/v1/models", _auth(), None),
        ("status", "GET", "/v1/status", _auth(), None),
        ("adapters", "GET", "/v1/adapters", _auth(), None),
        ("learning", "GET", "/v1/learning", _auth(), None),
        ("chat_plain", "POST", "/v1/chat/completions", session, _chat()),
        (
            "chat_stream",
            "POST",
            "/v1/chat/completions",
            session,
            _chat("again", stream=True, stream_options={"include_usage": True}),
        ),
        (
            "chat_tools",
            "POST",
            "/v1/chat/completions",
            _auth(),
            _chat("what is the weather in Paris", tools=[WEATHER_TOOL]),
        ),
        (
            "chat_logprobs",
            "POST",
            "/v1/chat/completions",
            _auth(),
            _chat("numbers", logprobs=True, top_logprobs=2),
        ),
        (
            "chat_stream_logprobs",
            "POST",
            "/v1/chat/completions",
            _auth(),
            _chat("numbers again", stream=True, logprobs=True),
        ),
        ("chat_stop", "POST", "/v1/chat/completions", _auth(), _chat("stop here", stop=["friend"])),
        ("chat_malformed_json", "POST", "/v1/chat/completions", _auth(), b'{"messages": [}'),
        ("chat_bad_field", "POST", "/v1/chat/completions", _auth(), _chat(temperature="hot")),
        (
            "chat_bad_role",
            "POST",
            "/v1/chat/completions",
            _auth(),
            {"messages": [{"role": "robot", "content": "x"}]},
        ),
        ("chat_n2", "POST", "/v1/chat/completions", _auth(), _chat(n=2)),
        ("chat_unknown_model", "POST", "/v1/chat/completions", _auth(), _chat(model="gpt-9")),
        (
            "chat_image_part",
            "POST",
            "/v1/chat/completions",
            _auth(),
            {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
        ),
        ("chat_missing_auth", "POST", "/v1/chat/completions", {}, _chat()),
        ("chat_wrong_key", "POST", "/v1/chat/completions", _auth("nope"), _chat()),
        ("chat_get", "GET", "/v1/chat/completions", _auth(), None),
        ("unknown_route", "GET", "/v1/nope", _auth(), None),
        ("unknown_root_path", "GET", "/nope", {}, None),
        (
            "responses_plain",
            "POST",
            "/v1/responses",
            _auth(),
            {"model": "openclaw", "input": "hi there", "instructions": "Be brief.", "max_output_tokens": 12},
        ),
        (
            "responses_stream",
            "POST",
            "/v1/responses",
            _auth(),
            {"input": "stream it", "stream": True, "max_output_tokens": 12},
        ),
        (
            "responses_tools",
            "POST",
            "/v1/responses",
            _auth(),
            {"input": "what is the weather", "tools": [RESPONSES_TOOL], "max_output_tokens": 40},
        ),
        (
            "responses_continue",
            "POST",
            "/v1/responses",
            _auth(),
            lambda s: {
                "input": "and then?",
                "previous_response_id": s["responses_plain"]["id"],
                "max_output_tokens": 12,
            },
        ),
        ("responses_get", "GET", lambda s: f"/v1/responses/{s['responses_plain']['id']}", _auth(), None),
        ("responses_get_unknown", "GET", "/v1/responses/resp_unknown", _auth(), None),
        ("responses_delete", "DELETE", "/v1/responses/resp_unknown", _auth(), None),
        ("responses_bad_field", "POST", "/v1/responses", _auth(), {"input": 5}),
        (
            "responses_unknown_previous",
            "POST",
            "/v1/responses",
            _auth(),
            {"input": "x", "previous_response_id": "resp_missing"},
        ),
        ("responses_missing_auth", "POST", "/v1/responses", {}, {"input": "x"}),
        (
            "feedback_ok",
            "POST",
            "/v1/feedback",
            _auth(),
            lambda s: {
                "turn_id": s["chat_plain"]["openclaw"]["turn_id"],
                "session_id": "replay-1",
                "rating": 1,
            },
        ),
        (
            "feedback_unknown_turn",
            "POST",
            "/v1/feedback",
            _auth(),
            {"turn_id": 999999, "session_id": "replay-1", "rating": 1},
        ),
        (
            "feedback_bad_rating",
            "POST",
            "/v1/feedback",
            _auth(),
            lambda s: {
                "turn_id": s["chat_plain"]["openclaw"]["turn_id"],
                "session_id": "replay-1",
                "rating": 7,
            },
        ),
        ("feedback_malformed", "POST", "/v1/feedback", _auth(), b"not json"),
        (
            "chat_developer_tool_choice_none",
            "POST",
            "/v1/chat/completions",
            _auth(),
            {
                "messages": [
                    {"role": "developer", "content": "be terse"},
                    {"role": "user", "content": "weather?"},
                ],
                "tools": [WEATHER_TOOL],
                "tool_choice": "none",
                "max_tokens": 12,
            },
        ),
        (
            "chat_bad_session_id",
            "POST",
            "/v1/chat/completions",
            {**_auth(), "X-Session-Id": "bad id!"},
            _chat(),
        ),
        (
            "responses_developer_role",
            "POST",
            "/v1/responses",
            _auth(),
            {
                "input": [{"role": "developer", "content": "be terse"}, {"role": "user", "content": "hi"}],
                "max_output_tokens": 12,
            },
        ),
        (
            "responses_long_tool_name",
            "POST",
            "/v1/responses",
            _auth(),
            {"input": "x", "tools": [{"type": "function", "name": "t" * 129}]},
        ),
        ("responses_session_id_int", "POST", "/v1/responses", _auth(), {"input": "x", "session_id": 5}),
        (
            "responses_session_done_list",
            "POST",
            "/v1/responses",
            _auth(),
            {"input": "x", "session_done": [1]},
        ),
        (
            "responses_reasoning_only",
            "POST",
            "/v1/responses",
            _auth(),
            {
                "input": [
                    {"type": "reasoning", "summary": [{"type": "summary_text", "text": "hmm"}]},
                    {"role": "user", "content": "x"},
                ]
            },
        ),
        (
            "responses_unstored",
            "POST",
            "/v1/responses",
            {**_auth(), "X-Session-Id": "replay-private"},
            {"input": "private please", "store": False, "max_output_tokens": 12},
        ),
        (
            "responses_bad_session_id",
            "POST",
            "/v1/responses",
            {**_auth(), "X-Session-Id": "bad id!"},
            {"input": "x"},
        ),
        (
            "responses_too_many_tools",
            "POST",
            "/v1/responses",
            _auth(),
            {"input": "x", "tools": [{"type": "function", "name": f"t{i}"} for i in range(65)]},
        ),
        ("responses_unknown_model", "POST", "/v1/responses", _auth(), {"input": "x", "model": "gpt-9"}),
        (
            "responses_tool_output",
            "POST",
            "/v1/responses",
            _auth(),
            {
                "input": [
                    {"role": "user", "content": "what is the weather"},
                    {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
                    {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
                ],
                "tools": [RESPONSES_TOOL],
                "max_output_tokens": 12,
            },
        ),
        (
            "responses_session_named",
            "POST",
            "/v1/responses",
            _auth(),
            {"input": "named", "session_id": "replay-2", "session_done": True, "max_output_tokens": 12},
        ),
        ("status_after", "GET", "/v1/status", _auth(), None),
    ]


def _normalise(value):
    if isinstance(value, dict):
        return {
            k: (0 if k in TIME_KEYS and isinstance(v, int | float) else _normalise(v))
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_normalise(v) for v in value]
    if isinstance(value, str):
        for pattern, repl in VOLATILE:
            value = pattern.sub(repl, value)
    return value


def _normalise_body(raw: bytes, content_type: str) -> object:
    text = raw.decode("utf-8", errors="replace")
    if "json" in content_type:
        try:
            return _normalise(json.loads(text))
        except ValueError:
            return _normalise(text)
    lines = []
    for line in text.split("\n"):
        if line.startswith("data: ") and line != "data: [DONE]":
            try:
                line = "data: " + json.dumps(_normalise(json.loads(line[6:])), ensure_ascii=False)
            except ValueError:
                line = _normalise(line)
        lines.append(line)
    return lines


def record(url: str) -> list[dict]:
    """Send every request in order; the normalised replies."""
    seen: dict = {}
    out = []
    with httpx.Client(base_url=url, timeout=120) as client:
        for name, method, path, headers, body in requests_to_send(seen):
            path = path(seen) if callable(path) else path
            body = body(seen) if callable(body) else body
            kwargs = (
                {"content": body} if isinstance(body, bytes) else ({} if body is None else {"json": body})
            )
            reply = client.request(method, path, headers=headers, **kwargs)
            raw, ctype = reply.content, reply.headers.get("content-type", "")
            if "json" in ctype:
                try:
                    seen[name] = json.loads(raw)
                except ValueError:
                    pass
            kept = {h: _normalise(reply.headers[h]) for h in HEADERS_KEPT if h in reply.headers}
            out.append(
                {
                    "name": name,
                    "request": f"{method} {_normalise(path)}",
                    "status": reply.status_code,
                    "headers": kept,
                    "body": _normalise_body(raw, ctype),
                }
            )
    return out


def run_server_and_record() -> list[dict]:
    from openclaw_trl.engines.hf import HFEngine
    from openclaw_trl.testing import build_tiny_model
    from tests._server_helpers import ScriptedEngine, running_stack

    os.environ[KEY_ENV] = KEY
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_tiny_model(Path(tmp) / "model")
        engine = HFEngine(model_dir, max_batch_size=4)
        try:
            tok = engine.tokenizer
            scripted = ScriptedEngine(engine, lambda ids: _script(tok.decode(ids)))
            with running_stack(
                scripted, Path(tmp) / "store.db", ui=False, max_context_len=512, api_key_env=KEY_ENV
            ) as stack:
                return record(stack.url)
        finally:
            engine.close()


def compare(new: list[dict], old: list[dict]) -> list[str]:
    """Human-readable differences (empty: identical)."""
    diffs = []
    old_by_name = {r["name"]: r for r in old}
    for r in new:
        o = old_by_name.pop(r["name"], None)
        if o is None:
            diffs.append(f"{r['name']}: new request, not in the saved recording")
            continue
        for field in ("request", "status", "headers", "body"):
            if r[field] != o[field]:
                diffs.append(
                    f"{r['name']}: {field} differs\n  saved: {json.dumps(o[field])[:2000]}\n"
                    f"  new:   {json.dumps(r[field])[:2000]}"
                )
    diffs.extend(f"{name}: in the saved recording, not sent now" for name in old_by_name)
    return diffs


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--out",
        default=str(ROOT / "benchmarks" / "results" / "wire_replay.json"),
        help="where to write this recording (JSON; default: benchmarks/results/wire_replay.json)",
    )
    parser.add_argument("--compare", metavar="FILE", help="a saved recording: exit 1 on any difference")
    args = parser.parse_args(argv)
    recording = run_server_and_record()
    Path(args.out).write_text(json.dumps(recording, indent=1, ensure_ascii=False) + "\n")
    print(f"{len(recording)} replies recorded in {args.out}")
    if args.compare:
        diffs = compare(recording, json.loads(Path(args.compare).read_text()))
        for d in diffs:
            print(d)
        print(f"{len(diffs)} difference(s) against {args.compare}")
        return 1 if diffs else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
