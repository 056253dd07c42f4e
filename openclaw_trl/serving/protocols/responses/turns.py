"""``POST /v1/responses`` (the OpenAI Responses API) on the chat service: same sessions, store and learning
as ``/v1/chat/completions``.

A Responses request becomes the ``TurnRequest`` it means (``schema``, ``convert``) and runs through
``ChatService`` unchanged: validation and limits, the chat template, the session (``X-Session-Id`` header,
``session_id`` or ``user``), the turn committed before the reply, its next state from the next request. Each
response has a fresh id ``resp_<hex>``, recorded in the store with the response object in the transaction that
stores its turn (before the reply or the final stream event leaves: a turn is never stored without its id), so:

* ``previous_response_id`` continues that turn's conversation: the stored prompt messages and the assistant
  message as sent, then the new input items. The turn's session carries on (a request naming another session
  id is refused); the new input is the turn's next state, exactly as the next chat request would be.
  ``instructions`` are part of that stored conversation: omit them or repeat them (other instructions are a
  400: they would rewrite the history the turn was sampled from). An unknown id is a 404.
* ``GET /v1/responses/{id}`` returns the stored response object; responses are never deleted (``DELETE`` is
  refused): they name turns the model learns from.
* ``store: false`` (OpenClaw sends it with every request): the response is served and its turn stored and
  learned from as any other, but the response is not kept under its id (``GET`` and ``previous_response_id``
  answer 404). With ``ServerSettings.learn_unstored_responses`` off, such a request's conversation is flagged
  private instead (stored, never learned from).

Streaming sends OpenAI's events in order: ``response.created``, ``response.in_progress``, then per output item
``response.output_item.added`` / ``response.content_part.added`` / ``response.output_text.delta`` (or
``response.reasoning_text.delta``) ... ``.done`` events, ``response.function_call_arguments.delta/.done`` for
a tool call (emitted whole once the model closes it), and ``response.completed`` (``response.incomplete`` when
``max_output_tokens`` cut the turn; ``response.failed`` when generation failed). A client that leaves before
the turn is being stored stores nothing, as with chat completions; one that leaves while it is being stored
leaves all of it stored (the turn, its Best-of-N group and its response id), never a part.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

from openclaw_trl.serving.errors import ApiError
from openclaw_trl.serving.pipeline.chat_service import ChatService
from openclaw_trl.serving.pipeline.prepare import PreparedChat
from openclaw_trl.serving.pipeline.recording import TurnResult, openclaw_meta
from openclaw_trl.serving.protocols.responses.convert import turn_request
from openclaw_trl.serving.protocols.responses.models import ResponseEcho, ResponseObject, ResponseUsage
from openclaw_trl.serving.protocols.responses.output import ResponseEvents, output_items, sse_event
from openclaw_trl.serving.protocols.responses.schema import (
    ResponsesRequest,
    input_messages,
    parse_request,
)

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PreparedResponse:
    """A validated Responses request: the chat request it became, its response id and echoed fields."""

    chat: PreparedChat
    response_id: str
    echo: ResponseEcho
    stream: bool

    def on_recorded(self, service: ChatService):
        """What the chat pipeline calls in the turn's store transaction: ``_record`` for this response."""
        return lambda result: _record(service, self, result)


def prepare(service: ChatService, payload, headers) -> PreparedResponse:
    """Validate a Responses body and open its turn (``ChatService.prepare``); raises ``ApiError`` (4xx)."""
    request = parse_request(payload)
    history, session_key, instructions = _continuation(service, request, headers, payload)
    messages = history + input_messages(request.input, history)
    if instructions is not None and not history:
        messages.insert(0, {"role": "system", "content": instructions})
    chat = service.prepare(turn_request(service.settings, request, payload, headers, messages, session_key))
    echo = ResponseEcho(
        model=chat.model,
        instructions=instructions,
        tools=request.tools or [],
        tool_choice=request.tool_choice or "auto",
        temperature=chat.sampling.temperature,
        top_p=chat.sampling.top_p,
        max_output_tokens=request.max_output_tokens,
        previous_response_id=request.previous_response_id,
        metadata=request.metadata or {},
        user=request.user,
        store=request.store,
    )
    return PreparedResponse(chat, f"resp_{uuid.uuid4().hex}", echo, request.stream)


