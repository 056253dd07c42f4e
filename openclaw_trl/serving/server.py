"""The OpenAI-compatible API (and the host of the Gradio UI): every served turn becomes training data.

``create_app(engine, collector, store, settings)`` returns a FastAPI app with

* ``POST /v1/chat/completions``: OpenAI wire format, real token streaming over SSE (reasoning and
  tool-call deltas carry their ``index``, as OpenAI clients require);
* ``POST /v1/feedback``: 👍/👎 + optional correction text for a turn = the next state of that turn;
* ``GET /v1/models``, ``GET /healthz``, ``GET /v1/status``;
* the Gradio UI mounted at ``/`` (``openclaw_trl.serving.ui``), which calls the same ``ChatService`` in-process.

This module is the HTTP layer; the request schema and errors live in ``openclaw_trl.serving.openai_schema`` and
the turn itself (render, generate, parse, record) in ``openclaw_trl.serving.chat_service``.

Why the server renders the chat template itself: the engine gets token ids and returns the sampled
ids + log-probs, and those exact ids are stored. The turn is written to the store
*before* the response is returned (for a stream: before the final chunk), so a client that reacts
fast to a reply can never race the bookkeeping of the turn its next message is the next state of.

Serving never answers 503 because training runs: the engine serves from a published
adapter copy. Generation is blocking torch work, so it runs in a thread pool and concurrent requests
reach the engine together (which batches them).

Wire-format details a client may care about:

* Session fields: ``X-Session-Id`` / ``session_id`` / ``user``, ``X-Turn-Type`` (``main``/``side``),
  ``X-Session-Done`` / ``session_done``, ``X-Session-Private`` / ``session_private`` (``openclaw_trl.sessions``).
* Every reply says which turn it is: ``x-openclaw-turn-id`` / ``x-openclaw-policy-version`` headers (not on
  streams: their headers leave before the turn exists), ``system_fingerprint = "openclaw-v{version}"``, and an
  ``openclaw`` object (``turn_id``, ``session_id``, ``turn_type``, ``next_state_of``, ``policy_version``) in the
  response, or in the stream's final chunk. ``POST /v1/feedback`` takes that ``turn_id``.
* ``max_tokens`` is clamped to the room the context leaves and to ``max_tokens_cap``; ``stop`` text is not
  returned; ``logprobs``/``top_logprobs`` (<= 20) are the sampling log-probs and the policy's top-K; in a stream
  they arrive in one chunk just before the final one (the engine streams token ids only).
* Accepted and ignored: ``presence_penalty``, ``frequency_penalty``, ``response_format``, ``tool_choice``
  other than ``"none"`` (which renders without tools), unknown fields. Refused: ``n > 1``, non-text content parts.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import math
import os
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request

from openclaw_trl.serving.chat_service import ChatService, PreparedChat, TurnResult
from openclaw_trl.serving.openai_schema import ApiError, RequestLimits, error_response

logger = logging.getLogger(__name__)

TURN_ID_HEADER = "x-openclaw-turn-id"
POLICY_VERSION_HEADER = "x-openclaw-policy-version"
SESSION_ID_HEADER = "x-openclaw-session-id"
MAX_HEADER_BYTES = 1024 * 1024
"""The request head (request line + headers) uvicorn reads: a larger one gets uvicorn's plain-text 400, a
smaller one reaches the app, whose limits (e.g. ``max_session_id_chars``) answer in OpenAI's JSON format."""


# --------------------------------------------------------------------------------------------------
# Settings
# --------------------------------------------------------------------------------------------------


