"""The OpenAI-compatible routes: every served turn becomes training data.

``router`` (mounted by ``openclaw_trl.serving.app.create_app``) answers

* ``POST /v1/chat/completions``: OpenAI wire format, real token streaming over SSE (reasoning and
  tool-call deltas carry their ``index``, as OpenAI clients require); the reasoning part of a message or
  delta is sent as both ``reasoning_content`` and ``reasoning``, and either is accepted on input;
* ``POST /v1/responses`` (OpenAI Responses API, ``openclaw_trl.serving.responses``) on the same chat service,
  ``GET /v1/responses/{id}`` (the stored response object);
* ``POST /v1/feedback``: a signal on any turn of the session it names (``session_id`` / ``X-Session-Id``: the
  reply's ``openclaw.session_id``; another session's turn is a 404): ``action`` ``rate`` (👍/👎 + optional
  text, the default), ``correct`` (what the answer should have been), ``reject`` (retry: a 👎 without text) or
  ``withdraw`` (undo: never judged or trained), as in the UI (``openclaw_trl.sessions.signals``). A bare 👎
  (``rating: -1`` without ``text``) waits for its correction: the reply's ``correction_until`` (ISO 8601, UTC)
  and ``correction_seconds_left`` say until when an ``action: "correct"`` on that turn replaces it (null for
  any other signal, or with ``correction_window_s: 0``); ``GET /v1/status`` counts the ratings waiting
  (``correction_window``);
* ``GET /v1/models``, ``GET /healthz``, ``GET /v1/status``; any other ``/v1/...`` is a 404 ``unknown_url``.

Each handler reads the ``ChatService`` from ``request.app.state.service`` and the bearer key from
``request.app.state.api_key`` (``None`` = no auth; ``/healthz`` is always open).

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
  ``openclaw`` object (``turn_id``, ``session_id``, ``turn_type``, ``next_state_of``, ``policy_version``,
  ``temperature``; ``best_of_n`` on a Best-of-N turn: ``n``, ``served_index``, ``scores``, ``group_id``) in the
  response, or in the stream's final chunk. ``POST /v1/feedback`` takes that ``turn_id``.
* ``max_tokens`` is clamped to the room the context leaves and to ``max_tokens_cap``; ``stop`` text is not
  returned; ``logprobs``/``top_logprobs`` (<= 20) are the sampling log-probs and the policy's top-K; in a stream
  they arrive in one chunk just before the final one (the engine streams token ids only).
* Accepted and ignored: ``presence_penalty``, ``frequency_penalty``, ``response_format``, ``tool_choice``
  ``auto`` / ``required`` / a function of the request's tools (``"none"`` renders without tools), unknown fields.
  Refused: ``n > 1``, non-text content parts, a ``tool_choice`` naming an unknown function, and in any body a
  string (or field name) with a lone UTF-16 surrogate (``openai_schema.check_text``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hmac
import json
import logging
import math
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, StreamingResponse

from openclaw_trl.serving import responses
from openclaw_trl.serving.chat_service import ChatService, PreparedChat, TurnResult, openclaw_meta
from openclaw_trl.serving.openai_schema import (
    INT64_MAX,
    ApiError,
    RequestLimits,
    check_text,
    with_reasoning_aliases,
)

logger = logging.getLogger(__name__)

TURN_ID_HEADER = "x-openclaw-turn-id"
POLICY_VERSION_HEADER = "x-openclaw-policy-version"
SESSION_ID_HEADER = "x-openclaw-session-id"


# --------------------------------------------------------------------------------------------------
# Auth and request bodies
# --------------------------------------------------------------------------------------------------


def same_secret(given: str, key: str) -> bool:
    """Constant-time comparison of a presented secret with the server's key."""
    return hmac.compare_digest((given or "").encode(), key.encode())


async def require_api_key(request: Request) -> None:
    """Dependency: the ``Authorization: Bearer <key>`` header matches ``app.state.api_key`` (when set)."""
    key = request.app.state.api_key
    if not key:
        return
    auth = request.headers.get("authorization", "")
    if not auth.lower().startswith("bearer "):
        raise ApiError(401, "Missing bearer token: send 'Authorization: Bearer <key>'", "missing_api_key")
    if not same_secret(auth[7:].strip(), key):
        raise ApiError(401, "Incorrect API key provided", "invalid_api_key")


