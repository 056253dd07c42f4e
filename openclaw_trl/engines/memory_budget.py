"""Memory budgets that fit the machine: a cache asked for more than the machine can give is capped at start.

A cache sized in MiB by a recipe (``prefix_cache_mb``, 4096 by default) is a ceiling that a GPU with 80 GB or a
server with 256 GB of RAM meets easily, but that a laptop, a small GPU or a container with a memory limit does
not: a server running for weeks would fill it and then be killed for memory. :func:`fit_budget` caps such a
budget at :data:`MAX_SHARE` of the memory the device has when the engine starts: on the CPU the smaller of
``MemAvailable`` (``/proc/meminfo``) and the container's limit (cgroup ``memory.max``), on a CUDA device the
free memory ``torch.cuda.mem_get_info`` reports. A capped budget is logged in one line that names the field,
what was asked, what was granted and why; ``/v1/status`` reports each budget (``memory``: bytes used, budget).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

MAX_SHARE = 0.25
"""The most a single cache may hold, as a share of the memory available when the engine starts."""

MEMINFO = Path("/proc/meminfo")
CGROUP_LIMITS = (Path("/sys/fs/cgroup/memory.max"), Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"))


@dataclass(frozen=True)
class Budget:
    """A cache's budget: what the recipe asked, what it got (bytes), and why it differs (``None``: as asked)."""

    field: str
    requested: int
    granted: int
    capped_by: str | None = None


def _meminfo_available() -> int | None:
    try:
        for line in MEMINFO.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _cgroup_limit() -> int | None:
    for path in CGROUP_LIMITS:
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 1 << 60:  # "max" or a huge number: no limit
            return int(text)
    return None


def available_memory(device) -> tuple[int | None, str]:
    """The memory ``device`` has available now (bytes, or ``None`` when it cannot be read) and where it was read."""
    kind = getattr(device, "type", str(device))
    if kind == "cuda":
        import torch

        free, _total = torch.cuda.mem_get_info(device)
        return int(free), f"free memory of {device}"
    candidates = [
        (v, w) for v, w in ((_meminfo_available(), "MemAvailable"), (_cgroup_limit(), "cgroup limit")) if v
    ]
    if not candidates:
        return None, "unknown"
    value, where = min(candidates)
    return value, f"{where} of the machine"


def fit_budget(field: str, requested: int, device, available: int | None = None, where: str = "") -> Budget:
    """``requested`` bytes for the cache named ``field``, capped at :data:`MAX_SHARE` of the memory ``device``
    has (``available``: that memory, read from the device when ``None``). Logs one line when it caps."""
    if requested <= 0:
        return Budget(field, requested, 0)
    if available is None:
        available, where = available_memory(device)
    if available is None:
        return Budget(field, requested, requested)
    cap = int(available * MAX_SHARE)
    if requested <= cap:
        return Budget(field, requested, requested)
    why = f"{MAX_SHARE:.0%} of the {available / 2**20:.0f} MiB {where}"
    logger.warning(
        "%s: %d MiB asked, %d MiB granted (%s); set %s to at most %d to silence this",
        field,
        requested // 2**20,
        cap // 2**20,
        why,
        field,
        cap // 2**20,
    )
    return Budget(field, requested, cap, why)
