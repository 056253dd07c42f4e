"""The one OpenAI-compatible HTTP client of the package.

Everything that talks to an OpenAI-compatible server goes through :class:`OpenAIClient`: the ``openai``
judge backend (any ``/v1/chat/completions`` endpoint), the simulated users and the GSM8K evaluation
(which talk to our own server over HTTP as a person's client would). It is a thin layer over
``httpx`` (the ``openai`` package is not a runtime dependency): a base URL that ends with ``/v1``, a
bearer key, per-request headers, and JSON in and out. Errors are ``httpx`` errors (``raise_for_status``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import httpx


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

    def post(self, path: str, body: dict, headers: dict | None = None) -> httpx.Response:
        """``POST base_url + path`` with the bearer key; raises on an HTTP error status."""
        all_headers = dict(headers or {})
        if self.api_key:
            all_headers["Authorization"] = f"Bearer {self.api_key}"
        response = self.http.post(self.base_url + path, json=body, headers=all_headers, timeout=self.timeout)
        response.raise_for_status()
        return response

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
