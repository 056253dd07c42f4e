"""Messages content -> the chat conversation it means: the system prompt, the messages with their content
blocks, the tools and ``tool_choice`` (``to_chat``), checked block by block (each refusal a 400 naming the block).

Mapping (a block's ``cache_control`` is accepted and has no effect; a text block's ``citations`` must be null
or empty):

* ``system``: a string or ``text`` blocks (joined by newlines) -> the first, ``system`` message;
* a ``user`` message: its ``tool_result`` blocks -> one ``tool`` message each (``tool_call_id`` =
  ``tool_use_id``; ``content`` a string or ``text`` blocks; ``is_error: true`` prefixes the text with
  ``Error: ``, which is how the model reads that the tool failed), then its ``text`` blocks -> one ``user``
  message (joined by newlines). A ``tool_result`` must answer a ``tool_use`` of an earlier assistant message
  of the request, once;
* an ``assistant`` message: ``text`` blocks -> its content (empty without text), ``thinking`` blocks -> its reasoning (the
  ``signature`` is not checked), ``tool_use`` blocks -> its tool calls (``input`` re-serialised as the
  arguments); ``redacted_thinking`` blocks are dropped (encrypted reasoning of another model cannot be read);
* the last message is a ``user`` message (an assistant prefill is refused: the reply always starts a new
  assistant message);
* any other block (``image``, ``document``, server tool blocks, ...) is refused: only text and tools exist here;
* ``tools``: custom tools (``name``, ``description``, ``input_schema`` of type ``object``;
  ``eager_input_streaming`` accepted and without effect: a tool call is streamed whole once the model closes it)
  -> function tools; server tools (``type`` other than ``custom``) and ``strict: true`` are refused;
* ``tool_choice``: ``auto`` -> ``auto``, ``any`` -> ``required``, ``tool`` -> that function, ``none`` -> the
  prompt is rendered without tools. As in chat completions, ``any`` and ``tool`` are not enforced while
  decoding; ``disable_parallel_tool_use: true`` is refused (the server cannot hold the model to one call).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from openclaw_trl.serving.errors import ApiError

TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,128}")
TOOL_USE_ID = re.compile(r"[a-zA-Z0-9_-]{1,128}")
_BLOCK_FIELDS = {
    "text": ("text", "citations"),
    "thinking": ("thinking", "signature"),
    "redacted_thinking": ("data",),
    "tool_use": ("id", "name", "input"),
    "tool_result": ("tool_use_id", "content", "is_error"),
}
_ROLE_BLOCKS = {
    "user": ("text", "tool_result"),
    "assistant": ("text", "thinking", "redacted_thinking", "tool_use"),
}
_TOOL_FIELDS = (
    "type",
    "name",
    "description",
    "input_schema",
    "cache_control",
    "eager_input_streaming",
    "strict",
)


@dataclass(frozen=True)
class ChatConversation:
    """What a Messages request means for the chat template: messages, function tools, ``tool_choice``."""

    messages: list[dict]
    tools: list[dict] | None
    tool_choice: str | dict | None


def to_chat(system, messages: list, tools: list | None, tool_choice: dict | None) -> ChatConversation:
    """The chat conversation of a Messages request (module docstring); raises ``ApiError`` (400)."""
    chat_tools = _tools(tools or [])
    names = [t["function"]["name"] for t in chat_tools]
    out: list[dict] = []
    if system is not None and (text := _system_text(system)):
        out.append({"role": "system", "content": text})
    tool_use_ids: set[str] = set()
    answered: set[str] = set()
    for i, message in enumerate(messages):
        role, blocks = _message_blocks(message, f"messages[{i}]")
        if role == "assistant":
            out.append(_assistant(blocks, f"messages[{i}]", tool_use_ids))
        else:
            out.extend(_user(blocks, f"messages[{i}]", tool_use_ids, answered))
    if messages and messages[-1].get("role") != "user":
        raise ApiError(
            400,
            f"messages[{len(messages) - 1}]: the last message must be a user message (an assistant prefill is "
            "not supported: the reply always starts a new assistant message).",
            "invalid_messages",
            "messages",
        )
    return ChatConversation(out, chat_tools or None, _tool_choice(tool_choice, names))


# --------------------------------------------------------------------------------------------------
# Messages and their blocks
# --------------------------------------------------------------------------------------------------


def _bad(param: str, problem: str, code: str = "invalid_value") -> ApiError:
    return ApiError(400, f"{param}: {problem}", code, param)


def _message_blocks(message: Any, param: str) -> tuple[str, list[dict]]:
    """A message's role and its content as blocks (a string content is one text block)."""
    if not isinstance(message, dict):
        raise _bad(param, "must be an object with 'role' and 'content'")
    extra = sorted(set(message) - {"role", "content"})
    if extra:
        raise _bad(f"{param}.{extra[0][:64]}", "Extra inputs are not permitted", "unknown_parameter")
    role, content = message.get("role"), message.get("content")
    if role not in _ROLE_BLOCKS:
        raise _bad(f"{param}.role", f"must be 'user' or 'assistant', got {str(role)[:32]!r}")
    if isinstance(content, str):
        return role, [{"type": "text", "text": content}]
    if not isinstance(content, list) or not content:
        raise _bad(f"{param}.content", "must be a string or a non-empty list of content blocks")
    for j, block in enumerate(content):
        _check_block(block, f"{param}.content[{j}]", _ROLE_BLOCKS[role])
    return role, content