def _service(request: Request) -> ChatService:
    return request.app.state.service


async def _json_body(request: Request, limits: RequestLimits) -> Any:
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limits.max_request_bytes:
        raise limits.over("max_request_bytes", int(length), None, "The request body (bytes)")
    raw = await _read_body(request, limits.max_request_bytes)
    if len(raw) > limits.max_request_bytes:
        raise limits.over("max_request_bytes", len(raw), None, "The request body (bytes)")
    try:
        payload = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise ApiError(
            400, f"We could not parse the JSON body of your request: {exc}", "invalid_json"
        ) from None
    check_text(payload, raw=raw)
    return payload


async def _read_body(request: Request, limit: int) -> bytes:
    """The body, read chunk by chunk and stopped one byte past ``limit`` (a body without a length is bounded too)."""
    chunks, size = [], 0
    async for chunk in request.stream():
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            break
    return b"".join(chunks)


# --------------------------------------------------------------------------------------------------
# Response bodies (OpenAI ``chat.completion`` / ``chat.completion.chunk`` + the ``openclaw`` object)
# --------------------------------------------------------------------------------------------------


def _sse(obj) -> bytes:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n".encode()


def _fingerprint(version: int) -> str:
    return f"openclaw-v{version}"


def _usage(prep: PreparedChat, n_completion: int) -> dict:
    n_prompt = len(prep.prompt_ids)
    return {
        "prompt_tokens": n_prompt,
        "completion_tokens": n_completion,
        "total_tokens": n_prompt + n_completion,
    }


def completion_body(prep: PreparedChat, result: TurnResult) -> dict:
    """The non-streaming ``chat.completion`` object."""
    return {
        "id": prep.completion_id,
        "object": "chat.completion",
        "created": prep.created,
        "model": prep.model,
        "system_fingerprint": _fingerprint(result.policy_version),
        "choices": [
            {
                "index": 0,
                "message": with_reasoning_aliases(result.message),
                "logprobs": result.logprobs,
                "finish_reason": result.finish_reason,
            }
        ],
        "usage": _usage(prep, len(result.completion.token_ids)),
        "openclaw": openclaw_meta(prep, result),
    }


def _chunk(prep: PreparedChat, version: int, delta: dict, finish: str | None = None, **extra) -> dict:
    """One ``chat.completion.chunk`` with a single choice."""
    return {
        "id": prep.completion_id,
        "object": "chat.completion.chunk",
        "created": prep.created,
        "model": prep.model,
        "system_fingerprint": _fingerprint(version),
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        **extra,
    }


def _turn_headers(prep: PreparedChat, result: TurnResult) -> dict[str, str]:
    headers = {POLICY_VERSION_HEADER: str(result.policy_version)}
    if result.turn_id is not None:
        headers[TURN_ID_HEADER] = str(result.turn_id)
    if prep.ctx.session_key:
        headers[SESSION_ID_HEADER] = prep.ctx.session_key
    return headers


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


# --------------------------------------------------------------------------------------------------
# Streaming
# --------------------------------------------------------------------------------------------------


async def stream_sse(service: ChatService, prep: PreparedChat) -> AsyncIterator[bytes]:
    """Real token streaming: each delta leaves as a chunk as soon as its tokens are sampled.

    The turn is stored before the final chunk (the one with ``finish_reason``) is sent. A client that
    disconnects mid-stream gets no turn stored: it never saw the reply its next message would judge.
    """
    version = getattr(service.engine, "policy_version", 0)
    try:
        async with service.stream(prep) as turn:
            yield _sse(_chunk(prep, version, {"role": "assistant", "content": ""}))
            async for delta in turn:
                yield _sse(_chunk(prep, version, with_reasoning_aliases(delta)))
        for chunk in _final_chunks(prep, turn.result):
            yield _sse(chunk)
    except ApiError as err:
        yield _sse(err.body())
    except Exception as exc:  # the status line is sent already: report the error in-band
        logger.exception("streaming generation failed")
        yield _sse(ApiError(500, f"generation failed: {exc}", "server_error").body())
    yield b"data: [DONE]\n\n"


