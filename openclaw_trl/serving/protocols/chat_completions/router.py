"""``POST /v1/chat/completions``: a whole reply (``ChatCompletion``) or real token streaming over SSE
(``ChatCompletionChunk``s), both with the ``openclaw`` object of the stored turn (the package docstring
describes the wire format)."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from openclaw_trl.serving.errors import ApiError
from openclaw_trl.serving.http.auth import AUTHORIZED, service_of
from openclaw_trl.serving.http.body import json_body
from openclaw_trl.serving.http.replies import streaming_response, turn_headers
from openclaw_trl.serving.pipeline.chat_service import ChatService
from openclaw_trl.serving.pipeline.prepare import PreparedChat
from openclaw_trl.serving.pipeline.recording import TurnResult, openclaw_meta
from openclaw_trl.serving.protocols.chat_completions.convert import turn_request
from openclaw_trl.serving.protocols.chat_completions.replies import (
    AssistantMessage,
    ChatCompletion,
    ChatCompletionChunk,
    Choice,
    ChoiceLogprobs,
    ChunkChoice,
    OpenClawMeta,
    Reply,
    Usage,
    fingerprint,
)
from openclaw_trl.serving.protocols.openai_errors import error_body

logger = logging.getLogger(__name__)

router = APIRouter()


@router.post("/v1/chat/completions", dependencies=AUTHORIZED)
async def chat_completions(request: Request):
    service = service_of(request)
    payload = await json_body(request, service.settings.limits)
    prep = await asyncio.to_thread(prepare, service, payload, request.headers)
    reply_id = completion_id()
    if prep.stream:
        return streaming_response(prep, stream_sse(service, prep, reply_id))
    result = await service.complete(prep)
    body = completion_body(prep, result, reply_id)
    return JSONResponse(body.model_dump(), headers=turn_headers(prep, result))


def prepare(service: ChatService, payload, headers) -> PreparedChat:
    """Blocking: the body as a ``TurnRequest``, prepared by the pipeline; raises ``ApiError`` (4xx)."""
    return service.prepare(turn_request(payload, headers, service.settings))


def completion_id() -> str:
    """A fresh ``chatcmpl-<hex>`` id: the reply's, shared by every chunk of a stream."""
    return f"chatcmpl-{uuid.uuid4().hex[:24]}"


def completion_body(prep: PreparedChat, result: TurnResult, reply_id: str) -> ChatCompletion:
    """The non-streaming ``chat.completion`` object."""
    choice = Choice(
        message=Reply.of(result.message), logprobs=result.logprobs, finish_reason=result.finish_reason
    )
    return ChatCompletion(
        id=reply_id,
        created=prep.created,
        model=prep.model,
        system_fingerprint=fingerprint(result.policy_version),
        choices=[choice],
        usage=Usage.of(len(prep.prompt_ids), len(result.generation.token_ids)),
        openclaw=openclaw_meta(prep, result),
    )


def _chunk(
    prep: PreparedChat,
    reply_id: str,
    version: int,
    delta: dict,
    finish: str | None = None,
    logprobs: ChoiceLogprobs | None = None,
    openclaw: OpenClawMeta | None = None,
) -> ChatCompletionChunk:
    """One ``chat.completion.chunk`` with a single choice."""
    choice = ChunkChoice(delta=AssistantMessage.of(delta), logprobs=logprobs, finish_reason=finish)
    return ChatCompletionChunk(
        id=reply_id,
        created=prep.created,
        model=prep.model,
        system_fingerprint=fingerprint(version),
        choices=[choice],
        openclaw=openclaw,
    )


def _sse(obj: ChatCompletionChunk | dict) -> bytes:
    data = obj.model_dump() if isinstance(obj, ChatCompletionChunk) else obj
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


async def stream_sse(service: ChatService, prep: PreparedChat, reply_id: str) -> AsyncIterator[bytes]:
    """Real token streaming: each delta leaves as a chunk as soon as its tokens are sampled.

    The turn is stored before the final chunk (the one with ``finish_reason``) is sent. A client that
    disconnects mid-stream gets no turn stored: it never saw the reply its next message would judge.
    """
    version = getattr(service.engine, "policy_version", 0)
    try:
        async with service.stream(prep) as turn:
            yield _sse(_chunk(prep, reply_id, version, {"role": "assistant", "content": ""}))
            async for delta in turn:
                yield _sse(_chunk(prep, reply_id, version, delta))
        for chunk in _final_chunks(prep, reply_id, turn.result):
            yield _sse(chunk)
    except ApiError as err:
        yield _sse(error_body(err))
    except Exception as exc:  # the status line is sent already: report the error in-band
        logger.exception("streaming generation failed")
        yield _sse(error_body(ApiError(500, f"generation failed: {exc}", "server_error")))
    yield b"data: [DONE]\n\n"


def _final_chunks(prep: PreparedChat, reply_id: str, result: TurnResult) -> list[ChatCompletionChunk]:
    """After the turn is stored: the log-probs (when asked), the ``finish_reason`` chunk, the usage (when asked)."""
    version = result.policy_version
    chunks = []
    if result.logprobs is not None:  # the engine streams ids only: log-probs follow in one chunk
        chunks.append(_chunk(prep, reply_id, version, {}, logprobs=result.logprobs))
    chunks.append(
        _chunk(prep, reply_id, version, {}, result.finish_reason, openclaw=openclaw_meta(prep, result))
    )
    if prep.include_usage:
        usage = Usage.of(len(prep.prompt_ids), len(result.generation.token_ids))
        chunks.append(_chunk(prep, reply_id, version, {}).model_copy(update={"choices": [], "usage": usage}))
    return chunks
