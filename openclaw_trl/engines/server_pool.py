"""The vLLM servers behind ``engine: vllm_server``: who gets the next request, who is out of rotation.

Rules (all under one lock):

* **Least outstanding requests.** A request goes to the healthy server with the fewest requests in flight
  (ties: the one listed first).
* **Serving ahead of learning.** A ``learn`` request (judge vote, teacher pair) needs one of the server's
  ``max_learn_requests`` learning slots and waits for one; a ``serve`` request never waits for a slot. A chat
  request therefore queues behind at most ``max_learn_requests`` learning requests per server, which vLLM's
  continuous batching runs alongside it.
* **Out of rotation, retried later.** A server that fails (connection refused or reset, timeout, 5xx, an
  adapter it lost) is taken out of rotation; the request is retried on another one. A background thread probes
  the servers out of rotation every ``retry_s`` seconds and puts one back once its probe and ``on_revive`` (the
  engine loads the adapters in use there) succeed. When no server is healthy, a request waits up to
  ``wait_s`` seconds for one to come back, then fails with every server's last error.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from openclaw_trl.engines.base import Priority
from openclaw_trl.openai_client import OpenAIClient

logger = logging.getLogger(__name__)


class ServerFailure(RuntimeError):
    """The server could not serve the request (unreachable, timed out, 5xx, lost state): try another one."""


@dataclass(eq=False)
class Server:
    """One vLLM OpenAI-compatible server and the requests we have in flight there."""

    url: str  # the server root, e.g. http://10.0.0.5:8000 (the API is under /v1)
    client: OpenAIClient = field(repr=False)
    healthy: bool = True
    outstanding: int = 0
    learning: int = 0
    last_error: str = ""
    loaded: set[str] = field(default_factory=set)  # adapter names this server has (as far as we know)


class ServerPool:
    """Picks servers for requests and keeps failing ones out of rotation (see the module docstring).

    Args:
        urls: server roots (``http(s)://host:port``; a trailing ``/v1`` is accepted and removed).
        api_key: the bearer key every server requires (``vllm serve --api-key``), or ``None``.
        timeout_s: seconds an HTTP request may take (for a stream: between two chunks) before the server
            counts as failing.
        max_learn_requests: learning requests in flight per server.
        retry_s: seconds between probes of a server out of rotation.
        wait_s: how long a request waits for a healthy server when none is.

    ``on_revive(server)``, when set, runs before a server out of rotation is put back (it raises to keep it out).
    """

    def __init__(
        self,
        urls: list[str],
        api_key: str | None = None,
        timeout_s: float = 120.0,
        max_learn_requests: int = 4,
        retry_s: float = 5.0,
        wait_s: float = 30.0,
    ) -> None:
        if not urls:
            raise ValueError("engine vllm_server needs at least one server URL (vllm_server_urls)")
        http = httpx.Client(
            timeout=httpx.Timeout(timeout_s, connect=min(10.0, timeout_s)),
            limits=httpx.Limits(max_connections=256, max_keepalive_connections=64),
        )
        self._http = http
        self.servers = [
            Server(root, OpenAIClient(root + "/v1", model="", api_key=api_key, timeout=timeout_s, http=http))
            for root in (normalise_url(u) for u in urls)
        ]
        self.max_learn_requests = max(1, int(max_learn_requests))
        self.retry_s = retry_s
        self.wait_s = wait_s
        self.on_revive: Callable[[Server], None] | None = None
        self._cond = threading.Condition()
        self._closed = threading.Event()
        self._reviver = threading.Thread(target=self._revive_loop, name="vllm-server-reviver", daemon=True)
        self._reviver.start()

    # ------------------------------------------------------------------ requests
    def acquire(self, priority: Priority) -> Server:
        """The server for one request (counted as outstanding until ``release``); see the module docstring."""
        deadline = time.monotonic() + self.wait_s
        with self._cond:
            while True:
                if self._closed.is_set():
                    raise RuntimeError("the vLLM server pool is closed")
                healthy = [s for s in self.servers if s.healthy]
                if priority == "learn":
                    healthy = [s for s in healthy if s.learning < self.max_learn_requests]
                if healthy:
                    server = min(healthy, key=lambda s: s.outstanding)
                    server.outstanding += 1
                    server.learning += priority == "learn"
                    return server
                if not any(s.healthy for s in self.servers):
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise RuntimeError(f"no vLLM server is reachable: {self.describe_errors()}")
                    self._cond.wait(remaining)
                else:  # learning slots are full: wait for one, however long the chat load keeps them busy
                    self._cond.wait(1.0)

    def release(self, server: Server, priority: Priority) -> None:
        with self._cond:
            server.outstanding -= 1
            server.learning -= priority == "learn"
            self._cond.notify_all()

    def mark_down(self, server: Server, error: BaseException | str) -> None:
        """Take ``server`` out of rotation (the reviver retries it every ``retry_s`` seconds)."""
        with self._cond:
            if server.healthy:
                logger.warning("vLLM server %s out of rotation: %s", server.url, error)
            server.healthy = False
            server.last_error = str(error)[:300]
            server.loaded.clear()  # a restarted server has no adapters: the reviver reloads what is in use
            self._cond.notify_all()

    def healthy_servers(self) -> list[Server]:
        with self._cond:
            return [s for s in self.servers if s.healthy]

    def describe_errors(self) -> str:
        return "; ".join(f"{s.url}: {s.last_error or 'ok'}" for s in self.servers)

    # ------------------------------------------------------------------ revival
    def _revive_loop(self) -> None:
        while not self._closed.wait(self.retry_s):
            for server in [s for s in self.servers if not s.healthy]:
                try:
                    probe(server)
                    if self.on_revive is not None:
                        self.on_revive(server)
                except Exception as exc:  # noqa: BLE001 - still failing: stay out of rotation
                    server.last_error = str(exc)[:300]
                    continue
                with self._cond:
                    server.healthy = True
                    server.last_error = ""
                    self._cond.notify_all()
                logger.warning("vLLM server %s back in rotation", server.url)

    def close(self) -> None:
        self._closed.set()
        with self._cond:
            self._cond.notify_all()
        self._reviver.join(timeout=10)
        self._http.close()


def normalise_url(url: str) -> str:
    """``http(s)://host:port`` without a trailing ``/`` or ``/v1``; ``ValueError`` for anything else."""
    from urllib.parse import urlparse

    parsed = urlparse(url.strip())
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ValueError(f"vLLM server URL must be http(s)://host:port, got {url!r}")
    root = url.strip().rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root


def probe(server: Server) -> dict:
    """``GET /v1/models`` (raises ``ServerFailure`` unless it answers 200): the served models."""
    try:
        response = server.client.get("/models")
    except httpx.HTTPError as exc:
        raise ServerFailure(f"{type(exc).__name__}: {exc}") from exc
    return response.json()


def raise_for_server(response: httpx.Response) -> None:
    """A 4xx is the request's fault (``ValueError`` with the server's message), except a 404 for a model
    name, which means the server lost an adapter (a restart); a 5xx is the server's (``ServerFailure``)."""
    if response.status_code < 400:
        return
    try:
        message = response.json().get("error", {}).get("message") or response.text
    except ValueError:
        message = response.text
    if response.status_code >= 500 or response.status_code == 404:
        raise ServerFailure(f"HTTP {response.status_code}: {message[:300]}")
    raise ValueError(f"the vLLM server refused the request (HTTP {response.status_code}): {message[:500]}")
