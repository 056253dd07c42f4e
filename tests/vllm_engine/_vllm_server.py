"""A real vLLM OpenAI-compatible server of the tiny model for the ``engine: vllm_server`` tests.

``VLLMServer.start`` launches ``python -m vllm.entrypoints.openai.api_server`` (this interpreter, so vLLM must
be importable) on a free port of 127.0.0.1 with the runtime LoRA API on, waits until ``/v1/models`` answers and
returns the handle; ``kill`` ends it (SIGKILL: a crash, for the failover tests) and ``stop`` ends it politely.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from openclaw_trl.engines.server_setup import serve_command

START_TIMEOUT_S = 900  # about a minute on an idle 2-core CPU; much longer when other work shares the cores
MAX_MODEL_LEN = 512


def _vllm_available() -> bool:
    """A real, importable vLLM (its spec first: a stray folder named ``vllm`` on ``sys.path`` would otherwise
    import as an empty namespace package and stay in ``sys.modules``)."""
    import importlib.util

    spec = importlib.util.find_spec("vllm")
    if spec is None or spec.origin is None:
        return False
    try:
        from vllm import LLM  # noqa: F401
    except Exception:  # noqa: BLE001 - any import failure means "no usable vLLM here"
        return False
    return True


HAVE_VLLM = _vllm_available()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class VLLMServer:
    url: str
    process: subprocess.Popen
    log_path: Path

    @classmethod
    def start(
        cls,
        model_dir,
        log_dir: Path,
        max_lora_rank: int = 16,
        extra: list[str] | None = None,
        max_loras: int = 2,
    ) -> VLLMServer:
        port = free_port()
        log_path = Path(log_dir) / f"vllm-server-{port}.log"
        argv = serve_command(
            sys.executable,
            str(model_dir),
            port,
            max_lora_rank=max_lora_rank,
            max_logprobs=-1,
            max_loras=max_loras,
            extra=["--dtype", "float32", "--max-model-len", str(MAX_MODEL_LEN), *(extra or [])],
        )
        env = dict(os.environ, VLLM_ALLOW_RUNTIME_LORA_UPDATING="True")
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        log = open(log_path, "w")  # noqa: SIM115 - the server writes to it until it ends
        process = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        server = cls(f"http://127.0.0.1:{port}", process, log_path)
        server.wait_ready()
        return server

    def wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"vLLM server exited ({self.process.returncode}); log: {self.log_tail()}")
            try:
                if httpx.get(self.url + "/v1/models", timeout=5).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(2)
        self.kill()
        raise RuntimeError(f"vLLM server not ready after {START_TIMEOUT_S} s; log: {self.log_tail()}")

    def log_tail(self, n: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-n:]

    def kill(self) -> None:
        """SIGKILL the server's process group (the API server and its engine core), as a crash would."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=60)

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.kill()
