"""``Protocol``: what the app needs to serve one wire protocol: its routes, the paths it owns and how it
renders an ``ApiError`` on them; and the answer to a ``/v1/...`` path no protocol has (``unknown_routes``).

Errors on a path no protocol owns (an unknown ``/v1/...`` route, a crash outside every protocol) are
rendered in OpenAI's shape (``DEFAULT_RENDER``), as the server's first protocols answer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from fastapi import APIRouter

from openclaw_trl.serving.errors import ApiError
from openclaw_trl.serving.protocols.openai_errors import error_response

DEFAULT_RENDER = error_response


@dataclass(frozen=True)
class Protocol:
    """One wire protocol: ``router`` (its routes, each with its own key check: ``http.auth.authorized``),
    ``paths`` (the path prefixes it owns: an error raised on one of them is its to render) and
    ``render_error`` (an ``ApiError`` -> the HTTP response, in the protocol's own error shape)."""

    name: str
    router: APIRouter
    paths: tuple[str, ...]
    render_error: Callable = DEFAULT_RENDER

    def owns(self, path: str) -> bool:
        return any(path == p or path.startswith(p.rstrip("/") + "/") for p in self.paths)


def render_for(path: str, protocols: Sequence[Protocol]) -> Callable:
    """How an error on ``path`` is rendered: by the protocol that owns it, else ``DEFAULT_RENDER``."""
    for protocol in protocols:
        if protocol.owns(path):
            return protocol.render_error
    return DEFAULT_RENDER


unknown_routes = APIRouter()
"""Mounted after every protocol: any other ``/v1/...`` path is a 404 ``unknown_url``."""


@unknown_routes.api_route("/v1/{rest:path}", methods=["GET", "POST", "PUT", "DELETE", "PATCH"])
async def unknown_route(rest: str):
    raise ApiError(404, f"Unknown API route /v1/{rest}", "unknown_url")
