"""Who is asking: the API-key check (which also says whose request it is) and the caller's ``Tenant``.

A server has one tenant (no users: the run's only adapter, ``app.state.api_key`` or no auth) or one tenant per
user (``app.state.user_keys``: the presented key selects the user). ``require_key`` puts the caller's
``Tenant`` on ``request.state.tenant``; every route reads its service, collector and learning control from there,
so a route can only ever reach the caller's own sessions, turns, versions and status.

Where a key is read from is a ``KeySource``: ``BEARER`` (``Authorization: Bearer <key>``, what every route
takes today) or ``header_key(name)`` (e.g. ``x-api-key``). A protocol names its sources with
``authorized(*sources)``; the first source present in the request gives the key.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fastapi import Depends, Request

from openclaw_trl.serving.errors import ApiError
from openclaw_trl.serving.pipeline.chat_service import ChatService


def same_secret(given: str, key: str) -> bool:
    """Constant-time comparison of a presented secret with the server's key."""
    return hmac.compare_digest((given or "").encode(), key.encode())


@dataclass(frozen=True)
class Tenant:
    """One user's side of the server: their name (None: the run's only user), chat service (engine view,
    store, Best-of-N, status), collector (per-turn signals) and learning control (None: nothing trains)."""

    name: str | None
    service: ChatService
    collector: Any
    learning: Any = None


@dataclass(frozen=True)
class KeySource:
    """One place a request may carry its API key: ``read(request)`` is the key, or None when it is absent;
    ``hint`` says how to send it (in the 401 of a request that sent none)."""

    read: Callable[[Request], str | None]
    hint: str


def _bearer(request: Request) -> str | None:
    auth = request.headers.get("authorization", "")
    return auth[7:].strip() if auth.lower().startswith("bearer ") else None


BEARER = KeySource(_bearer, "'Authorization: Bearer <key>'")


def header_key(name: str) -> KeySource:
    """The key sent as the header ``name`` (e.g. ``x-api-key``)."""
    return KeySource(lambda request: request.headers.get(name), f"'{name}: <key>'")


def _presented(request: Request, sources: tuple[KeySource, ...]) -> str:
    for source in sources:
        key = source.read(request)
        if key is not None:
            return key
    what = "bearer token" if sources == (BEARER,) else "API key"
    raise ApiError(401, f"Missing {what}: send {' or '.join(s.hint for s in sources)}", "missing_api_key")


def check_key(request: Request, sources: tuple[KeySource, ...] = (BEARER,)) -> None:
    """The caller's key (read from ``sources``) is valid; ``request.state.tenant`` is then whose request it is.

    With users (``app.state.user_keys``) the key must be one user's (401 otherwise) and selects them; without,
    the key must match ``app.state.api_key`` when one is set."""
    state = request.app.state
    user_keys = getattr(state, "user_keys", None)
    if user_keys is not None:
        name = user_keys.user_of(_presented(request, sources))
        if name is None:
            raise ApiError(401, "Incorrect API key provided", "invalid_api_key")
        request.state.tenant = state.tenants[name]
        return
    key = state.api_key
    if key and not same_secret(_presented(request, sources), key):
        raise ApiError(401, "Incorrect API key provided", "invalid_api_key")
    request.state.tenant = state.tenants[None]


async def require_api_key(request: Request) -> None:
    """Dependency: ``check_key`` with the bearer key."""
    check_key(request)


def authorized(*sources: KeySource) -> list:
    """The ``dependencies`` of a route whose key may come from ``sources`` (in order; none: the bearer key)."""
    if not sources or sources == (BEARER,):
        return [Depends(require_api_key)]

    async def require(request: Request) -> None:
        check_key(request, sources)

    return [Depends(require)]


AUTHORIZED = authorized()
"""The ``dependencies`` of every bearer-key route (all but ``/healthz`` and the unknown-route answer)."""


def tenant_of(request: Request) -> Tenant:
    """The caller's ``Tenant`` (set by the key check)."""
    return request.state.tenant


def service_of(request: Request) -> ChatService:
    """The caller's ``ChatService``."""
    return tenant_of(request).service
