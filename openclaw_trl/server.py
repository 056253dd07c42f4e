"""The OpenAI-compatible API (and the host of the Gradio UI): every served turn becomes training data.

``create_app(engine, collector, store, settings)`` returns a FastAPI app with

* ``POST /v1/chat/completions``: OpenAI wire format, real token streaming over SSE (reasoning and
  tool-call deltas carry their ``index``, unlike the reference's two-chunk shim, notes §7.24);
* ``POST /v1/feedback``: 👍/👎 + optional correction text for a turn = the next state of that turn;
* ``GET /v1/models``, ``GET /healthz``, ``GET /v1/status``;
* the Gradio UI mounted at ``/`` (``openclaw_trl.ui``), which calls the same ``ChatService`` in-process.

Why the server renders the chat template itself: the engine gets token ids and returns the sampled
ids + log-probs, and those exact ids are stored (notes §7.4). The turn is written to the store
*before* the response is returned (for a stream: before the final chunk), so a client that reacts
fast to a reply can never race the bookkeeping of the turn its next message is the next state of.

Serving never answers 503 because training runs (notes §7.16): the engine serves from a published
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
import queue
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from fastapi import Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from openclaw_trl.engines.base import Completion, GenerationRequest, SamplingParams

logger = logging.getLogger(__name__)

TURN_ID_HEADER = "x-openclaw-turn-id"
POLICY_VERSION_HEADER = "x-openclaw-policy-version"
SESSION_ID_HEADER = "x-openclaw-session-id"


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
            omit them (the temperature is recorded with every turn, DESIGN.md §1).
        max_tokens_cap: upper bound on ``max_tokens`` whatever the client asks.
        session_idle_timeout_s: a session idle this long ends without a next state for its last turn
            (notes §7.10). The collector's reaper enforces it; the server only carries the value.
        max_body_bytes: larger request bodies are a 413 before any parsing.
        generation_threads: threads running blocking engine calls (concurrent requests batch there).
        ui: mount the Gradio UI at ``/``.
    """

    host: str = "127.0.0.1"
    port: int = 7860
    model_names: list[str] = field(default_factory=lambda: ["openclaw"])
    api_key_env: str | None = None
    max_context_len: int = 4096
    default_temperature: float = 0.7
    default_top_p: float = 1.0
    default_max_tokens: int = 512
    max_tokens_cap: int = 4096
    session_idle_timeout_s: float = 1800.0
    max_body_bytes: int = 8 * 1024 * 1024
    generation_threads: int = 32
    ui: bool = True

    def __post_init__(self) -> None:
        if not self.model_names:
            raise ValueError("ServerSettings.model_names must name at least one model")
        if self.max_context_len < 2:
            raise ValueError("ServerSettings.max_context_len must be >= 2")
        if not 0 < self.default_max_tokens <= self.max_tokens_cap:
            raise ValueError("ServerSettings needs 0 < default_max_tokens <= max_tokens_cap")


# --------------------------------------------------------------------------------------------------
# Errors (OpenAI format: {"error": {"message", "type", "param", "code"}})
# --------------------------------------------------------------------------------------------------

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
}


class ApiError(Exception):
    """An error answered to the client in OpenAI's format, never a crash."""

    def __init__(self, status: int, message: str, code: str | None = None, param: str | None = None):
        super().__init__(message)
        self.status, self.message, self.code, self.param = status, message, code, param

    def body(self) -> dict:
        kind = _ERROR_TYPES.get(
            self.status, "server_error" if self.status >= 500 else "invalid_request_error"
        )
        return {"error": {"message": self.message, "type": kind, "param": self.param, "code": self.code}}


def _error_response(err: ApiError):
    from fastapi.responses import JSONResponse

    headers = {"WWW-Authenticate": "Bearer"} if err.status == 401 else None
    return JSONResponse(err.body(), status_code=err.status, headers=headers)


# --------------------------------------------------------------------------------------------------
# Request schema (strict numbers: "0.7" or true is not a temperature)
# --------------------------------------------------------------------------------------------------

Num = Annotated[float, Field(strict=True)]
Int = Annotated[int, Field(strict=True)]
Bool = Annotated[bool, Field(strict=True)]
ROLES = ("system", "developer", "user", "assistant", "tool")