@dataclass
class ServerSettings:
    """How the server listens, what it serves and which limits it enforces.

    Parameters:
        host / port: where uvicorn listens. 127.0.0.1 by default: the API can train the model, so it
            is not exposed unless asked.
        model_names: names ``GET /v1/models`` lists and ``model`` may take; the first is the default
            when a request omits ``model``. Any other name is a 404 ``model_not_found``.
        api_key_env: name of an environment variable holding a bearer token. ``None`` = no auth. When it
            is set but the variable is empty, ``create_app`` refuses to start (fail closed).
        max_context_len: prompt + completion tokens the model may see (lowered to the model's
            ``max_position_embeddings`` when that is smaller). A prompt that leaves no room for
            one completion token is a 400 that states the limits; ``max_tokens`` is clamped to the room
            left (agent frameworks routinely ask for 8192).
        default_temperature / default_top_p / default_max_tokens: sampling values of requests that
            omit them (the temperature is recorded with every turn).
        train_temperature: the sampling temperature of turns that can be trained on (main turns of
            trainable, non-private sessions), whatever the request asks: the trainer's temperature, so
            the sampling log-probs, the teacher's and the trainer's are all at one temperature (and a
            trainable turn is never greedy). The request's temperature applies to the other turns.
            Replies say which temperature was used (``openclaw.temperature``).
        max_tokens_cap: upper bound on ``max_tokens`` whatever the client asks.
        session_idle_timeout_s: a session idle this long ends without a next state for its last turn.
            The collector's reaper enforces it; the server only carries the value.
        limits: what one request may carry (``openclaw_trl.serving.openai_schema.RequestLimits``: body size,
            messages, text, tools, stop strings, session id, feedback text, prompt tokens).
        generation_threads: threads running blocking engine calls (concurrent requests batch there).
        ui: mount the Gradio UI at ``/``.
    """

    host: str = "127.0.0.1"
    port: int = 7860
    model_names: list[str] = field(default_factory=lambda: ["openclaw"])
    api_key_env: str | None = None
    max_context_len: int = 4096
    default_temperature: float = 0.7
    train_temperature: float = 1.0
    default_top_p: float = 1.0
    default_max_tokens: int = 512
    max_tokens_cap: int = 4096
    session_idle_timeout_s: float = 1800.0
    limits: RequestLimits = field(default_factory=RequestLimits)
    generation_threads: int = 32
    ui: bool = True

    def __post_init__(self) -> None:
        if not self.model_names:
            raise ValueError("ServerSettings.model_names must name at least one model")
        if self.max_context_len < 2:
            raise ValueError("ServerSettings.max_context_len must be >= 2")
        if not 0 < self.default_max_tokens <= self.max_tokens_cap:
            raise ValueError("ServerSettings needs 0 < default_max_tokens <= max_tokens_cap")
        if not self.train_temperature > 0:
            raise ValueError(
                "ServerSettings.train_temperature must be > 0 (trainable turns are never greedy)"
            )


# --------------------------------------------------------------------------------------------------
# HTTP layer
# --------------------------------------------------------------------------------------------------


def _sse(obj) -> bytes:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n".encode()


def _openclaw_meta(prep: PreparedChat, result: TurnResult) -> dict:
    return {
        "turn_id": result.turn_id,
        "session_id": prep.ctx.session_key,
        "turn_type": prep.ctx.turn_type,
        "next_state_of": prep.ctx.next_state_of,
        "policy_version": result.policy_version,
        "temperature": prep.sampling.temperature,  # what the turn was sampled at (see ServerSettings)
    }


def _fingerprint(version: int) -> str:
    return f"openclaw-v{version}"


def completion_body(prep: PreparedChat, result: TurnResult) -> dict:
    """The non-streaming ``chat.completion`` object."""
    n_prompt, n_completion = len(prep.prompt_ids), len(result.completion.token_ids)
    return {
        "id": prep.completion_id,
        "object": "chat.completion",
        "created": prep.created,
        "model": prep.model,
        "system_fingerprint": _fingerprint(result.policy_version),
        "choices": [
            {
                "index": 0,
                "message": result.message,
                "logprobs": result.logprobs,
                "finish_reason": result.finish_reason,
            }
        ],
        "usage": {
            "prompt_tokens": n_prompt,
            "completion_tokens": n_completion,
            "total_tokens": n_prompt + n_completion,
        },
        "openclaw": _openclaw_meta(prep, result),
    }


