"""Side calls recognised by their content: requests an agent makes for itself, not turns of the person's conversation.

An agent gateway calls the same model for housekeeping between the person's turns, and stock OpenClaw marks none of
them (no ``X-Turn-Type``); what tells them apart is their fixed text. A recognised side call is served and stored as
a ``side`` turn: it is never trained on, never becomes the next state (the person's reaction) of the turn before it,
and never closes that turn as diverged. :data:`SIDE_CALLS` lists what is recognised (the texts of OpenClaw
2026.9); a gateway version that rewords them is no longer recognised (its calls are then handled like any request:
one that continues no conversation starts its own, which nothing continues, so it is never trained on).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from openclaw_trl.judge import flatten_content
from openclaw_trl.sessions.chaining import user_text


def _last_user(messages: Sequence[Mapping]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            text = user_text(message)
            if text:
                return text
    return ""


def _system(messages: Sequence[Mapping]) -> str:
    return "\n".join(
        flatten_content(m.get("content")) for m in messages if m.get("role") in ("system", "developer")
    )


def _memory_flush(messages, tools) -> bool:
    return _last_user(messages).startswith("Pre-compaction memory flush")


def _compaction(messages, tools) -> bool:
    return not tools and _last_user(messages).startswith("<conversation>")


def _heartbeat(messages, tools) -> bool:
    text = _last_user(messages)
    return "HEARTBEAT.md" in text and "HEARTBEAT_OK" in text


SIDE_CALLS: dict[str, Callable[[Sequence[Mapping], Sequence[Mapping] | None], bool]] = {
    "memory_flush": _memory_flush,  # "Pre-compaction memory flush. ..." as the last user message
    "compaction": _compaction,  # no tools; the conversation wrapped in <conversation> ... </conversation>
    "heartbeat": _heartbeat,  # "Read HEARTBEAT.md ... reply HEARTBEAT_OK"
}
"""Recognised side calls: kind -> ``predicate(messages, tools)``."""


def side_call_kind(messages: Sequence[Mapping], tools: Sequence[Mapping] | None = None) -> str | None:
    """The kind of side call a request is (a key of :data:`SIDE_CALLS`), or None for an ordinary request."""
    for kind, matches in SIDE_CALLS.items():
        if matches(messages, tools):
            return kind
    return None


def is_side_message(message: Mapping) -> bool:
    """Whether a user message inside a conversation is the prompt of a side call (a flush or a heartbeat that
    the agent kept in its history): it is skipped, with the replies to it, when looking for a next state."""
    return message.get("role") == "user" and side_call_kind([message], [{"tool": True}]) is not None
