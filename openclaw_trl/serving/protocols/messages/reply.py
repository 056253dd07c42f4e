"""The reply of ``POST /v1/messages``: the ``message`` object (``message_body``) and its stream of server-sent
events (``MessageEvents``), from the stored turn's assistant message.

Content blocks, in order: ``thinking`` (the reasoning part of the chat template, ``signature`` empty), ``text``
(when the reply has text), ``tool_use`` (``id``, ``name``, ``input`` parsed from the call's JSON arguments).
``stop_reason``: ``max_tokens`` (the turn was cut), ``tool_use`` (it ends with tool calls), ``stop_sequence``
(one of ``stop_sequences`` ended it: ``stop_sequence`` names it; its text is not returned), else ``end_turn``.
Every reply also carries the stored turn as ``openclaw`` (``turn_id``, ``session_id``, ``policy_version``...):
in the message object, and in a stream's ``message_delta`` event (the turn is stored before it is sent).
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel

from openclaw_trl.serving.errors import ApiError
from openclaw_trl.serving.pipeline.results import OpenClawMeta
from openclaw_trl.serving.protocols.messages.errors import error_body

StopReason = Literal["end_turn", "max_tokens", "stop_sequence", "tool_use"]


class MessageUsage(BaseModel):
    """Prompt tokens (the rendered chat template) and reply tokens; nothing is cached."""

    input_tokens: int
    output_tokens: int
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0


class MessageObject(BaseModel):
    """The ``message`` object of a reply."""

    id: str
    type: Literal["message"] = "message"
    role: Literal["assistant"] = "assistant"
    model: str
    content: list[dict[str, Any]]
    stop_reason: StopReason | None
    stop_sequence: str | None
    usage: MessageUsage
    openclaw: OpenClawMeta | None = None


def tool_input(arguments) -> dict:
    """A tool call's arguments as the ``input`` object (arguments that are no JSON object: ``{"arguments": ...}``,
    so nothing the model wrote is lost)."""
    if isinstance(arguments, dict):
        return arguments
    try:
        value = json.loads(arguments or "{}")
    except (ValueError, TypeError, RecursionError):
        value = arguments
    return value if isinstance(value, dict) else {"arguments": value}


def content_blocks(message: dict) -> list[dict]:
    """The content blocks of an assistant message (module docstring)."""
    blocks: list[dict] = []
    if message.get("reasoning_content"):
        blocks.append({"type": "thinking", "thinking": message["reasoning_content"], "signature": ""})
    if message.get("content"):
        blocks.append({"type": "text", "text": message["content"]})
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        blocks.append(
            {
                "type": "tool_use",
                "id": call.get("id"),
                "name": function.get("name"),
                "input": tool_input(function.get("arguments")),
            }
        )
    return blocks


def stop_reason(finish_reason: str, raw_text: str, stops: list[str]) -> tuple[StopReason, str | None]:
    """``(stop_reason, stop_sequence)`` of a turn from its finish reason and its raw decoded text (which keeps
    the stop text the reply leaves out)."""
    if finish_reason == "length":
        return "max_tokens", None
    if finish_reason == "tool_calls":
        return "tool_use", None
    found = [(raw_text.find(s), s) for s in stops if s in raw_text]
    if found:
        return "stop_sequence", min(found)[1]
    return "end_turn", None


def message_body(
    message_id: str,
    model: str,
    message: dict,
    reason: tuple[StopReason, str | None],
    usage: MessageUsage,
    openclaw: OpenClawMeta | None,
) -> MessageObject:
    """The whole ``message`` object of a stored turn."""
    return MessageObject(
        id=message_id,
        model=model,
        content=content_blocks(message),
        stop_reason=reason[0],
        stop_sequence=reason[1],
        usage=usage,
        openclaw=openclaw,
    )


def sse(event: str, data: dict) -> bytes:
    """One server-sent event with its ``event:`` line."""
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


class MessageEvents:
    """The events of one streamed message: ``message_start`` and a ``ping``, then per content block
    ``content_block_start`` / ``content_block_delta`` (``thinking_delta``, ``text_delta``, ``input_json_delta``)
    / ``content_block_stop`` as the tokens are sampled (a tool call arrives whole once the model closes it),
    then ``message_delta`` (``stop_reason``, ``stop_sequence``, usage and ``openclaw``) and ``message_stop``."""

    def __init__(self, message_id: str, model: str, input_tokens: int):
        self.message_id, self.model, self.input_tokens = message_id, model, input_tokens
        self.index = -1  # the open block's index (-1: none yet)
        self.open: str | None = None  # the open block's type

    def start(self) -> list[bytes]:
        usage = MessageUsage(input_tokens=self.input_tokens, output_tokens=0)
        empty = MessageObject(
            id=self.message_id,
            model=self.model,
            content=[],
            stop_reason=None,
            stop_sequence=None,
            usage=usage,
        )
        message = empty.model_dump(exclude={"openclaw"})
        return [
            sse("message_start", {"type": "message_start", "message": message}),
            sse("ping", {"type": "ping"}),
        ]

    def _begin(self, block: dict) -> list[bytes]:
        out = self._close()
        self.index += 1
        self.open = block["type"]
        out.append(
            sse(
                "content_block_start",
                {"type": "content_block_start", "index": self.index, "content_block": block},
            )
        )
        return out

    def _close(self) -> list[bytes]:
        if self.open is None:
            return []
        self.open = None
        return [sse("content_block_stop", {"type": "content_block_stop", "index": self.index})]

    def _delta(self, delta: dict) -> bytes:
        return sse(
            "content_block_delta", {"type": "content_block_delta", "index": self.index, "delta": delta}
        )

    def delta(self, delta: dict) -> list[bytes]:
        """The events of one chat delta (reasoning, content or whole tool calls)."""
        out: list[bytes] = []
        if delta.get("reasoning_content"):
            if self.open != "thinking":
                out += self._begin({"type": "thinking", "thinking": "", "signature": ""})
            out.append(self._delta({"type": "thinking_delta", "thinking": delta["reasoning_content"]}))
        if delta.get("content"):
            if self.open != "text":
                out += self._begin({"type": "text", "text": ""})
            out.append(self._delta({"type": "text_delta", "text": delta["content"]}))
        for call in delta.get("tool_calls") or []:
            function = call.get("function") or {}
            out += self._begin(
                {"type": "tool_use", "id": call.get("id"), "name": function.get("name"), "input": {}}
            )
            arguments = json.dumps(tool_input(function.get("arguments")), ensure_ascii=False)
            out.append(self._delta({"type": "input_json_delta", "partial_json": arguments}))
            out += self._close()
        return out

    def finish(
        self, reason: tuple[StopReason, str | None], output_tokens: int, openclaw: OpenClawMeta
    ) -> list[bytes]:
        """The closing events, once the turn is stored."""
        data = {
            "type": "message_delta",
            "delta": {"stop_reason": reason[0], "stop_sequence": reason[1]},
            "usage": {"output_tokens": output_tokens},
            "openclaw": openclaw.model_dump(),
        }
        return [*self._close(), sse("message_delta", data), sse("message_stop", {"type": "message_stop"})]

    @staticmethod
    def error(err: ApiError) -> bytes:
        """An error after the status line has left (the stream ends with it)."""
        return sse("error", error_body(err))
