"""The app and its server: ``create_tenants_app`` (the API routes + the Gradio UI, a ``ChatService`` per
user), ``create_app`` (the same for one user), ``ServerThread`` (uvicorn in a background thread), ``serve``
(blocking) and ``open_share_link``."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from openclaw_trl.errors import UserError
from openclaw_trl.serving.errors import ApiError
from openclaw_trl.serving.http.auth import Tenant, same_secret
from openclaw_trl.serving.pipeline.chat_service import ChatService
from openclaw_trl.serving.protocols import chat_completions, control, feedback, messages, responses
from openclaw_trl.serving.protocols.base import Protocol, render_for, unknown_routes
from openclaw_trl.serving.settings import ServerSettings
from openclaw_trl.users import UserKeys

logger = logging.getLogger(__name__)

PROTOCOLS: tuple[Protocol, ...] = (
    control.PROTOCOL,
    chat_completions.PROTOCOL,
    responses.PROTOCOL,
    feedback.PROTOCOL,
    messages.PROTOCOL,
)
"""The wire protocols the app serves (``serving.protocols``): adding one is its folder + one entry here."""

MAX_HEADER_BYTES = 1024 * 1024
"""The request head (request line + headers) uvicorn reads: a larger one gets uvicorn's plain-text 400, a
smaller one reaches the app, whose limits (e.g. ``max_session_id_chars``) answer in the protocol's JSON format."""


def create_app(
    engine,
    collector,
    store,
    settings: ServerSettings | None = None,
    status: Callable[[], dict] | None = None,
    best_of_n=None,
    learning=None,
    protocols: tuple[Protocol, ...] = PROTOCOLS,
):
    """The app of a server with one user (``create_tenants_app`` with that user alone, named None).

    ``collector`` attaches next states and writes turns to ``store`` (``openclaw_trl.sessions``);
    ``status()`` returns the learning status for ``/v1/status`` and the learning panel.
    ``best_of_n`` (a ``judging.BestOfN``) samples and quick-judges its ``n`` candidates per trainable turn.
    ``learning`` (a ``LearningControl``, or ``None`` when nothing trains) backs ``/v1/adapters``,
    ``/v1/learning`` and the UI's version controls. ``protocols``: the wire protocols served (``PROTOCOLS``).
    """
    user = UserParts(None, engine, collector, store, status, best_of_n, learning)
    return create_tenants_app([user], settings, protocols=protocols)


@dataclass(frozen=True)
class UserParts:
    """What one user's side of a server is built from: their name (None: the server's only user), engine (a
    named user's ``AdapterView`` of the shared one), collector, store, status, Best-of-N picker and learning
    control."""

    name: str | None
    engine: object
    collector: object
    store: object
    status: Callable[[], dict] | None = None
    best_of_n: object = None
    learning: object = None


def create_tenants_app(
    users: list[UserParts],
    settings: ServerSettings | None = None,
    user_keys: UserKeys | None = None,
    protocols: tuple[Protocol, ...] = PROTOCOLS,
):
    """The FastAPI app: the ``protocols``' routes + the Gradio UI at ``/`` (when ``settings.ui``), each
    request answered on its user's own chat service, collector and learning control (``app.state.tenants``:
    a ``Tenant`` per user name).

    Without ``user_keys`` the server has one user (``users`` holds one, named None) and
    ``settings.api_key_env``'s key, if any, is the API key of every request (``app.state.api_key``) and the
    UI's password. With ``user_keys`` (``app.state.user_keys``) the request's key selects its user
    (``http.auth.check_key``), and the UI asks for the user's name and key.
    """
    settings = settings or ServerSettings()
    api_key = None
    if user_keys is None:
        if len(users) != 1 or users[0].name is not None:
            raise ValueError("a server without user keys serves exactly one user, named None")
        api_key = _resolve_api_key(settings)
    tenants = {
        u.name: Tenant(
            u.name,
            ChatService(u.engine, u.collector, u.store, settings, u.status, best_of_n=u.best_of_n),
            u.collector,
            u.learning,
        )
        for u in users
    }
    app = _api_app(tenants, settings, protocols)
    app.state.api_key, app.state.user_keys = api_key, user_keys
    if settings.ui:
        if user_keys is None:
            app = _mount_ui(app, settings, api_key)
        else:
            app = _mount_blocks(app, tenants, settings, user_keys.check, USERS_LOGIN_MESSAGE)
    return app