def _check_block(block: Any, param: str, allowed: tuple[str, ...]) -> None:
    """A content block of a type this role may send, with its fields and nothing else."""
    kind = block.get("type") if isinstance(block, dict) else None
    if not isinstance(kind, str):
        raise _bad(param, "must be a content block object with a 'type'")
    if kind not in _BLOCK_FIELDS:
        raise _bad(
            f"{param}.type",
            f"content blocks of type {kind[:64]!r} are not supported: this server reads text, thinking, "
            "tool_use and tool_result blocks only",
            "unsupported_content",
        )
    if kind not in allowed:
        role = "user" if "tool_result" in allowed else "assistant"
        raise _bad(f"{param}.type", f"{kind!r} blocks cannot appear in a {role} message", "invalid_messages")
    extra = sorted(set(block) - {"type", "cache_control", *_BLOCK_FIELDS[kind]})
    if extra:
        raise _bad(f"{param}.{extra[0][:64]}", "Extra inputs are not permitted", "unknown_parameter")
    if kind == "text":
        _text(block, param)
        if block.get("citations"):
            raise _bad(f"{param}.citations", "citations are not supported: send the text alone")


def _text(block: dict, param: str, field: str = "text") -> str:
    text = block.get(field)
    if not isinstance(text, str):
        raise _bad(f"{param}.{field}", "Input should be a valid string")
    return text


def _system_text(system) -> str:
    """``system`` as one text: a string, or text blocks joined by newlines."""
    if isinstance(system, str):
        return system
    for j, block in enumerate(system):
        _check_block(block, f"system[{j}]", ("text",))
    return "\n".join(block["text"] for block in system)


def _assistant(blocks: list[dict], param: str, tool_use_ids: set[str]) -> dict:
    """An assistant message: text -> content, thinking -> reasoning, tool_use -> tool calls."""
    texts, thoughts, calls = [], [], []
    for j, block in enumerate(blocks):
        where = f"{param}.content[{j}]"
        if block["type"] == "text":
            texts.append(block["text"])
        elif block["type"] == "thinking":
            thoughts.append(_text(block, where, "thinking"))
            if block.get("signature") is not None and not isinstance(block["signature"], str):
                raise _bad(f"{where}.signature", "Input should be a valid string")
        elif block["type"] == "tool_use":
            calls.append(_tool_call(block, where, tool_use_ids))
    message: dict[str, Any] = {"role": "assistant", "content": "\n".join(texts)}
    if thoughts:
        message["reasoning_content"] = "\n".join(thoughts)
    if calls:
        message["tool_calls"] = calls
    return message


def _tool_call(block: dict, param: str, tool_use_ids: set[str]) -> dict:
    call_id, name, arguments = block.get("id"), block.get("name"), block.get("input")
    if not isinstance(call_id, str) or not TOOL_USE_ID.fullmatch(call_id):
        raise _bad(f"{param}.id", "must be 1-128 letters, digits, '_' or '-'")
    if call_id in tool_use_ids:
        raise _bad(f"{param}.id", f"tool_use ids must be unique; {call_id!r} is used twice")
    if not isinstance(name, str) or not TOOL_NAME.fullmatch(name):
        raise _bad(f"{param}.name", "must be 1-128 letters, digits, '_' or '-'")
    if not isinstance(arguments, dict):
        raise _bad(f"{param}.input", "Input should be a valid dictionary (the tool's arguments)")
    tool_use_ids.add(call_id)
    arguments_json = json.dumps(arguments, ensure_ascii=False)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments_json}}


