"""The policy adapters of the vLLM engine: versioned directories, LoRA ids, who still uses which adapter.

Each publish writes the adapter to its own directory ``v{version}-id{lora_id}`` under ``root`` and registers
it with vLLM under a new LoRA id. Requests keep the ``LoRARequest`` they started with; an adapter that is
neither the active one nor used by a running request is unloaded and its directory removed. Everything but
``prepare`` runs on the engine's worker thread.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from pathlib import Path

from openclaw_trl.engines.adapters import adapter_state_dict_to_dir


class LoraRegistry:
    """Adapters registered with ``engine`` (a vLLM ``LLMEngine``); ``root`` defaults to a temporary directory
    that ``cleanup`` removes."""

    def __init__(self, engine, root: str | Path | None = None) -> None:
        self._engine = engine
        self.root = Path(root or tempfile.mkdtemp(prefix="openclaw-vllm-adapters-"))
        self._owns_root = root is None
        self.active = None  # the LoRARequest serving `policy`; None = base weights
        self._users: dict[int, int] = {}  # lora_int_id -> requests in flight
        self._dirs: dict[int, Path] = {}
        self._next_id = 1
        self._id_lock = threading.Lock()

    def prepare(self, adapter, version: int, lora_config) -> tuple[int, Path]:
        """Write ``adapter`` (a PEFT state dict or an adapter directory) to a fresh directory; ``(id, path)``.

        A directory is copied: the trainer may overwrite its own later. A state dict needs ``lora_config``.
        """
        with self._id_lock:
            lora_id = self._next_id
            self._next_id += 1
        path = self.root / f"v{int(version)}-id{lora_id}"
        if isinstance(adapter, (str, Path)):
            shutil.copytree(adapter, path)
        elif lora_config is None:
            raise ValueError(
                "VLLMEngine has no LoraConfig: pass lora_config= or publish an adapter directory"
            )
        else:
            adapter_state_dict_to_dir(adapter, lora_config, path)
        return lora_id, path

    def register(self, lora_id: int, path: Path, version: int) -> None:
        """Load the adapter in ``path`` into vLLM and make it the active one."""
        from vllm.lora.request import LoRARequest

        request = LoRARequest(f"policy-v{version}-{lora_id}", lora_id, str(path))
        if not self._engine.add_lora(request):
            raise RuntimeError(f"vLLM refused the adapter in {path}")
        self._dirs[lora_id] = path
        self._users.setdefault(lora_id, 0)
        self.active = request
        self.collect()

    def for_weights(self, weights: str):
        """The ``LoRARequest`` of ``weights`` (``None`` = the base weights)."""
        return self.active if weights == "policy" else None

    def use(self, lora, delta: int) -> None:
        """Count a request that starts (``+1``) or ends (``-1``) on ``lora``."""
        if lora is not None:
            self._users[lora.lora_int_id] += delta

    def collect(self) -> None:
        """Unload adapters that are neither active nor used by a running request."""
        active = self.active.lora_int_id if self.active is not None else None
        for lora_id, users in list(self._users.items()):
            if lora_id != active and users == 0:
                self._engine.remove_lora(lora_id)
                shutil.rmtree(self._dirs.pop(lora_id), ignore_errors=True)
                del self._users[lora_id]

    def forget_users(self) -> None:
        """After every request was aborted: no adapter is in use any more."""
        for key in self._users:
            self._users[key] = 0

    def cleanup(self) -> None:
        """Remove the adapter directories when ``root`` is the engine's own temporary directory."""
        if self._owns_root:
            shutil.rmtree(self.root, ignore_errors=True)
