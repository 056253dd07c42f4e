"""Where a benchmark writes its JSON: ``--out`` when given, else a timestamped file in benchmarks/results/."""

from __future__ import annotations

import json
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def write_results(report: dict, name: str, out: str | None = None) -> Path:
    """Write ``report`` as JSON to ``out`` or ``results/<name>_<timestamp>.json``; print and return the path."""
    path = Path(out) if out else RESULTS / f"{name}_{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2))
    print(f"\nwrote {path}")
    return path
