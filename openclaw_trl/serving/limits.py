"""What one request may carry (``RequestLimits``: sizes and counts, each over-limit request a 400, the body a
413) and the integer bounds every protocol's numbers keep (a 64-bit engine and store hold them).

``RequestLimits.check_chat`` counts the messages of a chat in the internal format (text content or text
parts, reasoning, tool-call arguments), whichever protocol they came from.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from openclaw_trl.serving.errors import ApiError

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

# --------------------------------------------------------------------------------------------------
# Limits: what one request may carry (each over-limit request is a 400, the body size a 413)
# --------------------------------------------------------------------------------------------------

_LIMIT_CODES = {
    "max_request_bytes": "request_too_large",
    "max_messages": "array_above_max_length",
    "max_tools": "array_above_max_length",
    "max_stop": "array_above_max_length",
    "max_prompt_tokens": "context_length_exceeded",
}
SESSION_ID_PATTERN = re.compile(r"[A-Za-z0-9._:@+=/~-]+")
"""Characters a session id may use: it is echoed in the ``x-openclaw-session-id`` response header."""


@dataclass(frozen=True)
class RequestLimits:
    """What one request may carry; ``OpenClawConfig`` exposes every field (same names, same defaults).

    Parameters:
        max_request_bytes: raw body size (413 above it, checked before parsing). 4 MiB holds the largest
            conversation the other limits allow (``max_total_chars`` of text + tools) with JSON escaping.
        max_messages: messages in one request; 256 is far beyond any real chat and bounds per-message work.
        max_message_chars: text of one message (content + reasoning + tool-call arguments); 100,000 characters
            is ~25k tokens, more than the served context, so no real message is refused for it.
        max_total_chars: text of all messages together (400,000 characters, ~100k tokens).
        max_tools: tool definitions in one request (64; OpenAI's limit is 128, agents send tens).
        max_tools_chars: the tools' JSON size (64 KiB): they are rendered into every prompt.
        max_stop: stop strings (4, OpenAI's limit); each is checked after every token.
        max_stop_chars: length of one stop string (64): the decoder re-reads ~4x that per token.
        max_session_id_chars: a session id's length (128), from ``SESSION_ID_PATTERN``'s characters
            (letters, digits and ``._:@+=/~-``), since it is echoed in a response header.
        max_feedback_chars: the correction text of ``POST /v1/feedback`` / the UI (8,000 characters): it
            becomes a judge's next state and a teacher hint.
        max_prompt_tokens: prompt tokens after rendering the chat template; ``None`` (the default): whatever
            the context leaves (``max_context_len`` minus the reply's minimum room, see ``ServerSettings``).
    """

    max_request_bytes: int = 4 * 1024 * 1024
    max_messages: int = 256
    max_message_chars: int = 100_000
    max_total_chars: int = 400_000
    max_tools: int = 64
    max_tools_chars: int = 65_536
    max_stop: int = 4
    max_stop_chars: int = 64
    max_session_id_chars: int = 128
    max_feedback_chars: int = 8000
    max_prompt_tokens: int | None = None

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if name == "max_prompt_tokens" and value is None:
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")

    def over(self, name: str, value: int, param: str | None, what: str) -> ApiError:
        """The error for ``what`` of size ``value`` above the limit ``name`` (413 for the body, else 400)."""
        limit = getattr(self, name)
        return ApiError(
            413 if name == "max_request_bytes" else 400,
            f"{what} is {value}, above the limit {name}={limit}.",
            _LIMIT_CODES.get(name, "string_above_max_length"),
            param,
        )

    def check_chat(self, payload: dict) -> None:
        """Counts and sizes of a chat: ``payload["messages"]`` (chat messages, any protocol's), ``tools``, ``stop``."""
        messages = payload["messages"]
        if len(messages) > self.max_messages:
            raise self.over("max_messages", len(messages), "messages", "The number of messages")
        total = 0
        for i, message in enumerate(messages):
            chars = _message_chars(message, f"messages[{i}]")
            if chars > self.max_message_chars:
                raise self.over(
                    "max_message_chars", chars, f"messages[{i}]", f"The text of messages[{i}] (characters)"
                )
            total += chars
        if total > self.max_total_chars:
            raise self.over("max_total_chars", total, "messages", "The text of all messages (characters)")
        self._check_tools(payload.get("tools") or [])
        self._check_stop(payload.get("stop"))

    def _check_tools(self, tools: list) -> None:
        if len(tools) > self.max_tools:
            raise self.over("max_tools", len(tools), "tools", "The number of tools")
        size = len(json.dumps(tools, ensure_ascii=False))
        if size > self.max_tools_chars:
            raise self.over("max_tools_chars", size, "tools", "The JSON size of the tools (characters)")

    def _check_stop(self, stop) -> None:
        stops = [stop] if isinstance(stop, str) else list(stop or [])
        if len(stops) > self.max_stop:
            raise self.over("max_stop", len(stops), "stop", "The number of stop strings")
        for i, s in enumerate(stops):
            if len(s) > self.max_stop_chars:
                raise self.over("max_stop_chars", len(s), f"stop[{i}]", f"The length of stop[{i}]")

    def check_session_id(self, key: str | None) -> None:
        """A session id is short and header-safe (it is echoed in ``x-openclaw-session-id``)."""
        if key is None:
            return
        if len(key) > self.max_session_id_chars:
            raise self.over("max_session_id_chars", len(key), "session_id", "The length of the session id")
        if not SESSION_ID_PATTERN.fullmatch(key):
            raise ApiError(
                400,
                "The session id may only use letters, digits and the characters ._:@+=/~- "
                "(it is echoed in a response header); send another X-Session-Id.",
                "invalid_session",
                "session_id",
            )

    def check_feedback(self, text: str | None) -> None:
        if text and len(text) > self.max_feedback_chars:
            raise self.over("max_feedback_chars", len(text), "text", "The length of the feedback text")


# --------------------------------------------------------------------------------------------------
# Reasoning: one field, two names on the wire
# --------------------------------------------------------------------------------------------------


def message_reasoning(message: dict, param: str) -> str | None:
    """The reasoning text of an input message, given as ``reasoning_content`` or ``reasoning``.

    Clients name the reasoning part of an assistant message ``reasoning_content`` (DeepSeek, older vLLM) or
    ``reasoning`` (current vLLM, OpenRouter); both mean the same. Either may be sent, or both with the same
    text; both with different texts is a 400 (there is no precedence to guess: one of them is a client bug).
    """
    content, alias = message.get("reasoning_content"), message.get("reasoning")
    if content is not None and alias is not None and content != alias:
        raise ApiError(
            400,
            f"{param} has 'reasoning_content' and 'reasoning' with different texts: they are two names of one "
            "field, so send one of them (or the same text in both).",
            "invalid_value",
            param,
        )
    return content if content is not None else alias


def _message_chars(message: dict, param: str) -> int:
    """Characters of a message's text: content (string or text parts), reasoning and tool-call arguments."""
    content = message.get("content")
    if isinstance(content, list):
        chars = sum(len(p["text"]) for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    else:
        chars = len(content or "")
    chars += len(message_reasoning(message, param) or "")
    for call in message.get("tool_calls") or []:
        arguments = (call.get("function") or {}).get("arguments") if isinstance(call, dict) else None
        chars += len(arguments if isinstance(arguments, str) else json.dumps(arguments or {}))
    return chars