def _turn_headers(prep: PreparedChat, result: TurnResult) -> dict[str, str]:
    headers = {POLICY_VERSION_HEADER: str(result.policy_version)}
    if result.turn_id is not None:
        headers[TURN_ID_HEADER] = str(result.turn_id)
    if prep.ctx.session_key:
        headers[SESSION_ID_HEADER] = prep.ctx.session_key
    return headers


async def stream_sse(service: ChatService, prep: PreparedChat, request=None) -> AsyncIterator[bytes]:
    """Real token streaming: tokens cross from the engine thread to the event loop as they are sampled.

    The turn is stored before the final chunk (the one with ``finish_reason``) is sent. A client that
    disconnects mid-stream gets no turn stored: it never saw the reply its next message would judge.
    """
    loop = asyncio.get_running_loop()
    tokens: asyncio.Queue = asyncio.Queue()
    version = getattr(service.engine, "policy_version", 0)

    def chunk(delta: dict, finish: str | None = None, **extra) -> dict:
        return {
            "id": prep.completion_id,
            "object": "chat.completion.chunk",
            "created": prep.created,
            "model": prep.model,
            "system_fingerprint": _fingerprint(version),
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
            **extra,
        }

    def on_token(token_id: int) -> None:
        try:
            loop.call_soon_threadsafe(tokens.put_nowait, token_id)
        except RuntimeError:  # the event loop is closed (shutdown): nobody is listening any more
            pass

    future = loop.run_in_executor(service.executor, service.generate, prep, on_token)
    future.add_done_callback(lambda _f: tokens.put_nowait(None))
    decoder = service.stream_parser(prep)
    recorded = False
    try:
        yield _sse(chunk({"role": "assistant", "content": ""}))
        while (tid := await tokens.get()) is not None:
            for delta in decoder.feed(tid):
                yield _sse(chunk(delta))
        completion = await future
        for delta in decoder.finish():
            yield _sse(chunk(delta))
        result = await loop.run_in_executor(None, service.finish, prep, completion, decoder.message())
        recorded = True
        version = result.policy_version
        if result.logprobs is not None:  # the engine streams ids only: log-probs follow in one chunk
            lp_chunk = chunk({})
            lp_chunk["choices"][0]["logprobs"] = result.logprobs
            yield _sse(lp_chunk)
        yield _sse(chunk({}, result.finish_reason, openclaw=_openclaw_meta(prep, result)))
        if prep.include_usage:
            n_p, n_c = len(prep.prompt_ids), len(completion.token_ids)
            usage = {"prompt_tokens": n_p, "completion_tokens": n_c, "total_tokens": n_p + n_c}
            yield _sse({**chunk({}), "choices": [], "usage": usage})
    except ApiError as err:
        yield _sse(err.body())
    except Exception as exc:  # the status line is sent already: report the error in-band
        logger.exception("streaming generation failed")
        yield _sse(ApiError(500, f"generation failed: {exc}", "server_error").body())
    finally:
        if not recorded:  # failed, or the client went away (the generator is closed): no turn to store
            service.abort(prep)
    yield b"data: [DONE]\n\n"


def _check_auth(request, key: str | None) -> None:
    if not key:
        return
    auth = request.headers.get("authorization", "")
    if not auth.lower().startswith("bearer "):
        raise ApiError(401, "Missing bearer token: send 'Authorization: Bearer <key>'", "missing_api_key")
    if not _same_secret(auth[7:].strip(), key):
        raise ApiError(401, "Incorrect API key provided", "invalid_api_key")


def _same_secret(given: str, key: str) -> bool:
    import hmac

    return hmac.compare_digest((given or "").encode(), key.encode())


async def _json_body(request, limits: RequestLimits) -> Any:
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limits.max_request_bytes:
        raise limits.over("max_request_bytes", int(length), None, "The request body (bytes)")
    raw = await _read_body(request, limits.max_request_bytes)
    if len(raw) > limits.max_request_bytes:
        raise limits.over("max_request_bytes", len(raw), None, "The request body (bytes)")
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise ApiError(
            400, f"We could not parse the JSON body of your request: {exc}", "invalid_json"
        ) from None


