"""``engine: vllm_server``: the engine contract over one or more stock vLLM OpenAI-compatible servers.

The servers run ``vllm serve BASE --enable-lora --logprobs-mode processed_logprobs`` with
``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`` (checked at start). This process talks to them over HTTP only, so it
needs no vLLM installed; what it does:

* **Generation** streams ``/v1/completions`` with the prompt as token ids (``return_token_ids``: the sampled
  ids, never re-tokenized text; ``logprobs=0``: the sampled token's log-prob). With
  ``--logprobs-mode processed_logprobs`` that log-prob is taken after temperature scaling, i.e.
  ``log_softmax(logits / T)``, the package's convention, whenever no top-p / top-k truncation is asked (greedy
  requests: T = 1). A truncated request is re-scored on the same adapter (as ``score`` does), because vLLM
  renormalises processed log-probs over the truncated support.
* **Scoring** sends ``prompt + completion`` with ``max_tokens=1`` and reads vLLM's ``prompt_logprobs`` at the
  completion positions. vLLM computes them from the raw logits (T = 1); at another T they are renormalised
  as ``log_softmax(logprob / T)`` (shift invariance of log-softmax), which needs the full vocabulary
  (``prompt_logprobs=-1``, allowed by ``vllm serve --max-logprobs -1``): fine for small vocabularies and
  tests, slow for 151k ones, so recipes score at T = 1. top-K comes from the same list (``--max-logprobs``
  must be at least K).
* **Weights.** ``base`` requests name the served base model; ``policy`` requests name the active adapter
  version. ``publish_adapter`` writes the adapter to its own directory under ``adapter_dir`` (a path every
  server can read: local on one machine, a shared mount across machines), loads it on every healthy server
  (``POST /v1/load_lora_adapter``), and switches ``policy`` to it only when all of them have it. Each request
  keeps the version it started on, so a reply never mixes versions; a version that is neither active nor used
  by a request in flight is unloaded (``POST /v1/unload_lora_adapter``) and its directory removed.
* **One adapter per user** (``GenerationRequest.adapter``, ``score(adapter=)``, ``publish_adapter(name=)``).
  Each user's versions are loaded under names of their own (``<engine prefix>-<user>-v<version>-<n>``; a
  request's ``model`` is that name), with an active version per user (``adapter_version(name)``; 0 and the
  base weights before the user's first publish). ``None`` is the run's only adapter, as before. A vLLM server
  runs at most ``--max-loras`` different adapters in one batch; requests on further adapters wait there for a
  slot, so the servers must be started with ``--max-loras`` of at least ``max_adapters`` (the users whose
  adapters serve at once; ``OpenClawConfig.max_adapters``, by default the number of users up to 8), plus one
  so that a new version can run beside the old one during a publish. The engine reads each server's
  ``--max-loras`` from its ``/metrics`` (``vllm:lora_requests_info``) at start and refuses a smaller one.
* **Several servers** (``server_pool``): least outstanding requests, at most ``max_learn_requests`` learning
  requests per server (``priority``), a failing server out of rotation and retried later. A request on a
  server that fails is retried on another; a generation that already streamed tokens continues from them
  (prompt + the tokens so far), so the caller sees one completion. A stop string that spans the tokens before
  and after such a switch is not detected (the server only checks the text it generates).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from openclaw_trl.engines.adapters import adapter_state_dict_to_dir
from openclaw_trl.engines.base import (
    Completion,
    GenerationRequest,
    Priority,
    Scores,
    Weights,
    check_adapter_name,
    check_generate_args,
    check_score_args,
)
from openclaw_trl.engines.server_pool import Server, ServerFailure, ServerPool, probe, raise_for_server
from openclaw_trl.engines.server_requests import (
    Sampled,
    completion_body,
    prompt_logprob_scores,
    results_in_order,
    score_body,
    single_draws,
    take_chunk,
)
from openclaw_trl.engines.server_setup import (
    check_max_loras,
    check_server,
    served_base_model,
    wait_for_servers,
)
from openclaw_trl.errors import UserError
from openclaw_trl.openai_client import sse_events

logger = logging.getLogger(__name__)

_FAILURES = (ServerFailure, httpx.TransportError)  # transport = connect/read errors and timeouts


@dataclass(eq=False)
class _Version:
    """A servable set of weights: the base model (``adapter is None``) or one published adapter."""

    version: int
    model: str  # the ``model`` field of its requests: the base model name or the adapter's name
    adapter: Path | None = None
    users: int = 0
    owner: str | None = None  # the user whose adapter it is (None: the run's only adapter)


class VLLMServerEngine:
    """Generation and scoring on running vLLM servers (see the module docstring).

    Args:
        model_path: the base model's directory or Hub id: its tokenizer is loaded here, and every server must
            serve the same weights.
        urls: the servers' roots (``http://host:port``).
        api_key_env: name of the environment variable holding the servers' bearer key (``vllm serve
            --api-key``); ``None`` = no key.
        lora_config: ``peft.LoraConfig`` of published state dicts (an adapter directory carries its own).
        adapter_dir: where adapter versions are written; must be readable by every server at the same path
            (default: a temporary directory, which only servers on this machine can read).
        request_timeout: seconds a server may take to answer (a stream: between two tokens) before it is
            taken out of rotation and the request moves on.
        startup_timeout: seconds to wait for the first server to answer at start.
        max_learn_requests: learning requests (judge votes, teacher pairs) in flight per server.
        retry_s: seconds between probes of a server out of rotation.
        max_workers: threads that wait for HTTP answers, per priority.
        max_adapters: users' adapters served at once (``OpenClawConfig.max_adapters``); each server's
            ``--max-loras`` must be at least this (checked at start; 1 = the run's only adapter, unchecked).
        tokenizer: an already loaded tokenizer (default: loaded from ``model_path``).
    """

    def __init__(
        self,
        model_path: str | Path,
        *,
        urls: list[str],
        api_key_env: str | None = None,
        lora_config=None,
        adapter_dir: str | Path | None = None,
        request_timeout: float = 120.0,
        startup_timeout: float = 240.0,
        max_learn_requests: int = 4,
        retry_s: float = 5.0,
        max_workers: int = 64,
        max_adapters: int = 1,
        tokenizer=None,
    ) -> None:
        if isinstance(max_adapters, bool) or not isinstance(max_adapters, int) or max_adapters < 1:
            raise ValueError(f"max_adapters must be an integer >= 1, got {max_adapters!r}")
        self.max_adapters = max_adapters
        self.model_path = str(model_path)
        self.lora_config = lora_config
        api_key = None
        if api_key_env:
            api_key = os.environ.get(api_key_env)
            if not api_key:
                raise UserError(f"vllm_server_api_key_env names {api_key_env!r}, which is not set")
        self._pool = ServerPool(
            urls, api_key, request_timeout, max_learn_requests, retry_s, wait_s=request_timeout
        )
        self._owns_adapter_dir = adapter_dir is None
        self.adapter_dir = Path(adapter_dir or tempfile.mkdtemp(prefix="openclaw-served-adapters-"))
        self.adapter_dir.mkdir(parents=True, exist_ok=True)
        self._prefix = f"openclaw-{uuid.uuid4().hex[:8]}"  # adapter names of this engine on shared servers
        self._lock = threading.Lock()  # versions and their users
        self._publish_lock = threading.Lock()  # one publish (or server revival) at a time
        self._executors = {p: ThreadPoolExecutor(max_workers, f"vllm-server-{p}") for p in ("serve", "learn")}
        self.stats = {"requests": 0, "failovers": 0, "publishes": 0}
        try:
            models = wait_for_servers(self._pool, startup_timeout)
            self.base_model, self.max_model_len = served_base_model(models)
            for server in self._pool.healthy_servers():
                check_server(server, self.base_model)
                if max_adapters > 1:
                    check_max_loras(server, max_adapters)
        except BaseException:
            self._pool.close()
            raise
        self._base = _Version(0, self.base_model)
        # the active version per adapter name (None: the run's only adapter); absent = the base weights
        self._active: dict[str | None, _Version] = {}
        self._published: list[_Version] = []
        self._seq = 0
        self.policy_version = 0
        self._pool.on_revive = self._revive
        if tokenizer is None:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        self.tokenizer = tokenizer

    # ------------------------------------------------------------------ public API
    def generate(
        self,
        requests: list[GenerationRequest],
        on_token=None,
        priority: Priority = "serve",
        timeout_s: float | None = None,
    ) -> list[Completion]:
        """Sample every request on some server, concurrently; ``on_token(index, token_id)`` as tokens arrive.

        A request with ``sampling.n = N`` is sent as N single requests (seeds ``seed, seed + 1, ...`` when
        seeded), spread over the servers like any others; on one server vLLM's prefix cache computes the
        shared prompt once. Its N completions come back consecutively, under their flat indices. ``timeout_s``:
        give up after that many seconds (``TimeoutError``; see ``server_requests.results_in_order``)."""
        if not requests:
            return []
        check_generate_args(requests, priority)
        rows = [row for r in requests for row in single_draws(r)]
        pool = self._executors[priority]
        gave_up = threading.Event()
        futures = [
            pool.submit(self._generate_row, i, r, on_token, priority, gave_up) for i, r in enumerate(rows)
        ]
        return results_in_order(futures, timeout_s, gave_up)

    def score(
        self,
        prompt_ids: list[list[int]],
        completion_ids: list[list[int]],
        weights: Weights = "base",
        top_k: int = 0,
        temperature: float = 1.0,
        priority: Priority = "learn",
        timeout_s: float | None = None,
        adapter: str | None = None,
    ) -> Scores:
        """Per-token log-probs (and top-K) of each completion after its prompt, all on one weights version;
        ``timeout_s`` as for ``generate``; ``adapter``: whose adapter ``policy`` means."""
        check_score_args(prompt_ids, completion_ids, weights, top_k, temperature, priority, adapter)
        with self._pin(weights, adapter) as version:
            pool = self._executors[priority]
            futures = [
                pool.submit(self._score_row, version, list(p), list(c), top_k, temperature, priority)
                for p, c in zip(prompt_ids, completion_ids)
            ]
            return Scores.from_pairs(results_in_order(futures, timeout_s, threading.Event()), top_k)

    def publish_adapter(self, adapter, version: int, name: str | None = None) -> None:
        """Write ``adapter`` (PEFT state dict or adapter directory), load it on every healthy server, then
        serve it as the ``policy`` of ``name`` (a user's name; None = the run's only adapter); on any refusal
        the previous version stays active and the error is raised."""
        check_adapter_name(name)
        with self._publish_lock:
            self._seq += 1
            user = "" if name is None else f"-{name}"
            model = f"{self._prefix}{user}-v{int(version)}-{self._seq}"  # unique per (user, version, publish)
            path = self._write_adapter(adapter, self.adapter_dir / model)
            try:
                self._load_everywhere(model, path)
            except BaseException:
                shutil.rmtree(path, ignore_errors=True)
                raise
            new = _Version(int(version), model, path, owner=name)
            with self._lock:
                self._published.append(new)
                self._active[name] = new
                if name is None:
                    self.policy_version = new.version
            self.stats["publishes"] += 1
        self._collect()

    def adapter_version(self, name: str | None = None) -> int:
        """The version serving ``policy`` for ``name`` (0 before its first publish); None: ``policy_version``."""
        check_adapter_name(name)
        with self._lock:
            active = self._active.get(name)
        return 0 if active is None else active.version

    def close(self) -> None:
        """Unload this engine's adapters from the servers and remove their directories."""
        for executor in self._executors.values():
            executor.shutdown(wait=False, cancel_futures=True)
        with self._lock:
            published, self._published = self._published, []
        for server in self._pool.healthy_servers():
            for version in published:
                self._unload(server, version.model)
        for version in published:
            shutil.rmtree(version.adapter, ignore_errors=True)
        self._pool.close()
        if self._owns_adapter_dir:
            shutil.rmtree(self.adapter_dir, ignore_errors=True)

    def __enter__(self) -> VLLMServerEngine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ versions
    @contextmanager
    def _pin(self, weights: str, adapter: str | None = None):
        """The version ``weights`` names now for adapter ``adapter`` (the base weights for ``base``, or before
        the adapter's first publish), counted as in use until the block ends."""
        with self._lock:
            active = self._active.get(adapter)
            version = active if weights == "policy" and active is not None else self._base
            version.users += 1
        try:
            yield version
        finally:
            with self._lock:
                version.users -= 1
            self._collect()

    def _collect(self) -> None:
        """Unload (on every server) and delete the adapters that are neither active nor in use."""
        with self._lock:
            active = list(self._active.values())
            retired = [v for v in self._published if all(v is not a for a in active) and v.users == 0]
            self._published = [v for v in self._published if v not in retired]
        for version in retired:
            for server in self._pool.healthy_servers():
                self._unload(server, version.model)
            shutil.rmtree(version.adapter, ignore_errors=True)

    def _write_adapter(self, adapter, path: Path) -> Path:
        if isinstance(adapter, (str, Path)):
            shutil.copytree(adapter, path)  # a copy: the trainer may overwrite its directory later
            return path
        if self.lora_config is None:
            raise ValueError(
                "VLLMServerEngine has no LoraConfig: pass lora_config= or publish an adapter directory"
            )
        return adapter_state_dict_to_dir(adapter, self.lora_config, path)

    def _load_everywhere(self, name: str, path: Path) -> None:
        servers = self._pool.healthy_servers()
        if not servers:
            raise RuntimeError(
                f"cannot publish: no vLLM server is reachable ({self._pool.describe_errors()})"
            )
        results = list(self._executors["serve"].map(lambda s: self._try_load(s, name, path), servers))
        refused = [(s, r) for s, r in zip(servers, results) if isinstance(r, ValueError)]
        if refused or not any(r is None for r in results):
            for server in servers:
                self._unload(server, name)
            detail = "; ".join(f"{s.url}: {r}" for s, r in zip(servers, results) if r is not None)
            raise RuntimeError(f"the vLLM servers did not load adapter {path}: {detail}")

    def _try_load(self, server: Server, name: str, path: Path) -> BaseException | None:
        """Load one adapter on one server: ``None`` when loaded, else the error (a failing server goes out of
        rotation; an adapter the server refuses is a ``ValueError``)."""
        try:
            body = {"lora_name": name, "lora_path": str(path.resolve())}
            response = server.client.post("/load_lora_adapter", body, check=False)
            if response.status_code >= 400:
                raise ValueError(f"HTTP {response.status_code}: {response.text[:400]}")
            server.loaded.add(name)
            return None
        except httpx.TransportError as exc:
            self._pool.mark_down(server, exc)
            return exc
        except ValueError as exc:
            return exc

    def _unload(self, server: Server, name: str) -> None:
        try:
            server.client.post("/unload_lora_adapter", {"lora_name": name}, check=False)
        except httpx.HTTPError as exc:  # the server is failing: its revival unloads what is not needed
            logger.info("unloading %s from %s failed: %s", name, server.url, exc)
        server.loaded.discard(name)

    def _revive(self, server: Server) -> None:
        """Before ``server`` returns to rotation: load the adapters in use, unload this engine's others."""
        with self._publish_lock:
            with self._lock:
                active = list(self._active.values())
                needed = {
                    v.model: v.adapter for v in self._published if v.users > 0 or any(v is a for a in active)
                }
            present = {m["id"] for m in probe(server).get("data", [])}
            for name, path in needed.items():
                if name not in present:
                    error = self._try_load(server, name, path)
                    if error is not None:
                        raise ServerFailure(f"could not reload adapter {name}: {error}")
            for name in present - set(needed):
                if name.startswith(self._prefix):
                    self._unload(server, name)
            server.loaded = set(needed)

    # ------------------------------------------------------------------ requests
    def _on_any_server(self, priority: Priority, call):
        """``call(server)`` on the least busy healthy server; on a failure, again on another one."""
        while True:
            server = self._pool.acquire(priority)
            try:
                self.stats["requests"] += 1
                return call(server)
            except _FAILURES as exc:
                self._pool.mark_down(server, exc)
                self.stats["failovers"] += 1
            finally:
                self._pool.release(server, priority)

    def _generate_row(
        self, index: int, request: GenerationRequest, on_token, priority: Priority, gave_up: threading.Event
    ) -> Completion:
        with self._pin(request.weights, request.adapter) as version:
            sampled = Sampled(gave_up=gave_up)
            self._on_any_server(
                priority, lambda s: self._sample(s, version, request, sampled, index, on_token)
            )
            sp = request.sampling
            if (
                sp.temperature > 0
                and (sp.top_p < 1.0 or sp.top_k > 0)
                and sampled.tokens
                and not gave_up.is_set()
            ):
                sampled.logprobs = self._score_row(
                    version, request.prompt_ids, sampled.tokens, 0, sp.temperature, priority
                )[0]
        return Completion(
            token_ids=sampled.tokens,
            logprobs=sampled.logprobs,
            finish_reason="length" if sampled.finish_reason == "length" else "stop",  # type: ignore[arg-type]
            policy_version=version.version,
        )

    def _sample(self, server: Server, version: _Version, request, sampled: Sampled, index: int, on_token):
        """Stream one completion from ``server``, continuing after the tokens ``sampled`` already holds."""
        sp = request.sampling
        remaining = sp.max_new_tokens - len(sampled.tokens)
        if remaining <= 0:
            sampled.finish_reason = "length"
            return
        body = completion_body(version.model, request, sampled.tokens, remaining)
        with server.client.stream("/completions", body) as response:
            if response.status_code >= 400:
                response.read()
                raise_for_server(response)
            for event in sse_events(response):
                if sampled.gave_up is not None and sampled.gave_up.is_set():
                    sampled.finish_reason = "length"  # leaving the stream closes it: the server aborts
                    return
                for choice in event.get("choices", []):
                    take_chunk(choice, sampled, index, on_token)
        if sampled.finish_reason not in ("stop", "length"):
            raise ServerFailure(f"the stream ended without a finish reason ({sampled.finish_reason})")

    def _score_row(self, version: _Version, prompt, completion, top_k: int, temperature: float, priority):
        if not completion:
            return [], [], []
        body = score_body(version.model, prompt, completion, top_k, temperature)

        def call(server: Server):
            response = server.client.post("/completions", body, check=False)
            raise_for_server(response)
            return response.json()["choices"][0]["prompt_logprobs"]

        plp = self._on_any_server(priority, call)
        return prompt_logprob_scores(plp, len(prompt), list(completion), temperature, top_k)