def _final_chunks(prep: PreparedChat, result: TurnResult) -> list[dict]:
    """After the turn is stored: the log-probs (when asked), the ``finish_reason`` chunk, the usage (when asked)."""
    version = result.policy_version
    chunks = []
    if result.logprobs is not None:  # the engine streams ids only: log-probs follow in one chunk
        lp_chunk = _chunk(prep, version, {})
        lp_chunk["choices"][0]["logprobs"] = result.logprobs
        chunks.append(lp_chunk)
    chunks.append(_chunk(prep, version, {}, result.finish_reason, openclaw=openclaw_meta(prep, result)))
    if prep.include_usage:
        usage = _usage(prep, len(result.completion.token_ids))
        chunks.append({**_chunk(prep, version, {}), "choices": [], "usage": usage})
    return chunks


# --------------------------------------------------------------------------------------------------
# Routes
# --------------------------------------------------------------------------------------------------

router = APIRouter()
_authorized = [Depends(require_api_key)]


@router.get("/healthz")
async def healthz(request: Request):
    return {"ok": True, "policy_version": getattr(_service(request).engine, "policy_version", 0)}


@router.get("/v1/models", dependencies=_authorized)
async def models(request: Request):
    data = [
        {"id": n, "object": "model", "created": 0, "owned_by": "openclaw-trl"}
        for n in _service(request).settings.model_names
    ]
    return {"object": "list", "data": data}


@router.get("/v1/status", dependencies=_authorized)
async def status(request: Request):
    return JSONResponse(_finite(await asyncio.to_thread(_service(request).status)))


@router.post("/v1/chat/completions", dependencies=_authorized)
async def chat_completions(request: Request):
    service = _service(request)
    payload = await _json_body(request, service.settings.limits)
    prep = await asyncio.to_thread(service.prepare, payload, request.headers)
    if prep.stream:
        return _streaming_response(prep, stream_sse(service, prep))
    result = await service.complete(prep)
    return JSONResponse(completion_body(prep, result), headers=_turn_headers(prep, result))


def _streaming_response(prep: PreparedChat, events: AsyncIterator[bytes]) -> StreamingResponse:
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    if prep.ctx.session_key:
        headers[SESSION_ID_HEADER] = prep.ctx.session_key
    return StreamingResponse(events, media_type="text/event-stream", headers=headers)


@router.post("/v1/responses", dependencies=_authorized)
async def create_response(request: Request):
    service = _service(request)
    payload = await _json_body(request, service.settings.limits)
    job = await asyncio.to_thread(responses.prepare, service, payload, request.headers)
    if job.stream:
        return _streaming_response(job.chat, responses.stream_events(service, job))
    body, result = await responses.respond(service, job)
    return JSONResponse(body, headers=_turn_headers(job.chat, result))


@router.api_route("/v1/responses/{response_id}", methods=["GET", "DELETE"], dependencies=_authorized)
async def response_by_id(request: Request, response_id: str):
    return await asyncio.to_thread(responses.by_id, _service(request), response_id, request.method)


@router.post("/v1/feedback", dependencies=_authorized)
async def feedback(request: Request):
    service = _service(request)
    payload = await _json_body(request, service.settings.limits)
    asked = _parse_feedback(payload, request.headers, service.settings.limits)
    turn, session = asked.turn_id, asked.session
    if asked.action == "withdraw":
        result = await asyncio.to_thread(service.withdraw, turn, session=session)
    elif asked.action == "reject":
        result = await asyncio.to_thread(service.reject, turn, session=session)
    elif asked.action == "correct":
        result = await asyncio.to_thread(service.correct, turn, asked.text, session=session)
    else:
        result = await asyncio.to_thread(service.feedback, turn, asked.rating, asked.text, session=session)
    out = {"ok": True, "turn_id": turn, "action": asked.action, "rating": asked.rating}
    if dataclasses.is_dataclass(result):  # FeedbackResult (feedback_id, attached, reason) or Withdrawal
        out.update({k: v for k, v in dataclasses.asdict(result).items() if k != "turn_id"})
    if hasattr(result, "correction_seconds_left"):  # a FeedbackResult: its correction window
        out.update(_correction_window(result))
    return out


def _correction_window(result) -> dict:
    """``correction_until`` (ISO 8601, UTC) and ``correction_seconds_left`` of a 👎 waiting for its correction
    (both None when the signal opened no window)."""
    from openclaw_trl.sessions import utc_iso

    left = result.correction_seconds_left()
    return {
        "correction_until": None if result.correction_until is None else utc_iso(result.correction_until),
        "correction_seconds_left": None if left is None else round(left, 1),
    }