def _api_app(tenants: dict, settings: ServerSettings, protocols: tuple[Protocol, ...] = PROTOCOLS):
    """The FastAPI app with the routes of ``protocols``, answering for ``tenants`` (closed with the app)."""
    from contextlib import asynccontextmanager

    from fastapi import FastAPI

    @asynccontextmanager
    async def lifespan(_app):
        yield
        for tenant in tenants.values():
            tenant.service.close()

    app = FastAPI(title="openclaw-trl", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.tenants, app.state.settings, app.state.user_keys = tenants, settings, None
    _add_error_handlers(app, protocols)
    for protocol in protocols:
        app.include_router(protocol.router)
    app.include_router(unknown_routes)  # last: any other /v1/... path is a 404
    return app


def _resolve_api_key(settings: ServerSettings) -> str | None:
    """The bearer key ``settings.api_key_env`` names; an empty or unset variable refuses to start (fail closed)."""
    if not settings.api_key_env:
        return None
    key = os.environ.get(settings.api_key_env, "").strip()
    if not key:
        raise ValueError(
            f"api_key_env={settings.api_key_env!r} names an environment variable that is empty or unset; "
            f"export {settings.api_key_env}=<key>, or drop api_key_env to serve without auth"
        )
    return key


def _add_error_handlers(app, protocols: tuple[Protocol, ...]) -> None:
    """Every error leaves in the shape of the protocol that owns its path (``Protocol.render_error``; OpenAI's
    elsewhere): ``ApiError``s, Starlette's HTTP errors, errors that carry their ``http_status`` and ``code``
    (the store's ``StoreFull``: 507, ``StoreBusy``: 503), and crashes (a 500)."""
    from starlette.exceptions import HTTPException as StarletteHTTPException

    def render(request, err: ApiError):
        return render_for(request.url.path, protocols)(err)

    @app.exception_handler(ApiError)
    async def _api_error(request, exc: ApiError):
        return render(request, exc)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request, exc: StarletteHTTPException):
        return render(request, ApiError(exc.status_code, str(exc.detail), "http_error"))

    @app.exception_handler(Exception)
    async def _unexpected(request, exc: Exception):
        if getattr(exc, "http_status", None):  # the store's disk full (507) or file locked (503): one line
            logger.warning("request failed: %s", exc)
            return render(request, ApiError(exc.http_status, str(exc), exc.code))
        logger.exception("unhandled error")
        return render(request, ApiError(500, f"internal error: {type(exc).__name__}", "server_error"))


def _mount_ui(app, settings: ServerSettings, api_key: str | None):
    """The Gradio UI at ``/`` for the app's only tenant. With an API key the UI asks for it too (any user
    name): it trains the model as much as the API does."""
    auth = (lambda _user, password: same_secret(password, api_key)) if api_key else None
    message = "This server's API key is the password." if api_key else None
    return _mount_blocks(app, app.state.tenants, settings, auth, message)


USERS_LOGIN_MESSAGE = "Log in with your user name; your API key is the password."
"""The login of a server with users: every event of the page then acts for the logged-in user only (their
conversations, feedback, versions and learning panel; ``serving.ui.tenants``)."""


def _mount_blocks(app, tenants: dict, settings: ServerSettings, auth, auth_message: str | None):
    """``build_ui(tenants)`` mounted at ``/`` behind ``auth`` (Gradio's login: ``auth(name, password)``, or
    None: no login); ``app.state.blocks`` is the page."""
    import gradio as gr

    from openclaw_trl.serving.ui.blocks import build_ui
    from openclaw_trl.serving.ui.layout import PAGE_CSS

    blocks = build_ui(tenants)
    app = gr.mount_gradio_app(
        app,
        blocks,
        path="/",
        server_name=settings.host,
        server_port=settings.port,
        auth=auth,
        auth_message=auth_message,
        css=PAGE_CSS,
    )
    app.state.blocks = blocks
    return app


def _port_taken(host: str, port: int) -> bool:
    """Whether binding ``host:port`` fails because another socket holds it (a port of 0 never is)."""
    if not port:
        return False
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: TIME_WAIT is free
        try:
            probe.bind((host, port))
        except OSError:
            return True
    return False


class ServerThread:
    """uvicorn in a background thread (tests, benchmarks, app.py): ``start()``, ``url``, ``stop()``."""

    def __init__(self, app, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning"):
        import uvicorn

        self.config = uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level=log_level,
            lifespan="on",
            ws="none",
            # h11 and asyncio whatever else is installed (trackio brings httptools and uvloop): the header
            # limit below is h11's, and both are what the server is tested with
            http="h11",
            loop="asyncio",
            h11_max_incomplete_event_size=MAX_HEADER_BYTES,
        )
        self.server = uvicorn.Server(self.config)
        self.thread = threading.Thread(target=self.server.run, name="openclaw-uvicorn", daemon=True)
        self.host = host

    def start(self, timeout: float = 30.0) -> ServerThread:
        taken = UserError(
            f"port {self.config.port} on {self.config.host} is in use (another server still running?): "
            "stop it, or choose another port with --port N"
        )
        if _port_taken(self.config.host, self.config.port):  # before uvicorn logs its own error
            raise taken
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self.thread.is_alive() and _port_taken(self.config.host, self.config.port):
                raise taken
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        return self

    @property
    def port(self) -> int:
        return self.server.servers[0].sockets[0].getsockname()[1]

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def stop(self, timeout: float = 10.0) -> None:
        self.server.should_exit = True
        self.thread.join(timeout)

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def serve(app, host: str = "127.0.0.1", port: int = 7860, log_level: str = "info") -> None:
    """Blocking: run ``app`` with uvicorn until interrupted (Ctrl-C)."""
    import uvicorn

    uvicorn.run(
        app,
        host=host,
        port=port,
        log_level=log_level,
        ws="none",
        http="h11",  # as in ServerThread
        loop="asyncio",
        h11_max_incomplete_event_size=MAX_HEADER_BYTES,
    )


def open_share_link(host: str, port: int) -> str:
    """A public ``*.gradio.live`` tunnel to ``host:port`` (needs internet access); returns its URL."""
    import secrets

    from gradio import networking

    return networking.setup_tunnel(host, port, secrets.token_urlsafe(32), None, None)
