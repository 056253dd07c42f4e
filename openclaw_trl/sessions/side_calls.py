"""Side calls recognised by their content: requests an agent makes for itself, not turns of the person's conversation.

An agent gateway calls the same model for housekeeping between the person's turns, and stock OpenClaw marks none of
them (no ``X-Turn-Type``); what tells them apart is their fixed text. A recognised side call is served and stored as
a ``side`` turn: it is never trained on, never becomes the next state (the person's reaction) of the turn before it,
and never closes that turn as diverged. :data:`SIDE_CALLS` lists what is recognised (the texts of OpenClaw
2026.9); a gateway version that rewords them is no longer recognised (its calls are then handled like any request:
one that continues no conversation starts its own, which nothing continues, so it is never trained on).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

from openclaw_trl.chat import flatten_content
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
    """Compaction's chunk summaries, their merge and the split-turn prefix: a summarisation system prompt, the
    transcript wrapped in ``<conversation>``, no tools."""
    return not tools and (
        _system(messages).startswith("You are a context summarization assistant")
        or _last_user(messages).startswith("<conversation>")
    )


def _heartbeat(messages, tools) -> bool:
    """The default heartbeat prompt (``agents.defaults.heartbeat.prompt`` may replace it), or the poll marker
    that stands for a heartbeat in the history."""
    text = _last_user(messages)
    return text.startswith("Follow the heartbeat monitor scratch context") or _is_poll(messages)


def _is_poll(messages) -> bool:
    for message in reversed(messages):
        if message.get("role") == "user":
            return "[OpenClaw heartbeat poll]" in flatten_content(message.get("content")) and not user_text(
                message
            )
    return False


def _skill_review(messages, tools) -> bool:
    return _last_user(messages).startswith("Skill review. Distill new durable learning")


def _own_prompt(prefixes: tuple[str, ...]):
    def matches(messages, tools) -> bool:
        return _system(messages).lstrip().startswith(prefixes)

    return matches


SIDE_CALLS: dict[str, Callable[[Sequence[Mapping], Sequence[Mapping] | None], bool]] = {
    "memory_flush": _memory_flush,  # last user message "Pre-compaction memory flush. Store durable memories ..."
    "compaction": _compaction,  # "You are a context summarization assistant. ..." + "<conversation> ... </conversation>"
    "heartbeat": _heartbeat,  # "Follow the heartbeat monitor scratch context when provided. ..."
    "skill_review": _skill_review,  # "Skill review. Distill new durable learning from the full retained conversation."
    "title": _own_prompt(("Generate a concise session title",)),
    "dreaming": _own_prompt(("You are keeping a dream diary",)),
    "side_question": _own_prompt(("You are answering an ephemeral /btw side question",)),
}
"""Recognised side calls of OpenClaw 2026.9: kind -> ``predicate(messages, tools)``."""


def side_call_kind(messages: Sequence[Mapping], tools: Sequence[Mapping] | None = None) -> str | None:
    """The kind of side call a request is (a key of :data:`SIDE_CALLS`), or None for an ordinary request."""
    for kind, matches in SIDE_CALLS.items():
        if matches(messages, tools):
            return kind
    return None


def is_side_message(message: Mapping) -> bool:
    """Whether a user message inside a conversation stands for a side call the agent kept in its history (a
    heartbeat poll, a flush or a skill review): it is skipped, with the replies to it, when looking for a next state."""
    if message.get("role") != "user":
        return False
    one = [message]
    return _is_poll(one) or any(check(one, None) for check in (_memory_flush, _heartbeat, _skill_review))


FEEDBACK_COMMANDS = ("good", "bad", "undo", "learning")
"""The chat commands of the OpenClaw feedback plugin (``integrations/openclaw``): ``/good``, ``/bad [text]``,
``/undo``, ``/learning [pause|resume]``."""
_COMMAND = re.compile(r"/(?:" + "|".join(FEEDBACK_COMMANDS) + r")(?:\s.*)?", re.DOTALL)


def is_feedback_command(message: Mapping) -> bool:
    """Whether a user message is one of the feedback plugin's chat commands. The plugin answers it without the
    model and sends its signal to the server itself; the agent keeps it in the history it re-sends, where it is
    skipped when looking for a next state (it is not the person's reaction to the reply's content)."""
    return message.get("role") == "user" and _COMMAND.fullmatch(user_text(message)) is not None