class _Function(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str = Field(min_length=1, max_length=128)
    description: str | None = None
    parameters: dict | None = None


class _Tool(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["function"] = "function"
    function: _Function


class _CallFunction(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str = Field(min_length=1)
    arguments: str | dict = "{}"


class _ToolCall(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: str | None = None
    type: Literal["function"] = "function"
    function: _CallFunction


class _Message(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: str
    content: str | list[dict] | None = None
    name: str | None = None
    tool_calls: list[_ToolCall] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None

    @field_validator("role")
    @classmethod
    def _known_role(cls, role: str) -> str:
        if role not in ROLES:
            raise ValueError(f"unknown role {role!r}; expected one of {', '.join(ROLES)}")
        return role


class ChatRequest(BaseModel):
    """The subset of OpenAI's chat-completions request we honour (unknown fields are ignored)."""

    model_config = ConfigDict(extra="allow")
    model: str | None = None
    messages: list[_Message] = Field(min_length=1)
    tools: list[_Tool] | None = None
    tool_choice: str | dict | None = None
    temperature: Num | None = Field(default=None, ge=0.0, le=2.0)
    top_p: Num | None = Field(default=None, gt=0.0, le=1.0)
    top_k: Int | None = Field(default=None, ge=0)
    max_tokens: Int | None = Field(default=None, ge=1)
    max_completion_tokens: Int | None = Field(default=None, ge=1)
    stop: str | list[str] | None = None
    seed: Int | None = None
    stream: Bool = False
    stream_options: dict | None = None
    logprobs: Bool = False
    top_logprobs: Int | None = Field(default=None, ge=0, le=20)
    n: Int = Field(default=1, ge=1, le=1)
    presence_penalty: Num | None = Field(default=None, ge=-2.0, le=2.0)  # accepted, not applied
    frequency_penalty: Num | None = Field(default=None, ge=-2.0, le=2.0)  # accepted, not applied
    # OpenClaw extensions (headers take precedence, notes §1.4)
    session_id: str | None = None
    user: str | None = None
    session_done: bool | str | int | None = None
    turn_type: str | None = None

    @field_validator("stop")
    @classmethod
    def _stop_strings(cls, stop):
        stops = [stop] if isinstance(stop, str) else stop
        if stops is not None and (len(stops) > 16 or any(not s for s in stops)):
            raise ValueError("stop takes at most 16 non-empty strings")
        return stops


def _format_validation_error(exc: ValidationError) -> ApiError:
    first = exc.errors()[0]
    loc = [
        str(p) for p in first.get("loc", ()) if not str(p).startswith(("function-", "list[", "str", "dict"))
    ]
    param = ".".join(loc) or None
    msg = first.get("msg", "invalid request").removeprefix("Value error, ")
    if first.get("type") == "missing":
        msg = "field required"
    return ApiError(400, f"Invalid value for '{param}': {msg}" if param else msg, "invalid_value", param)


def _flatten_content(content, param: str) -> str:
    """OpenAI content parts -> text (text parts joined by newlines); other parts are refused, not dropped."""
    if content is None or isinstance(content, str):
        return content or ""
    texts = []
    for i, part in enumerate(content):
        if part.get("type") == "text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
        else:
            raise ApiError(
                400,
                f"Only text content parts are supported; {param}[{i}] has type {part.get('type')!r}",
                "unsupported_content",
                f"{param}[{i}]",
            )
    return "\n".join(texts)


def normalize_messages(messages: list[_Message]) -> list[dict]:
    """Validated messages -> plain dicts for the chat template (``developer`` -> ``system``)."""
    out = []
    for i, m in enumerate(messages):
        content = _flatten_content(m.content, f"messages[{i}].content")
        role = "system" if m.role == "developer" else m.role
        if role in ("system", "user", "tool") and m.content is None:
            raise ApiError(
                400, f"messages[{i}] ({m.role}) needs a content", "invalid_value", f"messages[{i}].content"
            )
        if role == "assistant" and m.content is None and not m.tool_calls:
            raise ApiError(
                400,
                f"messages[{i}] (assistant) needs a content or tool_calls",
                "invalid_value",
                f"messages[{i}]",
            )
        msg: dict[str, Any] = {"role": role, "content": content}
        if role == "assistant":
            if m.reasoning_content:
                msg["reasoning_content"] = m.reasoning_content
            if m.tool_calls:
                msg["tool_calls"] = [
                    {
                        "id": c.id or f"call_{i}_{j}",
                        "type": "function",
                        "function": {
                            "name": c.function.name,
                            "arguments": c.function.arguments
                            if isinstance(c.function.arguments, str)
                            else json.dumps(c.function.arguments),
                        },
                    }
                    for j, c in enumerate(m.tool_calls)
                ]
        if role == "tool" and m.tool_call_id:
            msg["tool_call_id"] = m.tool_call_id
        if m.name and role != "tool":
            msg["name"] = m.name
        out.append(msg)
    return out


# --------------------------------------------------------------------------------------------------
# The chat service: validation -> template -> engine -> parse -> store. Shared by the API and the UI.
# --------------------------------------------------------------------------------------------------


@dataclass
class PreparedChat:
    """A validated request, rendered to token ids, ready for the engine."""

    model: str
    messages: list[dict]
    tools: list[dict] | None
    prompt_ids: list[int]
    sampling: SamplingParams
    ctx: Any = None  # the collector's RequestContext (session, turn type, next-state bookkeeping)
    logprobs: bool = False
    top_logprobs: int = 0
    stream: bool = False
    include_usage: bool = False
    created: int = field(default_factory=lambda: int(time.time()))
    completion_id: str = field(default_factory=lambda: f"chatcmpl-{uuid.uuid4().hex[:24]}")


@dataclass
class TurnResult:
    """What one generated turn became: parsed message, stored turn id, policy version."""

    completion: Completion
    message: dict  # {"role": "assistant", "content", "reasoning_content"?, "tool_calls"?}
    finish_reason: str
    turn_id: int | str | None
    policy_version: int
    logprobs: dict | None = None


class _StopTrimmer:
    """OpenAI semantics for ``stop``: the stop text is not returned (the engine keeps it in the ids).

    While streaming, content that could still be the start of a stop string is held back.
    """

    def __init__(self, stops: list[str]):
        self.stops = stops
        self.hold = max((len(s) for s in stops), default=1) - 1
        self.buf = ""
        self.stopped = False

    def feed(self, text: str, final: bool = False) -> str:
        if self.stopped:
            return ""
        self.buf += text
        cut = min((i for i in (self.buf.find(s) for s in self.stops) if i >= 0), default=-1)
        if cut >= 0:
            out, self.buf, self.stopped = self.buf[:cut], "", True
            return out
        if final or not self.hold:
            out, self.buf = self.buf, ""
            return out
        out, self.buf = self.buf[: -self.hold], self.buf[-self.hold :]
        return out


class ChatService:
    """The in-process chat API: what ``/v1/chat/completions`` and the Gradio UI both call."""

    def __init__(
        self, engine, collector, store, settings: ServerSettings, status: Callable[[], dict] | None = None
    ):
        self.engine, self.collector, self.store, self.settings = engine, collector, store, settings
        self._status = status
        self.tokenizer = engine.tokenizer
        self.context_limit = _context_limit(engine, settings.max_context_len)
        self.executor = ThreadPoolExecutor(settings.generation_threads, thread_name_prefix="openclaw-gen")

    # -- validation and rendering ------------------------------------------------------------------

    def prepare(self, payload: Any, headers=None) -> PreparedChat:
        """Validate an OpenAI request body, render it to prompt ids, then open the turn with the collector.

        Everything that can reject the request runs *before* ``collector.begin``: a rejected request never
        gives its last message as the next state of the previous turn. Raises ``ApiError`` (4xx).
        """
        if not isinstance(payload, dict):
            raise ApiError(400, "The request body must be a JSON object", "invalid_json")
        if "messages" in payload and not isinstance(payload["messages"], list):
            raise ApiError(400, "'messages' must be a list of message objects", "invalid_value", "messages")
        try:
            body = ChatRequest.model_validate(payload)
        except ValidationError as exc:
            raise _format_validation_error(exc) from None
        model = body.model or self.settings.model_names[0]
        if model not in self.settings.model_names:
            raise ApiError(
                404,
                f"The model {model!r} does not exist; this server serves {', '.join(self.settings.model_names)}",
                "model_not_found",
                "model",
            )
        if body.top_logprobs and not body.logprobs:
            raise ApiError(400, "top_logprobs needs logprobs=true", "invalid_value", "top_logprobs")
        messages = normalize_messages(body.messages)
        tools = [t.model_dump(exclude_none=True) for t in body.tools] if body.tools else None
        if body.tool_choice == "none":
            tools = None
        prompt_ids = self._render(messages, tools)
        limit = self.context_limit
        if len(prompt_ids) >= limit:
            raise ApiError(
                400,
                f"This model's maximum context length is {limit} tokens; the messages take "
                f"{len(prompt_ids)} tokens, which leaves no room for a completion. Shorten the conversation.",
                "context_length_exceeded",
                "messages",
            )
        asked = body.max_completion_tokens or body.max_tokens or self.settings.default_max_tokens
        max_new = min(asked, self.settings.max_tokens_cap, limit - len(prompt_ids))
        sampling = SamplingParams(
            temperature=self.settings.default_temperature
            if body.temperature is None
            else float(body.temperature),
            top_p=self.settings.default_top_p if body.top_p is None else float(body.top_p),
            top_k=body.top_k or 0,
            max_new_tokens=max_new,
            stop=list(body.stop or []),
            seed=body.seed,
        )
        from openclaw_trl.sessions import SessionRequestError

        try:
            ctx = self.collector.begin(messages, tools=tools, headers=headers or {}, body=payload)
        except SessionRequestError as exc:
            raise ApiError(400, str(exc), "invalid_session") from None
        return PreparedChat(
            model=model,
            messages=messages,
            tools=tools,
            prompt_ids=prompt_ids,
            sampling=sampling,
            ctx=ctx,
            logprobs=body.logprobs,
            top_logprobs=body.top_logprobs or 0,
            stream=body.stream,
            include_usage=bool((body.stream_options or {}).get("include_usage")),
        )

    def _render(self, messages: list[dict], tools: list[dict] | None) -> list[int]:
        from openclaw_trl.chat import render_prompt_ids

        try:
            return list(render_prompt_ids(self.tokenizer, messages, tools))
        except Exception as exc:
            # a template that rejects this conversation is the client's input, not a server crash
            raise ApiError(
                400, f"The chat template cannot render these messages: {exc}", "invalid_messages"
            ) from exc

    # -- generation --------------------------------------------------------------------------------

    def generate(self, prep: PreparedChat, on_token: Callable[[int], None] | None = None) -> Completion:
        """Blocking: one request through the engine (the engine batches concurrent callers)."""
        request = GenerationRequest(prompt_ids=prep.prompt_ids, sampling=prep.sampling, weights="policy")
        callback = (lambda _index, token_id: on_token(token_id)) if on_token else None
        return self.engine.generate([request], on_token=callback)[0]

    def stream_parser(self, prep: PreparedChat) -> StreamDecoder:
        return StreamDecoder(
            self.tokenizer, prep.sampling.stop, start_in_reasoning=self._prompt_opens_think(prep)
        )

    def _prompt_opens_think(self, prep: PreparedChat) -> bool:
        """Qwen3-style templates may open ``<think>`` in the generation prompt: the stream starts in reasoning."""
        tail = self.tokenizer.decode(prep.prompt_ids[-8:], skip_special_tokens=False).rstrip()
        return tail.endswith("<think>")

    def finish(self, prep: PreparedChat, completion: Completion, streamed: dict | None = None) -> TurnResult:
        """Blocking: parse the completion, compute requested logprobs and store the turn (before replying).

        ``streamed``: the message a stream already sent (``StreamDecoder.message()``), stored as sent.
        """
        if streamed is None:
            from openclaw_trl.chat import decode_completion

            streamed = decode_completion(self.tokenizer, completion.token_ids)
            if prep.sampling.stop and streamed.get("content"):
                streamed["content"] = _StopTrimmer(prep.sampling.stop).feed(streamed["content"], final=True)
        parsed = _as_message(streamed)
        finish = completion.finish_reason
        if parsed.get("tool_calls") and finish == "stop":
            finish = "tool_calls"
        logprobs = self._logprobs(prep, completion) if prep.logprobs else None
        turn_id = self.record(prep, completion, parsed)
        return TurnResult(completion, parsed, finish, turn_id, completion.policy_version, logprobs)

    def record(self, prep: PreparedChat, completion: Completion, message: dict) -> int:
        """Commit the turn through the collector (before the reply goes out); returns its id.

        The stored temperature is the one the sampling log-probs are at (1.0 for greedy requests, see
        ``engines/base.py``), which is what the trainer compares with its own to reuse or recompute them.
        ``message`` is the assistant message exactly as the client received it.
        """
        return self.collector.record_turn(
            prep.ctx,
            prep.prompt_ids,
            completion,
            prep.sampling.logprob_temperature,
            completion_text=self.tokenizer.decode(list(completion.token_ids), skip_special_tokens=False),
            response_message=message,
        )

    def abort(self, prep: PreparedChat) -> None:
        """Generation failed or the client left before the turn was stored (honours ``session_done``)."""
        try:
            self.collector.abort(prep.ctx)
        except Exception:  # bookkeeping of a failed request must not mask the original error
            logger.exception("collector.abort failed")

    def _logprobs(self, prep: PreparedChat, completion: Completion) -> dict:
        """OpenAI ``choices[].logprobs``: the sampling log-probs, plus the policy's top-K when asked."""
        ids = completion.token_ids
        top_ids = top_lps = None
        if prep.top_logprobs and ids:
            scores = self.engine.score(
                [prep.prompt_ids],
                [ids],
                weights="policy",
                top_k=prep.top_logprobs,
                temperature=prep.sampling.logprob_temperature,
            )
            top_ids, top_lps = scores.topk_ids[0], scores.topk_logprobs[0]
        content = []
        for t, (tid, lp) in enumerate(zip(ids, completion.logprobs, strict=False)):
            tok = self.tokenizer.decode([tid])
            entry = {"token": tok, "logprob": _lp(lp), "bytes": list(tok.encode()), "top_logprobs": []}
            if top_ids is not None:
                entry["top_logprobs"] = [
                    {
                        "token": (s := self.tokenizer.decode([i])),
                        "logprob": _lp(v),
                        "bytes": list(s.encode()),
                    }
                    for i, v in zip(top_ids[t], top_lps[t], strict=False)
                ]
            content.append(entry)
        return {"content": content, "refusal": None}

    # -- feedback, sessions, status ------------------------------------------------------------------

    def feedback(self, turn_id, rating: int | None, text: str | None = None):
        """👍/👎/correction on a turn = its next state; ``ApiError`` 400/404 for bad or unknown turns."""
        from openclaw_trl.sessions import FeedbackError, UnknownTurnError

        try:
            return self.collector.feedback(turn_id, rating, text)
        except UnknownTurnError as exc:
            raise ApiError(404, str(exc), "turn_not_found", "turn_id") from None
        except FeedbackError as exc:
            raise ApiError(400, str(exc), "invalid_value") from None

    def end_session(self, session_key: str) -> bool:
        return self.collector.end_session(session_key)

    def set_private(self, session_key: str, private: bool) -> None:
        self.collector.set_private(session_key, private)

    def status(self) -> dict:
        out = dict(self._status() if self._status else {})
        out.setdefault("policy_version", getattr(self.engine, "policy_version", 0))
        if "samples_waiting" not in out and hasattr(self.store, "count_waiting"):
            out["samples_waiting"] = self.store.count_waiting()
        return out

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)

    # -- a blocking token stream (the UI's path; the API uses ``stream_sse``) ----------------------

    def iter_stream(self, prep: PreparedChat) -> Iterator[tuple[str, Any]]:
        """Yields ``("delta", delta_dict)`` while tokens arrive, then ``("done", TurnResult)``."""
        tokens: queue.Queue = queue.Queue()
        future = self.executor.submit(self.generate, prep, tokens.put)
        future.add_done_callback(lambda _f: tokens.put(None))
        decoder = self.stream_parser(prep)
        done = False
        try:
            while (tid := tokens.get()) is not None:
                for delta in decoder.feed(tid):
                    yield "delta", delta
            completion = future.result()
            for delta in decoder.finish():
                yield "delta", delta
            result = self.finish(prep, completion, decoder.message())
            done = True
            yield "done", result
        finally:
            if not done:
                self.abort(prep)


def _lp(value) -> float:
    """A log-prob for JSON: -inf becomes -9999.0 (OpenAI's convention), NaN too."""
    value = float(value)
    return value if math.isfinite(value) else -9999.0


def _context_limit(engine, configured: int) -> int:
    """``max_context_len``, lowered to what the model supports (its ``max_position_embeddings``)."""
    model_max = getattr(engine, "max_model_len", None)
    if model_max is None and getattr(engine, "model_path", None):
        try:
            from transformers import AutoConfig

            model_max = getattr(
                AutoConfig.from_pretrained(engine.model_path), "max_position_embeddings", None
            )
        except Exception:  # an engine without a readable config keeps the configured limit
            model_max = None
    if isinstance(model_max, int) and 0 < model_max < configured:
        logger.info("max_context_len %d lowered to the model's %d positions", configured, model_max)
        return model_max
    return configured


def _as_message(parsed) -> dict:
    """``decode_completion``'s result (dict or object) -> an OpenAI assistant message dict."""
    get = parsed.get if isinstance(parsed, dict) else lambda k, d=None: getattr(parsed, k, d)
    content = get("content")
    msg: dict[str, Any] = {
        "role": "assistant",
        "content": content if content or get("tool_calls") else content or "",
    }
    if get("reasoning_content"):
        msg["reasoning_content"] = get("reasoning_content")
    if get("tool_calls"):
        msg["tool_calls"] = list(get("tool_calls"))
    return msg


class StreamDecoder:
    """Token ids -> OpenAI deltas (``content`` / ``reasoning_content`` / ``tool_calls`` with ``index``).

    Wraps ``openclaw_trl.chat``'s incremental decoder + parser, applies the ``stop`` trimming to content
    and accumulates what was streamed: the stored message is exactly what the client saw (tool-call ids
    included, so the client's echo of them matches the stored turn).
    """

    def __init__(self, tokenizer, stops: list[str], start_in_reasoning: bool = False):
        from openclaw_trl.chat import IncrementalDecoder, StreamParser, tokenizer_end_tokens

        self.text = IncrementalDecoder(tokenizer)
        self.parser = StreamParser(
            start_in_reasoning=start_in_reasoning, end_tokens=tokenizer_end_tokens(tokenizer)
        )
        self.trim = _StopTrimmer(stops) if stops else None
        self.content, self.reasoning, self.tool_calls = [], [], []

    def _post(self, deltas: list[dict], final: bool = False) -> list[dict]:
        out = []
        for d in deltas:
            if self.trim is not None and d.get("content") is not None:
                d = {k: v for k, v in d.items() if k != "content"} | {"content": self.trim.feed(d["content"])}
                if not d["content"]:
                    del d["content"]
            if d:
                out.append(d)
        if final and self.trim is not None and (rest := self.trim.feed("", final=True)):
            out.append({"content": rest})
        for d in out:
            self.content.append(d.get("content") or "")
            self.reasoning.append(d.get("reasoning_content") or "")
            self.tool_calls.extend(
                {k: v for k, v in c.items() if k != "index"} for c in d.get("tool_calls") or []
            )
        return out

    def feed(self, token_id: int) -> list[dict]:
        return self._post(self.parser.feed(self.text.push(token_id)))

    def finish(self) -> list[dict]:
        # text still held back by the decoder (e.g. an incomplete UTF-8 sequence) goes out before the end
        return self._post(self.parser.feed(self.text.flush()) + self.parser.finish(), final=True)

    def message(self) -> dict:
        """The assistant message the stream spelled out (``decode_completion``'s shape)."""
        content, reasoning = "".join(self.content), "".join(self.reasoning)
        return {
            "content": content if content or not self.tool_calls else None,
            "reasoning_content": reasoning or None,
            "tool_calls": list(self.tool_calls),
        }


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


async def _json_body(request, limit: int) -> Any:
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        raise ApiError(413, f"Request body larger than {limit} bytes", "request_too_large")
    raw = await request.body()
    if len(raw) > limit:
        raise ApiError(413, f"Request body larger than {limit} bytes", "request_too_large")
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise ApiError(
            400, f"We could not parse the JSON body of your request: {exc}", "invalid_json"
        ) from None


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
        return _error_response(exc)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_request, exc: StarletteHTTPException):
        return _error_response(ApiError(exc.status_code, str(exc.detail), "http_error"))

    @app.exception_handler(Exception)
    async def _unexpected(_request, exc: Exception):
        logger.exception("unhandled error")
        return _error_response(ApiError(500, f"internal error: {type(exc).__name__}", "server_error"))

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
        payload = await _json_body(request, settings.max_body_bytes)
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
        payload = await _json_body(request, settings.max_body_bytes)
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

        from openclaw_trl.ui import build_ui

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

        self.config = uvicorn.Config(app, host=host, port=port, log_level=log_level, lifespan="on", ws="none")
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

    uvicorn.run(app, host=host, port=port, log_level=log_level, ws="none")
