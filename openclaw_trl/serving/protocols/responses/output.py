"""The OpenAI Responses output: the output items of a turn (``models``) and the stream events of
one response (``ResponseEvents``).

Output items of a turn: a ``reasoning`` item (when the model reasoned; its text in ``content`` as
``reasoning_text``, ``summary`` empty), a ``message`` item with one ``output_text`` part (left out when the
turn is only tool calls), then one ``function_call`` item per tool call (``call_id`` = the chat tool-call id).
Their ids are derived from the response id (``rs_``/``msg_``/``fc_`` + its suffix), so a stored response and
its stream name the same items.
"""

from __future__ import annotations

import json

from pydantic import BaseModel

from openclaw_trl.serving.errors import ApiError
from openclaw_trl.serving.protocols.responses.models import (
    FunctionCallItem,
    MessageItem,
    OutputItem,
    OutputText,
    ReasoningItem,
    ReasoningText,
    ResponseEcho,
    ResponseError,
    ResponseObject,
)


def output_items(message: dict, response_id: str, status: str = "completed") -> list[OutputItem]:
    """The output items of an assistant message (module docstring): reasoning, message, function calls."""
    suffix = response_id.removeprefix("resp_")
    items: list[OutputItem] = []
    if message.get("reasoning_content"):
        items.append(reasoning_item(f"rs_{suffix}", message["reasoning_content"], status))
    calls = message.get("tool_calls") or []
    if message.get("content") or not calls:
        items.append(message_item(f"msg_{suffix}", message.get("content") or "", status))
    items += [function_call_item(f"fc_{suffix}_{j}", call, "completed") for j, call in enumerate(calls)]
    return items


def reasoning_item(item_id: str, text: str | None, status: str) -> ReasoningItem:
    content = [ReasoningText(text=text)] if text is not None else []
    return ReasoningItem(id=item_id, content=content, status=status)


def message_item(item_id: str, text: str | None, status: str) -> MessageItem:
    content = [OutputText(text=text)] if text is not None else []
    return MessageItem(id=item_id, status=status, content=content)


def function_call_item(
    item_id: str, call: dict, status: str, arguments: str | None = None
) -> FunctionCallItem:
    function = call["function"]
    return FunctionCallItem(
        id=item_id,
        call_id=call["id"],
        name=function["name"],
        arguments=function["arguments"] if arguments is None else arguments,
        status=status,
    )


def sse_event(event: dict) -> bytes:
    """One server-sent event, named by its type (as OpenAI sends them)."""
    return f"event: {event['type']}\ndata: {json.dumps(event, ensure_ascii=False)}\n\n".encode()


