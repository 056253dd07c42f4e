"""The one OpenAI-compatible HTTP client of the package.

Everything that talks to an OpenAI-compatible server goes through :class:`OpenAIClient`: the ``openai``
judge backend (any ``/v1/chat/completions`` endpoint), the simulated users and the GSM8K evaluation
(which talk to our own server over HTTP as a person's client would) and ``engine: vllm_server`` (stock vLLM
servers: completions, streams, the runtime LoRA API). It is a thin layer over
``httpx`` (the ``openai`` package is not a runtime dependency): a base URL that ends with ``/v1``, a
bearer key, per-request headers, and JSON in and out. Errors are ``httpx`` errors (``raise_for_status``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import httpx

SIDE_TURN = {"X-Turn-Type": "side"}
"""Headers of a request made for the system itself (a judge vote, a simulated user's line): a server of ours
serves it and never learns from it; other servers ignore the header."""


@dataclass
class OpenAIClient:
    """An OpenAI-compatible endpoint.

    Args:
        base_url: the API root, ending with ``/v1`` (``http://127.0.0.1:7860/v1``).
        model: the ``model`` field of every chat request.
        api_key: sent as ``Authorization: Bearer <api_key>`` when set.
        timeout: seconds per request.
        http: an ``httpx.Client`` to use (tests inject one with a mock transport); by default one is
            created and closed with this client.
    """

    base_url: str
    model: str
    api_key: str | None = None
    timeout: float = 300.0
    http: httpx.Client | None = field(default=None, repr=False)

    def __post_init__(self):
        self.base_url = self.base_url.rstrip("/")
        self._owns_http = self.http is None
        if self.http is None:
            self.http = httpx.Client(timeout=self.timeout)

    def _headers(self, headers: dict | None) -> dict:
        all_headers = dict(headers or {})
        if self.api_key:
            all_headers["Authorization"] = f"Bearer {self.api_key}"
        return all_headers

    def post(self, path: str, body: dict, headers: dict | None = None, check: bool = True) -> httpx.Response:
        """``POST base_url + path`` with the bearer key; raises on an HTTP error status unless ``check=False``."""
        response = self.http.post(
            self.base_url + path, json=body, headers=self._headers(headers), timeout=self.timeout
        )
        if check:
            response.raise_for_status()
        return response

    def get(self, path: str) -> httpx.Response:
        """``GET base_url + path`` with the bearer key; raises on an HTTP error status."""
        response = self.http.get(self.base_url + path, headers=self._headers(None), timeout=self.timeout)
        response.raise_for_status()
        return response

    @contextmanager
    def stream(self, path: str, body: dict) -> Iterator[httpx.Response]:
        """``POST base_url + path`` as a stream (the status is not checked: read it, then ``sse_events``);
        ``timeout`` bounds each wait for the next chunk."""
        with self.http.stream(
            "POST", self.base_url + path, json=body, headers=self._headers(None), timeout=self.timeout
        ) as response:
            yield response

    def chat(
        self, messages: list[dict], headers: dict | None = None, **params
    ) -> tuple[dict, httpx.Response]:
        """One ``/chat/completions`` request: the first choice's message and the raw response.

        ``params`` are request fields (``max_tokens``, ``temperature``, ...); ``None`` values are left out.
        """
        body = {"model": self.model, "messages": messages}
        body.update({k: v for k, v in params.items() if v is not None})
        response = self.post("/chat/completions", body, headers)
        return response.json()["choices"][0]["message"], response

    def close(self) -> None:
        if self._owns_http and self.http is not None:
            self.http.close()

    def __enter__(self) -> OpenAIClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def sse_events(response: httpx.Response) -> Iterator[dict]:
    """The JSON objects of a server-sent event stream (``data: {...}`` lines), up to ``data: [DONE]``."""
    for line in response.iter_lines():
        if not line.startswith("data:"):
            continue
        data = line[len("data:") :].strip()
        if data == "[DONE]":
            return
        yield json.loads(data)
