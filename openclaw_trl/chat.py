"""Chat rendering and parsing around the token-level engines.

* :func:`render_prompt_ids` turns OpenAI-style messages (+ tools) into prompt token ids with the tokenizer's
  own chat template. The engines only see ids, so what is trained on is exactly what was rendered and sampled
  (never a re-tokenization of decoded text).
* :func:`parse_assistant_text` / :func:`decode_completion` split a completion into the OpenAI fields
  ``content``, ``reasoning_content`` (``<think>…</think>``) and ``tool_calls`` (Qwen-style
  ``<tool_call>{"name": …, "arguments": …}</tool_call>`` blocks).
* :class:`StreamParser` does the same incrementally on decoded text deltas and emits OpenAI ``delta`` dicts for
  streaming. The non-streaming parser is built on it, so a stream concatenates to exactly the parsed message.

Parsing rules (Qwen conventions, made total so that no model output can crash the server):

* A completion may start inside thinking (the template already opened ``<think>``): text before the first
  ``</think>`` is reasoning when no ``<think>`` precedes it. A completion cut off while thinking keeps what it
  has as reasoning and has empty content.
* A ``<tool_call>`` block whose body is not a JSON object with a string ``name`` stays in the content as text;
  so does an unterminated block. ``arguments`` (or ``parameters``) is returned as a JSON string.
* End-of-turn special tokens (``<|im_end|>``, ``<|endoftext|>``, the tokenizer's eos/pad) are dropped;
  content and reasoning are stripped of surrounding whitespace.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
TOOL_OPEN, TOOL_CLOSE = "<tool_call>", "</tool_call>"
END_TOKENS = ("<|im_end|>", "<|endoftext|>")


def flatten_content(content) -> str:
    """Message content as text: lists of OpenAI content parts keep their text parts, joined by spaces."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
        return " ".join(parts)
    return str(content)


def normalize_messages(messages: list[dict]) -> list[dict]:
    """OpenAI messages in the shape chat templates expect.

    ``developer`` becomes ``system``; list-of-parts content is flattened to text (parts joined by a space);
    ``None`` content becomes ``""``. Other keys (``tool_calls``, ``reasoning_content``, ``name``, …) are kept.
    """
    out = []
    for message in messages:
        msg = dict(message)
        if msg.get("role") == "developer":
            msg["role"] = "system"
        msg["content"] = flatten_content(msg.get("content"))
        out.append(msg)
    return out


def render_prompt_ids(
    tokenizer,
    messages: list[dict],
    tools: list[dict] | None = None,
    add_generation_prompt: bool = True,
    **kwargs,
) -> list[int]:
    """Render ``messages`` (+ ``tools``) with the tokenizer's chat template and return the prompt token ids.

    Extra keyword arguments go to the template (e.g. ``enable_thinking=False`` for Qwen3 templates).
    """
    text = render_prompt_text(tokenizer, messages, tools, add_generation_prompt, **kwargs)
    return list(tokenizer.encode(text, add_special_tokens=False))


def render_prompt_text(
    tokenizer,
    messages: list[dict],
    tools: list[dict] | None = None,
    add_generation_prompt: bool = True,
    **kwargs,
) -> str:
    """The rendered prompt as text (what :func:`render_prompt_ids` tokenizes)."""
    return tokenizer.apply_chat_template(
        normalize_messages(messages),
        tools=tools or None,
        add_generation_prompt=add_generation_prompt,
        tokenize=False,
        **kwargs,
    )


def new_tool_call_id() -> str:
    return "call_" + uuid.uuid4().hex[:24]


def _parse_tool_call(body: str) -> dict | None:
    """An OpenAI tool call from the JSON body of a ``<tool_call>`` block, or ``None`` when it is not one."""
    try:
        obj = json.loads(body.strip())
    except (ValueError, RecursionError):
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    if not isinstance(args, str):
        args = json.dumps(args, ensure_ascii=False)
    return {
        "id": new_tool_call_id(),
        "type": "function",
        "function": {"name": obj["name"], "arguments": args},
    }


