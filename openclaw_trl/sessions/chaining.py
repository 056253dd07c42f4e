"""Which served turn a request continues, from its messages alone (no session id needed).

An agent re-sends the whole conversation with every request, but it rebuilds what it re-sends: the system prompt
changes between turns (date, sections that appear or go), per-turn internal-context messages are dropped, text blocks
are joined, reasoning is dropped or moved to another field, tool-call arguments are re-serialised. So a request is
not compared with a stored prompt byte for byte, nor as a prefix: it is compared *exchange by exchange*.

An **exchange** is an assistant message together with the last user or tool message since the assistant message
before it (None when there is none). Both are normalised to what a person saw:

* system and developer messages are left out (agents rewrite them between turns);
* user and tool text: what an agent gateway adds and rewrites between re-sends is removed (OpenClaw's
  ``<<<BEGIN_OPENCLAW_INTERNAL_CONTEXT>>> … <<<END_OPENCLAW_INTERNAL_CONTEXT>>>`` blocks, ``[OpenClaw heartbeat
  poll]`` markers, ``[Tue 2026-12-01 23:22 UTC]`` timestamp envelopes, its ``Runtime: agent=…`` line), and a
  message left empty is left out;
* assistant text: ``<think>…</think>`` reasoning is removed (reasoning fields are never compared); tool calls count
  as their name and their arguments parsed as JSON and re-serialised with sorted keys;
* every run of whitespace becomes one space (text blocks joined with a newline compare equal to one block).

The **exchange key** of a served turn is ``sha256`` of its prompt's last user/tool message and its reply; a request
continues turn *t* when one of its exchanges has *t*'s key. Only that message and the reply count, so a history
rewritten before them (a compaction summary replacing old messages, a changed first message or system prompt) does
not hide the continuation. The limit: two conversations whose last exchange is identical (the same user text
answered by the same reply) cannot be told apart this way; sampled replies make that rare, and an explicit session
id removes it.

A compaction can also drop the user message before a reply (OpenClaw folds it into the summary and keeps the reply).
So each turn has a **reply key** too, the reply alone, for replies of at least ``MIN_REPLY_KEY_CHARS`` characters or
with tool calls: a request none of whose exchanges continues a turn may continue one by a reply key.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence

from openclaw_trl.chat import flatten_content

# What an agent gateway adds to user text and may rewrite or drop when it re-sends the message (OpenClaw 2026.9):
# per-turn internal context, heartbeat poll markers (merged into the next user message when unanswered), the
# timestamp envelope of each message, the Runtime line of a session's first message.
_GATEWAY_TEXT = re.compile(
    r"<<<BEGIN_OPENCLAW_INTERNAL_CONTEXT>>>.*?<<<END_OPENCLAW_INTERNAL_CONTEXT>>>"
    r"|\[OpenClaw heartbeat poll\]"
    r"|\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) \d{4}-\d{2}-\d{2} \d{2}:\d{2}[^\]\n]{0,40}\]"
    r"|^Runtime: agent=[^\n]*$",
    re.DOTALL | re.MULTILINE,
)
MIN_REPLY_KEY_CHARS = 32
"""A reply this long (or with tool calls) is distinctive enough to be recognised without the message before it."""
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL)
_SPACE = re.compile(r"\s+")
_LEFT_OUT_ROLES = ("system", "developer")


def _squeeze(text: str) -> str:
    return _SPACE.sub(" ", text).strip()


def _tool_calls(message: Mapping) -> list[list[str]]:
    """A message's tool calls as ``[name, canonical arguments]`` pairs."""
    calls = []
    for call in message.get("tool_calls") or []:
        function = call.get("function") if isinstance(call, Mapping) else None
        function = function if isinstance(function, Mapping) else {"name": function}
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except ValueError:
                arguments = _squeeze(arguments)
        calls.append(
            [str(function.get("name") or ""), json.dumps(arguments, sort_keys=True, ensure_ascii=False)]
        )
    return calls


def user_text(message: Mapping) -> str:
    """The text of a user or tool message as a person wrote it: what an agent gateway adds (internal context,
    heartbeat poll markers, timestamp envelopes, its Runtime line) removed, whitespace squeezed."""
    return _squeeze(_GATEWAY_TEXT.sub(" ", flatten_content(message.get("content"))))


def normal_message(message: Mapping) -> list | None:
    """A message as exchanges compare it, or None when it is left out (system prompts, empty context messages)."""
    role = message.get("role")
    if role in _LEFT_OUT_ROLES:
        return None
    if role == "assistant":
        text = _squeeze(_THINK.sub(" ", flatten_content(message.get("content"))))
        return ["assistant", text, _tool_calls(message)]
    text = user_text(message)
    return [role, text] if text else None


def system_text(messages: Sequence[Mapping]) -> str:
    """The system and developer text of a request, whitespace squeezed."""
    return _squeeze(
        " ".join(flatten_content(m.get("content")) for m in messages if m.get("role") in _LEFT_OUT_ROLES)
    )


def _key(before: list | None, reply: list) -> str:
    """sha256 of the normalised message before a reply and the reply."""
    blob = json.dumps([before, reply], ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def _after(last: list | None, message: Mapping) -> list | None:
    """The last normalised user/tool message since the last assistant message, once ``message`` is read."""
    if message.get("role") == "assistant":
        return None
    return normal_message(message) or last


def _reply_key(reply: list) -> str | None:
    if len(reply[1]) < MIN_REPLY_KEY_CHARS and not reply[2]:
        return None
    return _key(None, reply)


def turn_keys(prompt_messages: Sequence[Mapping], reply: Mapping) -> tuple[str, str | None]:
    """``(exchange key, reply key)`` of a served turn: its prompt's last user/tool message and the reply as the
    client received it; the reply alone (None for a short reply without tool calls)."""
    last = None
    for message in prompt_messages:
        last = _after(last, message)
    normal = normal_message({**reply, "role": "assistant"})
    return _key(last, normal), _reply_key(normal)


def request_exchanges(messages: Sequence[Mapping]) -> list[tuple[int, str, str | None]]:
    """``(index, exchange key, reply key)`` of every assistant message of a request, oldest first."""
    found, last = [], None
    for index, message in enumerate(messages):
        if message.get("role") == "assistant":
            normal = normal_message(message)
            found.append((index, _key(last, normal), _reply_key(normal)))
        last = _after(last, message)
    return found
