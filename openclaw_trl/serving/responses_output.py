"""The OpenAI Responses output: the response object, its output items and usage, and the stream events of
one response (``ResponseEvents``).

Output items of a turn: a ``reasoning`` item (when the model reasoned; its text in ``content`` as
``reasoning_text``, ``summary`` empty), a ``message`` item with one ``output_text`` part (left out when the
turn is only tool calls), then one ``function_call`` item per tool call (``call_id`` = the chat tool-call id).
Their ids are derived from the response id (``rs_``/``msg_``/``fc_`` + its suffix), so a stored response and
its stream name the same items.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from openclaw_trl.serving.openai_schema import ApiError


@dataclass
class ResponseEcho:
    """The request fields a response object repeats (with the temperature the turn was sampled at)."""

    model: str
    instructions: str | None
    tools: list[dict]
    tool_choice: str
    temperature: float
    top_p: float
    max_output_tokens: int | None
    previous_response_id: str | None
    metadata: dict[str, str] = field(default_factory=dict)
    user: str | None = None
    store: bool = True  # False: the response is not kept for retrieval by id


def output_items(message: dict, response_id: str, status: str = "completed") -> list[dict]:
    """The output items of an assistant message (module docstring): reasoning, message, function calls."""
    suffix = response_id.removeprefix("resp_")
    items = []
    if message.get("reasoning_content"):
        items.append(reasoning_item(f"rs_{suffix}", message["reasoning_content"], status))
    calls = message.get("tool_calls") or []
    if message.get("content") or not calls:
        items.append(message_item(f"msg_{suffix}", message.get("content") or "", status))
    items += [function_call_item(f"fc_{suffix}_{j}", call, "completed") for j, call in enumerate(calls)]
    return items


def reasoning_item(item_id: str, text: str | None, status: str) -> dict:
    content = [{"type": "reasoning_text", "text": text}] if text is not None else []
    return {"type": "reasoning", "id": item_id, "summary": [], "content": content, "status": status}


def message_item(item_id: str, text: str | None, status: str) -> dict:
    content = [output_text_part(text)] if text is not None else []
    return {"type": "message", "id": item_id, "role": "assistant", "status": status, "content": content}


def output_text_part(text: str) -> dict:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def function_call_item(item_id: str, call: dict, status: str, arguments: str | None = None) -> dict:
    function = call["function"]
    return {
        "type": "function_call",
        "id": item_id,
        "call_id": call["id"],
        "name": function["name"],
        "arguments": function["arguments"] if arguments is None else arguments,
        "status": status,
    }


def response_object(
    response_id: str,
    created: int,
    echo: ResponseEcho,
    status: str,
    output: list[dict],
    usage: dict | None = None,
    **extra,
) -> dict:
    """A Responses ``response`` object; ``extra`` adds fields (``completed_at``, ``error``, ``openclaw``)."""
    body = {
        "id": response_id,
        "object": "response",
        "created_at": created,
        "status": status,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "output": output,
        "parallel_tool_calls": True,
        "reasoning": {"effort": None, "summary": None},
        "text": {"format": {"type": "text"}},
        "truncation": "disabled",
        "usage": usage,
        **asdict(echo),
    }
    return {**body, **extra}


def usage_object(prompt_tokens: int, completion_tokens: int, reasoning_tokens: int) -> dict:
    return {
        "input_tokens": prompt_tokens,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": completion_tokens,
        "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
        "total_tokens": prompt_tokens + completion_tokens,
    }


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
        event = {"type": kind, "sequence_number": self.seq, **fields}
        self.seq += 1
        return event

    def start(self) -> list[dict]:
        body = response_object(self.response_id, self.created, self.echo, "in_progress", [])
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
            item, part = message_item(item_id, None, "in_progress"), output_text_part("")
        else:
            item, part = reasoning_item(item_id, None, "in_progress"), {"type": "reasoning_text", "text": ""}
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
            part, whole = output_text_part(text), message_item(item["id"], text, status)
        else:
            done = self._event("response.reasoning_text.done", **where, text=text)
            part, whole = {"type": "reasoning_text", "text": text}, reasoning_item(item["id"], text, status)
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

    def finish(self, body: dict) -> list[dict]:
        """Close the open item (an empty message item when the turn said nothing), then the final event."""
        status = body["status"]
        events = self._close(status)
        if not self.opened.get("message") and not self.opened.get("function_call"):
            events += self._open("message") + self._close(status)
        kind = "response.completed" if status == "completed" else "response.incomplete"
        return events + [self._event(kind, response=body)]

    def failed(self, err: ApiError) -> dict:
        error = {"code": err.code or "server_error", "message": err.message}
        body = response_object(self.response_id, self.created, self.echo, "failed", [], error=error)
        return self._event("response.failed", response=body)
