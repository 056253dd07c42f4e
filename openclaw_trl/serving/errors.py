"""Errors in OpenAI's format: ``{"error": {"message", "type", "param", "code"}}`` (``ErrorBody``).

Every refusal of the server is an ``ApiError`` raised where the problem is found; the app answers it with its
status code and this body (``error_response``), a stream sends the body in-band.
"""

from __future__ import annotations

from pydantic import BaseModel, ValidationError

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


class ApiError(Exception):
    """An error answered to the client in OpenAI's format, never a crash."""

    def __init__(self, status: int, message: str, code: str | None = None, param: str | None = None):
        super().__init__(message)
        self.status, self.message, self.code, self.param = status, message, code, param

    def model(self) -> ErrorBody:
        kind = _ERROR_TYPES.get(
            self.status, "server_error" if self.status >= 500 else "invalid_request_error"
        )
        return ErrorBody(error=ErrorDetail(message=self.message, type=kind, param=self.param, code=self.code))

    def body(self) -> dict:
        return self.model().model_dump()


def error_response(err: ApiError):
    from fastapi.responses import JSONResponse

    headers = {"WWW-Authenticate": "Bearer"} if err.status == 401 else None
    return JSONResponse(err.body(), status_code=err.status, headers=headers)


def format_validation_error(exc: ValidationError) -> ApiError:
    """A pydantic validation error as a 400 naming the first field at fault."""
    first = exc.errors()[0]
    loc = [
        str(p) for p in first.get("loc", ()) if not str(p).startswith(("function-", "list[", "str", "dict"))
    ]
    param = ".".join(loc) or None
    msg = first.get("msg", "invalid request").removeprefix("Value error, ")
    if first.get("type") == "missing":
        msg = "field required"
    return ApiError(400, f"Invalid value for '{param}': {msg}" if param else msg, "invalid_value", param)