class _Channel:
    """Whitespace handling for one streamed text channel: drop leading whitespace, hold back trailing
    whitespace until more text follows (so the stream equals the stripped non-streaming value)."""

    def __init__(self) -> None:
        self.started = False
        self.pending_ws = ""

    def push(self, text: str) -> str:
        if not self.started:
            text = text.lstrip()
            if not text:
                return ""
            self.started = True
        body = text.rstrip()
        out = (self.pending_ws + body) if body else ""
        self.pending_ws = text[len(body) :] if body else self.pending_ws + text
        return out


class StreamParser:
    """Incremental parser: feed decoded text deltas, get OpenAI ``delta`` dicts.

    Each event is one of ``{"content": str}``, ``{"reasoning_content": str}`` or
    ``{"tool_calls": [{"index", "id", "type": "function", "function": {"name", "arguments"}}]}`` (a tool call is
    emitted whole once its ``</tool_call>`` arrives). Text that could be the start of a tag is held back until it
    is decided. Pass ``start_in_reasoning=True`` when the prompt already opened ``<think>`` (a streamed prefix
    cannot be reclassified later, unlike in :func:`parse_assistant_text`).
    """

    def __init__(self, start_in_reasoning: bool = False, end_tokens: tuple[str, ...] = END_TOKENS) -> None:
        self.mode = "reasoning" if start_in_reasoning else "content"
        self.end_tokens = tuple(t for t in end_tokens if t)
        self.buffer = ""
        self.tool_body = ""
        self.tool_index = 0
        self.channels = {"content": _Channel(), "reasoning": _Channel()}

    def _tags(self) -> tuple[str, ...]:
        if self.mode == "content":
            return (THINK_OPEN, TOOL_OPEN, *self.end_tokens)
        if self.mode == "reasoning":
            return (THINK_CLOSE, *self.end_tokens)
        return (TOOL_CLOSE,)

    def _emit_text(self, text: str, events: list[dict]) -> None:
        if self.mode == "tool":
            self.tool_body += text
            return
        out = self.channels[self.mode].push(text)
        if out:
            key = "content" if self.mode == "content" else "reasoning_content"
            if events and key in events[-1]:
                events[-1][key] += out
            else:
                events.append({key: out})

    def _on_tag(self, tag: str, events: list[dict]) -> None:
        if tag in self.end_tokens:
            return
        if tag == THINK_OPEN:
            self.mode = "reasoning"
        elif tag == THINK_CLOSE:
            self.mode = "content"
        elif tag == TOOL_OPEN:
            self.mode, self.tool_body = "tool", ""
        elif tag == TOOL_CLOSE:
            self.mode = "content"
            call = _parse_tool_call(self.tool_body)
            if call is None:  # not a valid call: it stays in the content, verbatim
                self._emit_text(TOOL_OPEN + self.tool_body + TOOL_CLOSE, events)
            else:
                events.append({"tool_calls": [{"index": self.tool_index, **call}]})
                self.tool_index += 1

    def feed(self, delta: str) -> list[dict]:
        """Consume a text delta; return the events it completes (possibly none)."""
        events: list[dict] = []
        self.buffer += delta
        while self.buffer:
            tags = self._tags()
            hits = [(self.buffer.find(t), t) for t in tags if t in self.buffer]
            if hits:
                pos, tag = min(hits, key=lambda h: (h[0], -len(h[1])))
                self._emit_text(self.buffer[:pos], events)
                self.buffer = self.buffer[pos + len(tag) :]
                self._on_tag(tag, events)
                continue
            hold = 0  # longest buffer suffix that is a proper prefix of some tag
            for tag in tags:
                for n in range(min(len(tag) - 1, len(self.buffer)), hold, -1):
                    if self.buffer.endswith(tag[:n]):
                        hold = n
                        break
            cut = len(self.buffer) - hold
            self._emit_text(self.buffer[:cut], events)
            self.buffer = self.buffer[cut:]
            break
        return events

    def finish(self) -> list[dict]:
        """Flush at the end of the completion (an unterminated tool call goes out as content text)."""
        events: list[dict] = []
        rest, self.buffer = self.buffer, ""
        if self.mode == "tool":
            self.mode = "content"
            self._emit_text(TOOL_OPEN + self.tool_body + rest, events)
        else:
            self._emit_text(rest, events)
        return events


