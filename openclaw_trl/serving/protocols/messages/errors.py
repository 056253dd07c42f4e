"""Errors of the Messages API in Anthropic's shape: ``{"type": "error", "error": {"type", "message"}}``.

The server's refusals are ``ApiError``s wherever they are raised (validation, limits, sessions, the chat
pipeline); on the ``/v1/messages`` routes they are answered with the same status code and this body, the
``error.type`` following Anthropic's table (400 ``invalid_request_error``, 401 ``authentication_error``,
403 ``permission_error``, 404 ``not_found_error``, 413 ``request_too_large``, 429 ``rate_limit_error``,
500 ``api_error``, 529 ``overloaded_error``). A stream whose status line has left reports one as an ``error``
event.
"""

from __future__ import annotations

from fastapi.responses import JSONResponse

from openclaw_trl.serving.errors import ApiError

_ERROR_TYPES = {
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def error_type(status: int) -> str:
    """Anthropic's ``error.type`` of a status code (other 4xx: ``invalid_request_error``, 5xx: ``api_error``)."""
    if status in _ERROR_TYPES:
        return _ERROR_TYPES[status]
    return "api_error" if status >= 500 else "invalid_request_error"


def error_body(err: ApiError) -> dict:
    """The error object of ``err`` (the body of the reply, or the data of a stream's ``error`` event)."""
    return {"type": "error", "error": {"type": error_type(err.status), "message": err.message}}


def error_response(err: ApiError) -> JSONResponse:
    """``err`` answered with its status code and Anthropic's error body."""
    return JSONResponse(error_body(err), status_code=err.status)
