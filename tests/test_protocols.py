"""A protocol is a folder + one registration: a new protocol renders its own error shape on its own paths and
may take the API key from another header, while every other route keeps its own shape and key source.

The protocol here is a small stand-in registered next to the built-in ones (``create_app(protocols=...)``),
served by uvicorn on 127.0.0.1 with a real key, store and tiny model.
"""

from __future__ import annotations

import httpx
import pytest
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from openclaw_trl.serving.errors import ApiError
from openclaw_trl.serving.http.auth import BEARER, authorized, header_key, tenant_of
from openclaw_trl.serving.http.body import json_body
from openclaw_trl.serving.protocols.base import Protocol

KEY = "protocol-test-key"


def _anthropic_error(err: ApiError) -> JSONResponse:
    kind = {401: "authentication_error", 404: "not_found_error"}.get(err.status, "invalid_request_error")
    return JSONResponse(
        {"type": "error", "error": {"type": kind, "message": err.message}}, status_code=err.status
    )


_router = APIRouter()


@_router.post("/v1/stand-in", dependencies=authorized(header_key("x-api-key"), BEARER))
async def _messages(request: Request):
    payload = await json_body(request, request.app.state.settings.limits)
    if not isinstance(payload, dict) or "messages" not in payload:
        raise ApiError(400, "messages: Field required", "invalid_value", "messages")
    return {"type": "message", "tenant": tenant_of(request).name}


STAND_IN = Protocol("stand-in", _router, ("/v1/stand-in",), _anthropic_error)


@pytest.fixture(scope="module")
def url(tiny_model_dir, tmp_path_factory, monkeypatch_module):
    from openclaw_trl.engines.hf import HFEngine
    from openclaw_trl.serving.app import PROTOCOLS, ServerThread, create_app
    from openclaw_trl.serving.settings import ServerSettings
    from openclaw_trl.sessions import TurnCollector
    from openclaw_trl.store import Store

    monkeypatch_module.setenv("PROTOCOL_TEST_KEY", KEY)
    engine = HFEngine(tiny_model_dir)
    store = Store(tmp_path_factory.mktemp("protocols") / "store.db")
    settings = ServerSettings(ui=False, api_key_env="PROTOCOL_TEST_KEY", default_max_tokens=4)
    app = create_app(engine, TurnCollector(store), store, settings, protocols=(*PROTOCOLS, STAND_IN))
    server = ServerThread(app).start()
    try:
        yield server.url
    finally:
        server.stop()
        store.close()
        engine.close()


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


def test_the_new_protocol_takes_its_own_key_header_and_the_bearer(url):
    for headers in ({"x-api-key": KEY}, {"Authorization": f"Bearer {KEY}"}):
        r = httpx.post(f"{url}/v1/stand-in", json={"messages": []}, headers=headers)
        assert r.status_code == 200 and r.json() == {"type": "message", "tenant": None}


def test_the_new_protocol_renders_its_errors_in_its_own_shape(url):
    r = httpx.post(f"{url}/v1/stand-in", json={"messages": []})
    assert r.status_code == 401
    assert r.json() == {
        "type": "error",
        "error": {
            "type": "authentication_error",
            "message": "Missing API key: send 'x-api-key: <key>' or 'Authorization: Bearer <key>'",
        },
    }
    r = httpx.post(f"{url}/v1/stand-in", json={"messages": []}, headers={"x-api-key": "wrong"})
    assert r.status_code == 401 and r.json()["error"]["message"] == "Incorrect API key provided"
    r = httpx.post(f"{url}/v1/stand-in", content=b"{not json", headers={"x-api-key": KEY})
    assert r.status_code == 400 and r.json()["type"] == "error"
    assert r.json()["error"]["message"].startswith("We could not parse the JSON body")
    r = httpx.post(f"{url}/v1/stand-in", json={}, headers={"x-api-key": KEY})
    assert r.status_code == 400
    assert r.json() == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "messages: Field required"},
    }


def test_the_other_protocols_keep_their_shape_and_their_key_source(url):
    chat = {"messages": [{"role": "user", "content": "hi"}]}
    r = httpx.post(f"{url}/v1/chat/completions", json=chat, headers={"x-api-key": KEY})
    assert r.status_code == 401  # chat completions reads the bearer key only
    assert r.json() == {
        "error": {
            "message": "Missing bearer token: send 'Authorization: Bearer <key>'",
            "type": "authentication_error",
            "param": None,
            "code": "missing_api_key",
        }
    }
    assert r.headers["www-authenticate"] == "Bearer"
    r = httpx.get(f"{url}/v1/stand-in/unknown", headers={"Authorization": f"Bearer {KEY}"})
    assert r.status_code == 404 and r.json()["type"] == "error"  # under the protocol's path: its shape
    r = httpx.get(f"{url}/v1/nowhere", headers={"Authorization": f"Bearer {KEY}"})
    assert r.status_code == 404 and r.json()["error"]["code"] == "unknown_url"  # no protocol's: OpenAI's
