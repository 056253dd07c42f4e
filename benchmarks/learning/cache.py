"""Finished benchmark runs, one JSON file each, so a report can grow row by row without rerunning the rest.

A file ``<row>_p<noise>_s<seed>.json`` holds ``{"key": ..., "run": RunResult as a dict}``; the key is the
row's benchmark settings (all but the sample timeout), the row's definition and a hash of the pre-trained
model's weights, and a run is reused only under the same key.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path


class RunCache:
    """Finished runs as one JSON file each, reused while the settings, the row and the model are the same.

    ``row_key(row)``: the row-dependent part of the key, a JSON-able dict (its settings and definition).
    """

    def __init__(self, directory: Path, model_dir, row_key: Callable[[str], dict]):
        self.directory = Path(directory)
        self.model = weights_digest(Path(model_dir))
        self.row_key = row_key

    def key(self, row: str) -> dict:
        return json.loads(json.dumps(self.row_key(row) | {"model": self.model}))

    def path(self, row: str, noise: float, seed: int) -> Path:
        return self.directory / f"{row}_p{noise:g}_s{seed}.json"

    def get(self, row: str, noise: float, seed: int) -> dict | None:
        path = self.path(row, noise, seed)
        if not path.exists():
            return None
        saved = json.loads(path.read_text())
        return saved["run"] if saved.get("key") == self.key(row) else None

    def put(self, result) -> None:
        """Save ``result`` (a ``run.RunResult``), atomically."""
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.path(result.row, result.noise, result.seed)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"key": self.key(result.row), "run": asdict(result)}, indent=1))
        tmp.replace(path)

    def runs(self, order: list[str]) -> list[dict]:
        """Every cached run of a row in ``order`` made with these settings and this model, by noise, row
        (in ``order``) and seed."""
        found = [json.loads(p.read_text()) for p in sorted(self.directory.glob("*.json"))]
        runs = [
            f["run"]
            for f in found
            if f.get("run", {}).get("row") in order and f.get("key") == self.key(f["run"]["row"])
        ]
        return sorted(runs, key=lambda r: (r["noise"], order.index(r["row"]), r["seed"]))


def weights_digest(model_dir: Path) -> str:
    """A short hash of the model's weights file (the directory name when it has none)."""
    weights = model_dir / "model.safetensors"
    if not weights.exists():
        return model_dir.name
    return hashlib.sha256(weights.read_bytes()).hexdigest()[:12]