def _user(blocks: list[dict], param: str, tool_use_ids: set[str], answered: set[str]) -> list[dict]:
    """A user message: one tool message per tool_result, then one user message with the text blocks."""
    out, texts = [], []
    for j, block in enumerate(blocks):
        if block["type"] == "text":
            texts.append(block["text"])
            continue
        where = f"{param}.content[{j}]"
        call_id = block.get("tool_use_id")
        if not isinstance(call_id, str):
            raise _bad(f"{where}.tool_use_id", "Input should be a valid string")
        if call_id not in tool_use_ids:
            raise _bad(
                f"{where}.tool_use_id",
                f"unexpected tool_use_id {call_id[:128]!r}: a tool_result must answer a tool_use block of an "
                "earlier assistant message",
                "invalid_messages",
            )
        if call_id in answered:
            raise _bad(
                f"{where}.tool_use_id", f"tool_use {call_id!r} already has a tool_result", "invalid_messages"
            )
        answered.add(call_id)
        out.append({"role": "tool", "tool_call_id": call_id, "content": _result_text(block, where)})
    if texts:
        out.append({"role": "user", "content": "\n".join(texts)})
    return out


def _result_text(block: dict, param: str) -> str:
    """A tool_result's content as text (a string or text blocks), prefixed ``Error: `` when ``is_error``."""
    content, is_error = block.get("content", ""), block.get("is_error", False)
    if not isinstance(is_error, bool):
        raise _bad(f"{param}.is_error", "Input should be a valid boolean")
    if content is None:
        content = ""
    if isinstance(content, list):
        for k, part in enumerate(content):
            _check_block(part, f"{param}.content[{k}]", ("text",))
        content = "\n".join(part["text"] for part in content)
    elif not isinstance(content, str):
        raise _bad(f"{param}.content", "must be a string or a list of text blocks")
    return f"Error: {content}" if is_error else content


# --------------------------------------------------------------------------------------------------
# Tools
# --------------------------------------------------------------------------------------------------


def _tools(tools: list) -> list[dict]:
    """Custom tools -> chat function tools (unique names)."""
    out, seen = [], set()
    for i, tool in enumerate(tools):
        param = f"tools[{i}]"
        if not isinstance(tool, dict):
            raise _bad(param, "must be a tool object")
        extra = sorted(set(tool) - set(_TOOL_FIELDS))
        if extra:
            raise _bad(f"{param}.{extra[0][:64]}", "Extra inputs are not permitted", "unknown_parameter")
        kind = tool.get("type")
        if kind not in (None, "custom"):
            raise _bad(
                f"{param}.type",
                f"server tools ({str(kind)[:64]!r}) are not run by this server: define the tool with a name, "
                "description and input_schema and run it in the client",
                "unsupported_parameter",
            )
        name, schema = tool.get("name"), tool.get("input_schema")
        if not isinstance(name, str) or not TOOL_NAME.fullmatch(name):
            raise _bad(f"{param}.name", "must be 1-128 letters, digits, '_' or '-'")
        if name in seen:
            raise _bad(f"{param}.name", f"tool names must be unique; {name!r} is defined twice")
        seen.add(name)
        if not isinstance(schema, dict) or schema.get("type") != "object":
            raise _bad(f"{param}.input_schema", "must be a JSON schema object with type 'object'")
        description = tool.get("description")
        if description is not None and not isinstance(description, str):
            raise _bad(f"{param}.description", "Input should be a valid string")
        if tool.get("strict") not in (None, False):
            raise _bad(
                f"{param}.strict",
                "no schema is enforced while decoding: omit 'strict'",
                "unsupported_parameter",
            )
        function = {"name": name, "description": description, "parameters": schema}
        out.append({"type": "function", "function": {k: v for k, v in function.items() if v is not None}})
    return out


def _tool_choice(choice: dict | None, names: list[str]) -> str | dict | None:
    """Anthropic's ``tool_choice`` -> the chat one (module docstring)."""
    if choice is None:
        return None
    kind = choice.get("type")
    allowed = {"auto": ("disable_parallel_tool_use",), "any": ("disable_parallel_tool_use",), "none": ()}
    allowed["tool"] = ("name", "disable_parallel_tool_use")
    if kind not in allowed:
        raise _bad("tool_choice.type", "must be 'auto', 'any', 'tool' or 'none'")
    extra = sorted(set(choice) - {"type", *allowed[kind]})
    if extra:
        raise _bad(f"tool_choice.{extra[0][:64]}", "Extra inputs are not permitted", "unknown_parameter")
    if choice.get("disable_parallel_tool_use") not in (None, False):
        raise _bad(
            "tool_choice.disable_parallel_tool_use",
            "the model may call several tools in one turn and the server cannot hold it to one: omit it",
            "unsupported_parameter",
        )
    if kind in ("any", "tool") and not names:
        raise _bad("tool_choice", f"tool_choice {kind!r} needs tools")
    if kind == "tool":
        name = choice.get("name")
        if not isinstance(name, str) or name not in names:
            raise _bad(
                "tool_choice.name",
                f"{str(name)[:128]!r} is not among the request's tools",
                "unknown_function",
            )
        return {"type": "function", "function": {"name": name}}
    return {"auto": "auto", "any": "required", "none": "none"}[kind]
