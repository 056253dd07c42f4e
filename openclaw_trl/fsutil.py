"""Run-directory file names and writing an output directory all at once (a failure never leaves a
half-written or mixed directory)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

RUN_INFO_FILE = "openclaw_run.json"
"""What a run dir records about the run (base model, method, recipe, updates, metrics); read by the model card."""


@contextmanager
def staged_directory(out: Path, purpose: str) -> Iterator[Path]:
    """Yield a new temporary directory beside ``out``; when the block succeeds it replaces ``out``.

    If the block raises, ``out`` is untouched and the temporary directory is removed. The swap is a
    rename on the same filesystem, so readers see the old directory or the new one, never a mix.
    """
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.{purpose}-", dir=out.parent))
    try:
        yield staging
        if out.exists():
            shutil.rmtree(out)
        staging.rename(out)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def move_into_place(staged: Path, out: Path) -> None:
    """Make the whole directory ``staged`` (written beside ``out``, on the same filesystem) become ``out``.

    A rename: readers, and a process killed at any moment, see the old ``out`` or the new one, never a part of
    either. An older ``out`` is first renamed aside and then removed; a kill in between leaves no ``out`` at
    all (only the hidden ``.<name>.replaced`` folder), never a mix.
    """
    aside = out.with_name(f".{out.name}.replaced")
    if aside.exists():
        shutil.rmtree(aside)
    if out.exists():
        out.rename(aside)
    staged.rename(out)
    shutil.rmtree(aside, ignore_errors=True)
