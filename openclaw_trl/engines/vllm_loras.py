"""The policy adapters of the vLLM engine: versioned directories, LoRA ids, the active adapter of each name, who
still uses which adapter.

An adapter *name* is a user's name (one adapter per person over a shared base), or ``None`` for the run's only
adapter. Each publish writes the adapter to its own directory (``v{version}-id{lora_id}``, or
``{name}-v{version}-id{lora_id}`` for a named adapter) under ``root`` and registers it with vLLM under a new
LoRA id and a LoRA name unique per (name, version, id); it becomes that name's active adapter. Requests keep
the ``LoRARequest`` they started with; an adapter that is neither any name's active one nor used by a running
request is unloaded and its directory removed. A name that was never published has no active adapter: its
``policy`` requests run on the base weights. Everything but ``prepare`` runs on the engine's worker thread.

vLLM runs at most ``max_loras`` different adapters in one batch and keeps ``max_cpu_loras`` of them loaded in
host memory; a request for another one waits for a batch slot, and an evicted adapter is reloaded from its
directory. That is why a directory lives as long as its adapter is active or in use.
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
        self._active: dict[str | None, object] = {}  # name -> the LoRARequest serving its `policy`
        self._users: dict[int, int] = {}  # lora_int_id -> requests in flight
        self._dirs: dict[int, Path] = {}
        self._next_id = 1
        self._id_lock = threading.Lock()

    @property
    def active(self):
        """The ``LoRARequest`` serving ``policy`` of the run's only adapter (``None`` = base weights)."""
        return self._active.get(None)

    def prepare(self, adapter, version: int, lora_config, name: str | None = None) -> tuple[int, Path]:
        """Write ``adapter`` (a PEFT state dict or an adapter directory) to a fresh directory; ``(id, path)``.

        A directory is copied: the trainer may overwrite its own later. A state dict needs ``lora_config``.
        ``name`` (a user's name, already checked) only labels the directory.
        """
        with self._id_lock:
            lora_id = self._next_id
            self._next_id += 1
        label = f"v{int(version)}-id{lora_id}"
        path = self.root / (label if name is None else f"{name}-{label}")
        if isinstance(adapter, (str, Path)):
            shutil.copytree(adapter, path)
        elif lora_config is None:
            raise ValueError(
                "VLLMEngine has no LoraConfig: pass lora_config= or publish an adapter directory"
            )
        else:
            adapter_state_dict_to_dir(adapter, lora_config, path)
        return lora_id, path

    def register(self, lora_id: int, path: Path, version: int, name: str | None = None) -> None:
        """Load the adapter in ``path`` into vLLM and make it ``name``'s active one."""
        from vllm.lora.request import LoRARequest

        label = "policy" if name is None else f"user-{name}"
        request = LoRARequest(f"{label}-v{version}-{lora_id}", lora_id, str(path))
        if not self._engine.add_lora(request):
            raise RuntimeError(f"vLLM refused the adapter in {path}")
        self._dirs[lora_id] = path
        self._users.setdefault(lora_id, 0)
        self._active[name] = request
        self.collect()

    def for_weights(self, weights: str, name: str | None = None):
        """The ``LoRARequest`` of ``weights`` for adapter ``name`` (``None`` = the base weights)."""
        return self._active.get(name) if weights == "policy" else None

    def use(self, lora, delta: int) -> None:
        """Count a request that starts (``+1``) or ends (``-1``) on ``lora``."""
        if lora is not None:
            self._users[lora.lora_int_id] += delta

    def collect(self) -> None:
        """Unload adapters that are neither any name's active one nor used by a running request."""
        active = {request.lora_int_id for request in self._active.values()}
        for lora_id, users in list(self._users.items()):
            if lora_id not in active and users == 0:
                self._engine.remove_lora(lora_id)
                shutil.rmtree(self._dirs.pop(lora_id), ignore_errors=True)
                del self._users[lora_id]

    def loaded(self) -> int:
        """How many adapters are registered now (active or still in use)."""
        return len(self._users)

    def forget_users(self) -> None:
        """After every request was aborted: no adapter is in use any more."""
        for key in self._users:
            self._users[key] = 0

    def cleanup(self) -> None:
        """Remove the adapter directories when ``root`` is the engine's own temporary directory."""
        if self._owns_root:
            shutil.rmtree(self.root, ignore_errors=True)