@router.api_route("/v1/{rest:path}", methods=["GET", "POST", "PUT", "DELETE", "PATCH"])
async def unknown_route(rest: str):
    raise ApiError(404, f"Unknown API route /v1/{rest}", "unknown_url")


FEEDBACK_ACTIONS = ("rate", "correct", "reject", "withdraw")


@dataclasses.dataclass
class FeedbackRequest:
    """A validated ``POST /v1/feedback`` body."""

    turn_id: int
    action: str  # rate (👍/👎 + optional text) / correct (text) / reject (retry) / withdraw (undo)
    rating: int | None
    text: str | None
    session: str  # the session the turn must belong to (``openclaw.session_id`` of the reply)


def _feedback_turn_id(value) -> int:
    """A turn id: a JSON integer, or a string of ASCII digits, from 1 to 2**63 - 1 (what the store holds)."""
    if isinstance(value, str) and value.isascii() and value.isdigit():
        value = int(value) if len(value) <= 19 else INT64_MAX + 1
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= INT64_MAX:
        short = isinstance(value, str) and len(value) <= 40 or isinstance(value, int) and abs(value) < 10**40
        shown = repr(value) if short else "this value"
        raise ApiError(
            400,
            f"'turn_id' must be the x-openclaw-turn-id of a reply (an integer from 1 to 2**63 - 1, or its "
            f"decimal digits as a string), got {shown}",
            "invalid_value",
            "turn_id",
        )
    return value


def _parse_feedback(payload, headers, limits: RequestLimits) -> FeedbackRequest:
    if not isinstance(payload, dict):
        raise ApiError(400, "The request body must be a JSON object", "invalid_json")
    if payload.get("turn_id") in (None, ""):
        raise ApiError(
            400, "'turn_id' (the x-openclaw-turn-id of a reply) is required", "invalid_value", "turn_id"
        )
    turn_id = _feedback_turn_id(payload["turn_id"])
    session = _feedback_session(payload, headers, limits)
    action = payload.get("action", "rate")
    if action not in FEEDBACK_ACTIONS:
        raise ApiError(
            400,
            f"'action' must be one of {', '.join(FEEDBACK_ACTIONS)}, got {action!r}",
            "invalid_value",
            "action",
        )
    rating = payload.get("rating")
    if rating is not None and (isinstance(rating, bool) or rating not in (-1, 1)):
        raise ApiError(400, "'rating' must be 1 (👍) or -1 (👎)", "invalid_value", "rating")
    text = payload.get("text")
    if text is not None and not isinstance(text, str):
        raise ApiError(400, "'text' must be a string", "invalid_value", "text")
    text = text.strip() if text else None
    if action in ("reject", "withdraw") and (rating is not None or text):
        raise ApiError(400, f"action {action!r} takes no 'rating' or 'text'", "invalid_value", "action")
    if action == "correct" and (not text or rating is not None):
        raise ApiError(
            400,
            "action 'correct' takes a 'text' (what the answer should have been) and no 'rating' (it keeps the "
            "turn's latest one, else -1); send action 'rate' with both to choose the rating",
            "invalid_value",
            "text",
        )
    if action == "rate" and rating is None and not text:
        raise ApiError(
            400, "feedback needs a 'rating' (±1) or a correction 'text'", "invalid_value", "rating"
        )
    return FeedbackRequest(turn_id, action, rating, text, session)


def _feedback_session(payload: dict, headers, limits: RequestLimits) -> str:
    """The session the feedback names (as a chat request names it: ``X-Session-Id``, else ``session_id``,
    else ``user``); required, since a turn only takes signals from its own session."""
    from openclaw_trl.sessions import request_session_key

    for name in ("session_id", "user"):
        if payload.get(name) is not None and not isinstance(payload[name], str):
            raise ApiError(400, f"'{name}' must be a string", "invalid_value", name)
    session = request_session_key(headers, payload)
    if session is None:
        raise ApiError(
            400,
            "Name the session of the turn: 'session_id' (or the X-Session-Id header) is the "
            "openclaw.session_id of the reply (its x-openclaw-session-id header). A turn takes feedback only "
            "from its own session.",
            "missing_session",
            "session_id",
        )
    limits.check_session_id(session)
    return session
