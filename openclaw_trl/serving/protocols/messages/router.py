"""``POST /v1/messages`` and ``POST /v1/messages/count_tokens`` on the chat service: the one module of the
Messages API that touches the chat pipeline.

A Messages request becomes the ``TurnRequest`` it means (``schema``, ``convert``, ``turn``) and runs through
``ChatService`` unchanged: the chat template, sessions and side-call recognition, per-user keys, the turn stored
before the reply (or the stream's ``message_delta``) leaves. The key is read from ``x-api-key`` (else
``Authorization: Bearer``); every refusal on these paths is answered in Anthropic's error shape (the protocol's
``errors.error_response``).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from openclaw_trl.serving.errors import ApiError
from openclaw_trl.serving.http.auth import BEARER, authorized, header_key, service_of
from openclaw_trl.serving.http.body import json_body
from openclaw_trl.serving.http.replies import streaming_response, turn_headers
from openclaw_trl.serving.pipeline.chat_service import ChatService
from openclaw_trl.serving.pipeline.prepare import PreparedChat
from openclaw_trl.serving.pipeline.recording import TurnResult, openclaw_meta
from openclaw_trl.serving.pipeline.turn import served_model
from openclaw_trl.serving.protocols.messages.reply import (
    MessageEvents,
    MessageUsage,
    message_body,
    stop_reason,
)
from openclaw_trl.serving.protocols.messages.schema import (
    ANTHROPIC_VERSION,
    VERSION_PATTERN,
    parse_request,
)
from openclaw_trl.serving.protocols.messages.turn import conversation, turn_request

logger = logging.getLogger(__name__)

router = APIRouter()


async def _check_version(request: Request) -> None:
    """Dependency: ``anthropic-version`` is absent, or a date from ``2023-06-01`` on (later versions keep its
    format)."""
    version = request.headers.get("anthropic-version")
    if version is None:
        return
    version = version.strip()
    if not VERSION_PATTERN.fullmatch(version) or version < ANTHROPIC_VERSION:
        raise ApiError(
            400,
            f"anthropic-version: {version[:64]!r} is not served; send 'anthropic-version: {ANTHROPIC_VERSION}'",
            "invalid_value",
        )


AUTHORIZED = [*authorized(header_key("x-api-key"), BEARER), Depends(_check_version)]
"""The key from ``x-api-key`` (else ``Authorization: Bearer``), checked as on every route; the version header."""


@router.post("/v1/messages", dependencies=AUTHORIZED)
async def create_message(request: Request):
    service = service_of(request)
    payload = await json_body(request, service.settings.limits)
    job = await asyncio.to_thread(prepare, service, payload, request.headers)
    if job.stream:
        return streaming_response(job.chat, stream_events(service, job))
    result = await service.complete(job.chat)
    body = message_body(
        job.message_id,
        job.chat.model,
        result.message,
        job.stop_reason(result),
        _usage(job.chat, result),
        openclaw_meta(job.chat, result),
    )
    return JSONResponse(body.model_dump(), headers=turn_headers(job.chat, result))


@router.post("/v1/messages/count_tokens", dependencies=AUTHORIZED)
async def count_tokens(request: Request):
    service = service_of(request)
    payload = await json_body(request, service.settings.limits)
    return JSONResponse({"input_tokens": await asyncio.to_thread(_count, service, payload)})


# --------------------------------------------------------------------------------------------------
# A Messages request on the chat pipeline
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PreparedMessage:
    """A validated Messages request: the chat request it became (its turn opened), its message id."""

    chat: PreparedChat
    message_id: str
    stream: bool

    def stop_reason(self, result: TurnResult):
        return stop_reason(result.finish_reason, result.generation.text, self.chat.sampling.stop)


def prepare(service: ChatService, payload, headers) -> PreparedMessage:
    """Blocking: validate a Messages body and open its turn (``ChatService.prepare``); raises ``ApiError``."""
    request = parse_request(payload)
    chat = service.prepare(turn_request(service.settings, request, payload, headers))
    return PreparedMessage(chat, f"msg_{uuid.uuid4().hex[:24]}", request.stream)


def _count(service: ChatService, payload) -> int:
    """Blocking: the prompt tokens of a ``count_tokens`` body (the chat template rendered as for a reply)."""
    from openclaw_trl.chat import render_prompt_ids

    request = parse_request(payload, count_only=True)
    chat = conversation(service.settings, request)
    served_model(service.settings, request.model)
    tools = None if chat.tool_choice == "none" else chat.tools
    try:
        return len(render_prompt_ids(service.tokenizer, chat.messages, tools))
    except Exception as exc:
        raise ApiError(
            400, f"The chat template cannot render these messages: {exc}", "invalid_messages"
        ) from exc


def _usage(chat: PreparedChat, result: TurnResult) -> MessageUsage:
    return MessageUsage(input_tokens=len(chat.prompt_ids), output_tokens=len(result.generation.token_ids))


async def stream_events(service: ChatService, job: PreparedMessage) -> AsyncIterator[bytes]:
    """The events of one streamed turn, each sent as soon as its tokens are sampled (``MessageEvents``). A client
    that leaves before the turn is stored stores nothing, as with chat completions."""
    events = MessageEvents(job.message_id, job.chat.model, len(job.chat.prompt_ids))
    for event in events.start():
        yield event
    try:
        async with service.stream(job.chat) as turn:
            async for delta in turn:
                for event in events.delta(delta):
                    yield event
        result = turn.result
        meta = openclaw_meta(job.chat, result)
        for event in events.finish(job.stop_reason(result), len(result.generation.token_ids), meta):
            yield event
    except ApiError as err:
        yield events.error(err)
    except Exception as exc:  # the status line is sent already: report the error in-band
        logger.exception("streaming generation failed")
        yield events.error(ApiError(500, f"generation failed: {exc}", "server_error"))
