"""Back up a store while a server writes to it: SQLite's online backup, one consistent copy in one file.

A plain copy of the store file alone misses what its write-ahead log (``-wal``) holds, and a copy of the file
and its log taken one after the other may catch the log between a checkpoint and its reset. The online backup
copies the database as one transaction sees it: every turn committed before it began, nothing half-written,
into a new file that opens on its own (no ``-wal`` needed). The server goes on serving and writing meanwhile;
a write that lands during the copy makes SQLite restart it, so a copy is taken in steps of ``pages`` with a
short pause between them.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path


def backup_store(source: str | Path, target: str | Path, pages: int = 1024) -> Path:
    """Copy the store ``source`` (a live one is fine) to ``target`` (created, with its folder; it must not
    exist) with SQLite's online backup; the copy is written beside ``target`` and renamed into place once
    whole. Returns ``target``."""
    source, target = Path(source), Path(target)
    if not source.is_file():
        raise FileNotFoundError(f"no store at {source}")
    if target.exists():
        raise FileExistsError(f"{target} exists: back up to a new file")
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    partial.unlink(missing_ok=True)
    src = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    try:
        dst = sqlite3.connect(partial)
        try:
            src.backup(dst, pages=pages, sleep=0.01)
            dst.execute("PRAGMA journal_mode=DELETE")  # one self-contained file
        finally:
            dst.close()
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    finally:
        src.close()
    with open(partial, "rb") as fh:
        os.fsync(fh.fileno())
    partial.rename(target)
    return target