def _continuation(
    service: ChatService, request: ResponsesRequest, headers, payload: dict
) -> tuple[list[dict], str | None, str | None]:
    """``(history, session id, instructions)`` that ``previous_response_id`` continues (empty without it)."""
    if request.previous_response_id is None:
        return [], None, request.instructions
    stored = service.store.responses.get_response(request.previous_response_id)
    turn = service.store.conversations.get_turn(stored.turn_id) if stored is not None else None
    if turn is None:
        raise ApiError(
            404,
            f"Previous response with id '{request.previous_response_id}' not found.",
            "previous_response_not_found",
            "previous_response_id",
        )
    instructions = stored.body.get("instructions")
    if request.instructions is not None and request.instructions != instructions:
        raise ApiError(
            400,
            "'instructions' differ from those of the conversation previous_response_id continues: omit them "
            "(the conversation keeps its own) or start a new conversation without previous_response_id.",
            "invalid_value",
            "instructions",
        )
    from openclaw_trl.sessions import request_session_key

    session = service.store.conversations.get_session(turn.session_id)
    named = request_session_key(headers, payload)
    if named is not None and named != session.key:
        where = f"session {session.key!r}" if session.key else "an anonymous conversation"
        raise ApiError(
            400,
            f"previous_response_id belongs to {where}, but this request names session {named!r}: drop the "
            "session id (the conversation keeps its session) or previous_response_id.",
            "invalid_session",
            "previous_response_id",
        )
    return [*turn.prompt_messages, dict(turn.response_message or {})], session.key, instructions


# --------------------------------------------------------------------------------------------------
# One response: generate, store the turn, record the id, answer
# --------------------------------------------------------------------------------------------------


async def respond(service: ChatService, job: PreparedResponse) -> tuple[ResponseObject, TurnResult]:
    """The non-streaming response object (its turn and id stored) and the turn it is."""
    result = await service.complete(job.chat, job.on_recorded(service))
    return result.recorded, result


def _record(service: ChatService, job: PreparedResponse, result: TurnResult) -> ResponseObject:
    """Blocking: the final response object, recorded under its id in its turn's store transaction
    (the chat pipeline's ``on_recorded``), so a turn is never stored without the id that names it; it comes
    back as ``TurnResult.recorded``."""
    status = "incomplete" if result.finish_reason == "length" else "completed"
    ids = result.generation.token_ids
    usage = ResponseUsage.of(
        len(job.chat.prompt_ids), len(ids), reasoning_tokens(service.tokenizer, ids, result.message)
    )
    body = ResponseObject.of(
        job.response_id,
        job.chat.created,
        job.echo,
        status,
        output_items(result.message, job.response_id, status),
        usage,
        completed_at=int(time.time()),
        openclaw=openclaw_meta(job.chat, result),
    )
    if job.echo.store:
        service.store.responses.add_response(job.response_id, result.turn_id, body.model_dump())
    return body


def reasoning_tokens(tokenizer, completion_ids, message: dict) -> int:
    """Completion tokens spent reasoning: up to and including ``</think>``, all of them when the turn was cut
    off while reasoning; 0 without reasoning."""
    if not message.get("reasoning_content"):
        return 0
    close = tokenizer.convert_tokens_to_ids("</think>")
    ids = list(completion_ids)
    return ids.index(close) + 1 if isinstance(close, int) and close in ids else len(ids)


def by_id(service: ChatService, response_id: str, method: str) -> dict:
    """``GET``: the stored response object (404 when unknown); ``DELETE`` is refused."""
    if method == "DELETE":
        raise ApiError(
            400,
            "Responses are not deleted: they name turns the model learns from. Send X-Session-Private: true "
            "for conversations it must not learn from.",
            "unsupported_operation",
        )
    stored = service.store.responses.get_response(response_id)
    if stored is None:
        raise ApiError(404, f"Response with id '{response_id[:128]}' not found.", "response_not_found")
    return stored.body


# --------------------------------------------------------------------------------------------------
# Streaming
# --------------------------------------------------------------------------------------------------


async def stream_events(service: ChatService, job: PreparedResponse) -> AsyncIterator[bytes]:
    """The Responses events of one turn, each sent as soon as its tokens are sampled (module docstring)."""
    events = ResponseEvents(job.response_id, job.chat.created, job.echo)
    for event in events.start():
        yield sse_event(event)
    try:
        async with service.stream(job.chat, job.on_recorded(service)) as turn:
            async for delta in turn:
                for event in events.delta(delta):
                    yield sse_event(event)
        for event in events.finish(turn.result.recorded):
            yield sse_event(event)
    except ApiError as err:
        yield sse_event(events.failed(err))
    except Exception as exc:  # the status line is sent already: report the error in-band
        logger.exception("streaming generation failed")
        yield sse_event(events.failed(ApiError(500, f"generation failed: {exc}", "server_error")))