async def _read_body(request, limit: int) -> bytes:
    """The body, read chunk by chunk and stopped one byte past ``limit`` (a body without a length is bounded too)."""
    chunks, size = [], 0
    async for chunk in request.stream():
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            break
    return b"".join(chunks)


def _resolve_api_key(settings: ServerSettings) -> str | None:
    if not settings.api_key_env:
        return None
    key = os.environ.get(settings.api_key_env, "").strip()
    if not key:
        raise ValueError(
            f"api_key_env={settings.api_key_env!r} names an environment variable that is empty or unset; "
            f"export {settings.api_key_env}=<key>, or drop api_key_env to serve without auth"
        )
    return key


def create_app(
    engine,
    collector,
    store,
    settings: ServerSettings | None = None,
    status: Callable[[], dict] | None = None,
):
    """The FastAPI app: OpenAI routes + the Gradio UI at ``/`` (when ``settings.ui``).

    ``collector`` attaches next states and writes turns to ``store`` (``openclaw_trl.sessions``);
    ``status()`` is the trainer's live view for ``/v1/status`` and the learning panel.
    ``app.state.service`` is the ``ChatService`` both use.
    """
    from contextlib import asynccontextmanager

    from fastapi import FastAPI
    from fastapi.responses import JSONResponse, StreamingResponse
    from starlette.exceptions import HTTPException as StarletteHTTPException

    settings = settings or ServerSettings()
    api_key = _resolve_api_key(settings)
    service = ChatService(engine, collector, store, settings, status)

    @asynccontextmanager
    async def lifespan(_app):
        yield
        service.close()

    app = FastAPI(title="openclaw-trl", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.service = service
    app.state.settings = settings

    @app.exception_handler(ApiError)
    async def _api_error(_request, exc: ApiError):
        return error_response(exc)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_request, exc: StarletteHTTPException):
        return error_response(ApiError(exc.status_code, str(exc.detail), "http_error"))

    @app.exception_handler(Exception)
    async def _unexpected(_request, exc: Exception):
        logger.exception("unhandled error")
        return error_response(ApiError(500, f"internal error: {type(exc).__name__}", "server_error"))

    @app.get("/healthz")
    async def healthz():
        return {"ok": True, "policy_version": getattr(engine, "policy_version", 0)}

    @app.get("/v1/models")
    async def models(request: Request):
        _check_auth(request, api_key)
        data = [
            {"id": n, "object": "model", "created": 0, "owned_by": "openclaw-trl"}
            for n in settings.model_names
        ]
        return {"object": "list", "data": data}

    @app.get("/v1/status")
    async def get_status(request: Request):
        _check_auth(request, api_key)
        return JSONResponse(_finite(await asyncio.to_thread(service.status)))

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        _check_auth(request, api_key)
        payload = await _json_body(request, settings.limits)
        prep = await asyncio.to_thread(service.prepare, payload, request.headers)
        if prep.stream:
            headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
            if prep.ctx.session_key:
                headers[SESSION_ID_HEADER] = prep.ctx.session_key
            return StreamingResponse(
                stream_sse(service, prep, request), media_type="text/event-stream", headers=headers
            )
        loop = asyncio.get_running_loop()
        try:
            completion = await loop.run_in_executor(service.executor, service.generate, prep, None)
            result = await asyncio.to_thread(service.finish, prep, completion)
        except BaseException:
            await asyncio.to_thread(service.abort, prep)
            raise
        return JSONResponse(completion_body(prep, result), headers=_turn_headers(prep, result))

    @app.post("/v1/feedback")
    async def feedback(request: Request):
        _check_auth(request, api_key)
        payload = await _json_body(request, settings.limits)
        turn_id, rating, text = _parse_feedback(payload)
        result = await asyncio.to_thread(service.feedback, turn_id, rating, text)
        out = {"ok": True, "turn_id": turn_id, "rating": rating}
        if dataclasses.is_dataclass(result):  # the collector's FeedbackResult: feedback_id, attached, reason
            out.update({k: v for k, v in dataclasses.asdict(result).items() if k != "turn_id"})
        return out

    @app.api_route("/v1/{rest:path}", methods=["GET", "POST", "PUT", "DELETE", "PATCH"])
    async def unknown_route(rest: str):
        raise ApiError(404, f"Unknown API route /v1/{rest}", "unknown_url")

    if settings.ui:
        import gradio as gr

        from openclaw_trl.serving.ui import build_ui

        blocks = build_ui(service)
        # With an API key the UI asks for it too (any user name): the UI trains the model as much as the API.
        auth = (lambda _user, password: _same_secret(password, api_key)) if api_key else None
        app = gr.mount_gradio_app(
            app,
            blocks,
            path="/",
            server_name=settings.host,
            server_port=settings.port,
            auth=auth,
            auth_message="This server's API key is the password." if api_key else None,
        )
        app.state.blocks = blocks
    return app


