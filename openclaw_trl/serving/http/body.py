"""The request body: at most ``max_request_bytes`` read (413 above), parsed as JSON (400), valid Unicode (400)."""

from __future__ import annotations

import json
from typing import Any

from fastapi import Request

from openclaw_trl.serving.errors import ApiError
from openclaw_trl.serving.limits import RequestLimits
from openclaw_trl.serving.text_check import check_text


async def json_body(request: Request, limits: RequestLimits) -> Any:
    """The parsed JSON body: at most ``max_request_bytes`` (413), valid JSON (400), valid Unicode (400)."""
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limits.max_request_bytes:
        raise limits.over("max_request_bytes", int(length), None, "The request body (bytes)")
    raw = await _read_body(request, limits.max_request_bytes)
    if len(raw) > limits.max_request_bytes:
        raise limits.over("max_request_bytes", len(raw), None, "The request body (bytes)")
    try:
        payload = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise ApiError(
            400, f"We could not parse the JSON body of your request: {exc}", "invalid_json"
        ) from None
    check_text(payload, raw=raw)
    return payload


async def _read_body(request: Request, limit: int) -> bytes:
    """The body, read chunk by chunk and stopped one byte past ``limit`` (a body without a length is bounded too)."""
    chunks, size = [], 0
    async for chunk in request.stream():
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            break
    return b"".join(chunks)
