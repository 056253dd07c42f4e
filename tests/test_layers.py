"""The layering contract (``[tool.importlinter]`` in pyproject.toml, checked by ``make lint``) names every
module of the package, so a new module cannot sit outside the layers unnoticed."""

from __future__ import annotations

import pkgutil
import re
from pathlib import Path

import tomllib

import openclaw_trl

ROOT = Path(__file__).resolve().parents[1]


def test_every_module_of_the_package_is_in_a_layer():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (layers,) = [c["layers"] for c in config["contracts"] if c["type"] == "layers" and "containers" not in c]
    named = {m for layer in layers for m in re.split(r"\s*[:|]\s*", layer)}
    modules = {f"openclaw_trl.{m.name}" for m in pkgutil.iter_modules(openclaw_trl.__path__)}
    assert modules - named == set(), f"add these to a layer of the import contract: {sorted(modules - named)}"
    assert named - modules == set(), (
        f"the contract names modules that do not exist: {sorted(named - modules)}"
    )