def _finite(value):
    """JSON-safe status: NaN/inf metrics (e.g. a hint rate before any hint) become null, numpy scalars floats."""
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    if hasattr(value, "item") and callable(value.item) and getattr(value, "ndim", 1) == 0:
        value = value.item()  # numpy / torch scalars
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


def _parse_feedback(payload) -> tuple[Any, int | None, str | None]:
    if not isinstance(payload, dict):
        raise ApiError(400, "The request body must be a JSON object", "invalid_json")
    turn_id = payload.get("turn_id")
    if isinstance(turn_id, bool) or not isinstance(turn_id, int | str) or turn_id == "":
        raise ApiError(
            400, "'turn_id' (the x-openclaw-turn-id of a reply) is required", "invalid_value", "turn_id"
        )
    if isinstance(turn_id, str) and turn_id.isdigit():
        turn_id = int(turn_id)
    rating = payload.get("rating")
    if rating is not None and (isinstance(rating, bool) or rating not in (-1, 1)):
        raise ApiError(400, "'rating' must be 1 (👍) or -1 (👎)", "invalid_value", "rating")
    text = payload.get("text")
    if text is not None and not isinstance(text, str):
        raise ApiError(400, "'text' must be a string", "invalid_value", "text")
    text = text.strip() if text else None
    if rating is None and not text:
        raise ApiError(
            400, "feedback needs a 'rating' (±1) or a correction 'text'", "invalid_value", "rating"
        )
    return turn_id, rating, text


# --------------------------------------------------------------------------------------------------
# Running it
# --------------------------------------------------------------------------------------------------


class ServerThread:
    """uvicorn in a background thread (tests, benchmarks, app.py): ``start()``, ``url``, ``stop()``."""

    def __init__(self, app, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning"):
        import uvicorn

        self.config = uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level=log_level,
            lifespan="on",
            ws="none",
            h11_max_incomplete_event_size=MAX_HEADER_BYTES,
        )
        self.server = uvicorn.Server(self.config)
        self.thread = threading.Thread(target=self.server.run, name="openclaw-uvicorn", daemon=True)
        self.host = host

    def start(self, timeout: float = 30.0) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not start (port in use?)")
            time.sleep(0.02)
        return self

    @property
    def port(self) -> int:
        return self.server.servers[0].sockets[0].getsockname()[1]

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def stop(self, timeout: float = 10.0) -> None:
        self.server.should_exit = True
        self.thread.join(timeout)

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def serve(app, host: str = "127.0.0.1", port: int = 7860, log_level: str = "info") -> None:
    """Blocking: run ``app`` with uvicorn until interrupted (Ctrl-C)."""
    import uvicorn

    uvicorn.run(
        app,
        host=host,
        port=port,
        log_level=log_level,
        ws="none",
        h11_max_incomplete_event_size=MAX_HEADER_BYTES,
    )


def open_share_link(host: str, port: int) -> str:
    """A public ``*.gradio.live`` tunnel to ``host:port`` (needs internet access); returns its URL."""
    import secrets

    from gradio import networking

    return networking.setup_tunnel(host, port, secrets.token_urlsafe(32), None, None)