def parse_assistant_text(text: str, end_tokens: tuple[str, ...] = END_TOKENS) -> dict[str, Any]:
    """Split a completion's text into ``{"content", "reasoning_content", "tool_calls"}``.

    ``content`` is ``None`` when empty and tool calls were made (OpenAI's shape), ``reasoning_content`` is
    ``None`` without thinking, ``tool_calls`` is a (possibly empty) list.
    """
    close = text.find(THINK_CLOSE)
    start_in_reasoning = close >= 0 and THINK_OPEN not in text[:close]
    parser = StreamParser(start_in_reasoning=start_in_reasoning, end_tokens=end_tokens)
    content, reasoning, tool_calls = [], [], []
    for event in parser.feed(text) + parser.finish():
        if "content" in event:
            content.append(event["content"])
        elif "reasoning_content" in event:
            reasoning.append(event["reasoning_content"])
        else:
            for call in event["tool_calls"]:
                tool_calls.append({k: v for k, v in call.items() if k != "index"})
    content_text = "".join(content)
    return {
        "content": content_text if content_text or not tool_calls else None,
        "reasoning_content": "".join(reasoning) if reasoning else None,
        "tool_calls": tool_calls,
    }


def tokenizer_end_tokens(tokenizer) -> tuple[str, ...]:
    """The end-of-turn strings to drop for this tokenizer: ChatML ends plus its eos/pad tokens."""
    extra = [getattr(tokenizer, "eos_token", None), getattr(tokenizer, "pad_token", None)]
    return tuple(dict.fromkeys([*END_TOKENS, *[t for t in extra if isinstance(t, str) and t]]))


def decode_completion(tokenizer, token_ids: list[int]) -> dict[str, Any]:
    """Decode completion ids (special tokens kept so tags survive) and parse them into OpenAI fields."""
    text = tokenizer.decode(list(token_ids), skip_special_tokens=False)
    return parse_assistant_text(text, end_tokens=tokenizer_end_tokens(tokenizer))


class IncrementalDecoder:
    """Token ids in, text deltas out, for streaming.

    Byte-level BPE can split one character over several tokens, and some tokenizers change how a token is
    rendered depending on its left neighbour. So each step decodes a short window (from ``prefix`` on) twice,
    without and with the new tokens, and emits the difference once it no longer ends in U+FFFD ("incomplete").
    Cost per token is bounded by the window, not the length of the completion.
    """

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.prefix = 0  # window start: tokens before it are settled
        self.read = 0  # tokens up to here have been emitted

    def push(self, token_id: int) -> str:
        self.ids.append(int(token_id))
        decode = self.tokenizer.decode
        before = decode(self.ids[self.prefix : self.read], skip_special_tokens=False)
        after = decode(self.ids[self.prefix :], skip_special_tokens=False)
        if len(after) <= len(before) or after.endswith("\ufffd"):
            return ""
        self.prefix, self.read = self.read, len(self.ids)
        return after[len(before) :]

    def flush(self) -> str:
        """Whatever is still held back (e.g. an incomplete character at the very end)."""
        decode = self.tokenizer.decode
        before = decode(self.ids[self.prefix : self.read], skip_special_tokens=False)
        after = decode(self.ids[self.prefix :], skip_special_tokens=False)
        self.prefix = self.read = len(self.ids)
        return after[len(before) :]