class ResponseEvents:
    """The event sequence of one streamed response: numbers the events, opens an output item when the
    kind of text changes (reasoning, message) or a tool call arrives, and closes it with its ``.done`` events.

    Item ids follow ``output_items`` (``rs_``/``msg_``/``fc_`` + the response id's suffix), so the final
    object names the items the stream built; a kind that comes back after another (text after a tool call)
    opens a new item with a numbered id, and the final object then holds that text in its one message item.
    """

    def __init__(self, response_id: str, created: int, echo: ResponseEcho):
        self.response_id, self.created, self.echo = response_id, created, echo
        self.suffix = response_id.removeprefix("resp_")
        self.seq = 0
        self.n_items = 0
        self.opened: dict[str, int] = {}  # how many items of each kind were opened
        self.current: dict | None = None  # the open text item: kind, id, index, text

    def _event(self, kind: str, **fields) -> dict:
        """One event: its type, its number, then its fields (typed objects as their JSON)."""
        fields = {k: v.model_dump() if isinstance(v, BaseModel) else v for k, v in fields.items()}
        event = {"type": kind, "sequence_number": self.seq, **fields}
        self.seq += 1
        return event

    def start(self) -> list[dict]:
        body = ResponseObject.of(self.response_id, self.created, self.echo, "in_progress", [])
        return [
            self._event("response.created", response=body),
            self._event("response.in_progress", response=body),
        ]

    def delta(self, delta: dict) -> list[dict]:
        events = []
        if delta.get("reasoning_content"):
            events += self._text("reasoning", delta["reasoning_content"])
        if delta.get("content"):
            events += self._text("message", delta["content"])
        for call in delta.get("tool_calls") or []:
            events += self._call(call)
        return events

    def _item_id(self, kind: str) -> str:
        n = self.opened.get(kind, 0)
        self.opened[kind] = n + 1
        prefix = {"reasoning": "rs", "message": "msg", "function_call": "fc"}[kind]
        if kind == "function_call":
            return f"fc_{self.suffix}_{n}"
        return f"{prefix}_{self.suffix}" + (f"_{n}" if n else "")

    def _text(self, kind: str, text: str) -> list[dict]:
        events = []
        if self.current is None or self.current["kind"] != kind:
            events += self._close()
            events += self._open(kind)
        item = self.current
        item["text"] += text
        where = {"item_id": item["id"], "output_index": item["index"], "content_index": 0}
        if kind == "message":
            events.append(self._event("response.output_text.delta", **where, delta=text, logprobs=[]))
        else:
            events.append(self._event("response.reasoning_text.delta", **where, delta=text))
        return events

    def _open(self, kind: str) -> list[dict]:
        item_id, index = self._item_id(kind), self.n_items
        self.n_items += 1
        self.current = {"kind": kind, "id": item_id, "index": index, "text": ""}
        if kind == "message":
            item, part = message_item(item_id, None, "in_progress"), OutputText(text="")
        else:
            item, part = reasoning_item(item_id, None, "in_progress"), ReasoningText(text="")
        return [
            self._event("response.output_item.added", output_index=index, item=item),
            self._event(
                "response.content_part.added", item_id=item_id, output_index=index, content_index=0, part=part
            ),
        ]

    def _close(self, status: str = "completed") -> list[dict]:
        if self.current is None:
            return []
        item, self.current = self.current, None
        where = {"item_id": item["id"], "output_index": item["index"], "content_index": 0}
        text = item["text"]
        if item["kind"] == "message":
            done = self._event("response.output_text.done", **where, text=text, logprobs=[])
            part, whole = OutputText(text=text), message_item(item["id"], text, status)
        else:
            done = self._event("response.reasoning_text.done", **where, text=text)
            part, whole = ReasoningText(text=text), reasoning_item(item["id"], text, status)
        return [
            done,
            self._event("response.content_part.done", **where, part=part),
            self._event("response.output_item.done", output_index=item["index"], item=whole),
        ]

    def _call(self, call: dict) -> list[dict]:
        events = self._close()
        item_id, index = self._item_id("function_call"), self.n_items
        self.n_items += 1
        arguments = call["function"]["arguments"]
        where = {"item_id": item_id, "output_index": index}
        return events + [
            self._event(
                "response.output_item.added",
                output_index=index,
                item=function_call_item(item_id, call, "in_progress", arguments=""),
            ),
            self._event("response.function_call_arguments.delta", **where, delta=arguments),
            self._event(
                "response.function_call_arguments.done",
                **where,
                arguments=arguments,
                name=call["function"]["name"],
            ),
            self._event(
                "response.output_item.done",
                output_index=index,
                item=function_call_item(item_id, call, "completed"),
            ),
        ]

    def finish(self, body: ResponseObject) -> list[dict]:
        """Close the open item (an empty message item when the turn said nothing), then the final event."""
        status = body.status
        events = self._close(status)
        if not self.opened.get("message") and not self.opened.get("function_call"):
            events += self._open("message") + self._close(status)
        kind = "response.completed" if status == "completed" else "response.incomplete"
        return events + [self._event(kind, response=body)]

    def failed(self, err: ApiError) -> dict:
        error = ResponseError(code=err.code or "server_error", message=err.message)
        body = ResponseObject.of(self.response_id, self.created, self.echo, "failed", [], error=error)
        return self._event("response.failed", response=body)
