"""Errors in OpenAI's shape, ``{"error": {"message", "type", "param", "code"}}`` (``ErrorBody``): how the
OpenAI-compatible protocols (chat completions, Responses, feedback, control) render an ``ApiError``."""

from __future__ import annotations

from pydantic import BaseModel

from openclaw_trl.serving.errors import ApiError

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
}


class ErrorDetail(BaseModel):
    """What went wrong: ``type`` from the status code, ``param`` the field at fault, ``code`` a stable name."""

    message: str
    type: str
    param: str | None
    code: str | None


class ErrorBody(BaseModel):
    """The body of every error reply."""

    error: ErrorDetail


def error_body(err: ApiError) -> dict:
    """``err`` as OpenAI's error object (also what a stream sends in-band)."""
    kind = _ERROR_TYPES.get(err.status, "server_error" if err.status >= 500 else "invalid_request_error")
    detail = ErrorDetail(message=err.message, type=kind, param=err.param, code=err.code)
    return ErrorBody(error=detail).model_dump()


def error_response(err: ApiError):
    """The reply to ``err``: its status code, the error object, ``WWW-Authenticate: Bearer`` on a 401."""
    from fastapi.responses import JSONResponse

    headers = {"WWW-Authenticate": "Bearer"} if err.status == 401 else None
    return JSONResponse(error_body(err), status_code=err.status, headers=headers)
