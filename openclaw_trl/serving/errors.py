"""``ApiError``: every refusal of the server, raised where the problem is found, in no wire format yet.

An ``ApiError`` carries a status code, a message, a stable ``code`` and the ``param`` at fault; the protocol
that owns the route renders it in its own shape (``serving.protocols``: the OpenAI-compatible ones answer
``{"error": {"message", "type", "param", "code"}}``), a stream sends it in-band.
"""

from __future__ import annotations

from pydantic import ValidationError


class ApiError(Exception):
    """An error answered to the client (in the shape of the protocol of its route), never a crash."""

    def __init__(self, status: int, message: str, code: str | None = None, param: str | None = None):
        super().__init__(message)
        self.status, self.message, self.code, self.param = status, message, code, param


def format_validation_error(exc: ValidationError) -> ApiError:
    """A pydantic validation error as a 400 naming the first field at fault."""
    first = exc.errors()[0]
    loc = [str(p) for p in first.get("loc", ()) if not _union_tag(str(p))]
    param = ".".join(loc) or None
    msg = first.get("msg", "invalid request").removeprefix("Value error, ")
    if first.get("type") == "missing":
        msg = "field required"
    return ApiError(400, f"Invalid value for '{param}': {msg}" if param else msg, "invalid_value", param)


def _union_tag(part: str) -> bool:
    """Whether a part of a pydantic error location names a union member (``str``, ``list[...]``,
    ``function-after[...]``) rather than a field (``stream`` is a field)."""
    return part in ("str", "dict") or part.startswith(("function-", "list[", "str[", "dict["))
