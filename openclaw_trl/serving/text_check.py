"""Text of a request body: every string (field names included) is Unicode the store, the tokenizer and an
error body can carry (``check_text``)."""

from __future__ import annotations

import json
import re
from typing import Any

from openclaw_trl.serving.errors import ApiError

_BAD_CHARS = re.compile("[\ud800-\udfff]")
"""UTF-16 surrogate code points: JSON can spell one alone (``\\ud800``), but no UTF-8 text holds a lone surrogate
(SQLite, the tokenizer and a JSON error body all refuse it). NUL is accepted: it is valid text, and a model's own
reply (which clients send back) may hold one."""


_RAW_SUSPECT = re.compile(rb"\\u[dD][89a-fA-F]")
"""How a surrogate is spelled in raw JSON (a body without it cannot hold one once parsed)."""


def check_text(value: Any, param: str = "", raw: bytes | None = None) -> None:
    """400 for the first string in ``value`` (a parsed JSON body: dicts, lists, scalars) that holds a lone
    UTF-16 surrogate, in a value or in an object key; the error names where it is.

    A JSON body can only carry a surrogate as a ``\\uXXXX`` escape: a well-formed pair decodes to one
    character, so any surrogate left in a Python string is a lone one. The common case costs one ``json.dumps``
    and two scans in C (``raw``, the JSON text ``value`` was parsed from: one scan of it); only a body that may
    hold such a character is walked to name the field."""
    clean = _RAW_SUSPECT.search(raw) is None if raw is not None else _clean_json(value)
    if clean:
        return
    stack = [(value, param)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            _check_string(item, where or "body")
        elif isinstance(item, dict):
            for key, sub in item.items():
                path = f"{where}.{key}" if where else str(key)
                if isinstance(key, str):
                    _check_string(key, path, "the name of")
                stack.append((sub, path))
        elif isinstance(item, list):
            stack.extend((sub, f"{where}[{i}]") for i, sub in enumerate(item))


def _clean_json(value: Any) -> bool:
    """True when ``value`` surely holds no lone surrogate (``json.dumps`` keeps a surrogate, which then fails to
    encode as UTF-8); False when it may."""
    try:
        flat = json.dumps(value, ensure_ascii=False)
        return flat.isascii() or bool(flat.encode("utf-8"))
    except (TypeError, ValueError):  # not a JSON value, or a surrogate (UnicodeEncodeError is a ValueError)
        return False


def _check_string(text: str, param: str, of: str = "") -> None:
    found = _BAD_CHARS.search(text)
    if found is None:
        return
    char = found.group()
    what = f"a lone UTF-16 surrogate (U+{ord(char):04X})"
    param = ascii(param)[1:-1][:200]  # the field's name may itself hold the character: escape it
    raise ApiError(
        400,
        f"{of + ' ' if of else ''}'{param}' contains {what} at position {found.start()}: text must be valid Unicode (a surrogate "
        "only as half of a pair, which JSON writes as two escapes). Remove the character.",
        "invalid_text",
        param,
    )
