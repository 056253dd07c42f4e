"""Policy lineage: which weights each published version number names, and how far apart two versions are.

A policy version is an identity, not a counter value: a number is published once per store and never
again, and each published version records where its weights came from (table ``policy_lineage``):

* ``parent``: the version whose weights it started from (None: the initial adapter, whose LoRA ``B``
  matrices are zero, so every initial adapter computes the base model);
* ``updates``: optimizer updates between the parent's weights and its own: 1 for a training update, 0 for
  the same weights published under a new number (a rollback to ``v`` publishes ``v``'s weights as the
  next version; a resumed run whose latest checkpoint is older than the last version published, because
  versions were published and then lost in a crash, publishes the checkpoint's weights under a new number
  too, so a lost number never names two sets of weights).

The versions form a tree. The **staleness** of a sample drawn by version ``a`` for the trainer at version
``c`` is the number of updates on the tree path between them: ``depth(a) + depth(c) - 2 depth(lca)``,
``depth`` counting updates from the initial adapter and ``lca`` their last common ancestor (the initial
adapter when their roots differ). So after a rollback to ``v`` the samples of ``v`` are fresh again
(staleness 0) while those of the undone versions ``v + 1 .. s`` are ``s' - v`` updates away, and a sample
of a version lost in a crash is as far from the resumed weights as the lost updates it went through.

A version the table does not know (a store written before versions were recorded) is taken to follow
``version - 1`` by one update, the only relation older runs had.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from openclaw_trl.store.db import Database


@dataclass(frozen=True)
class PublishedVersion:
    """One row of ``policy_lineage``."""

    version: int
    parent: int | None  # the version its weights started from (None: the initial adapter)
    updates: int  # optimizer updates from the parent's weights (0: the same weights, renumbered)
    created: float
    note: str = ""  # update / initial / rollback / resume / "held: <why>" (the guard held the update back)


class Lineage:
    """The version tree in memory (``store.lineage.lineage()``): ``staleness``, ``path``, ``undone``."""

    def __init__(self, rows: dict[int, tuple[int | None, int]]):
        self._rows = rows  # version -> (parent, updates)

    def knows(self, version: int) -> bool:
        """Whether ``version`` was recorded as published."""
        return version in self._rows

    def _step(self, version: int) -> tuple[int | None, int]:
        """``(parent, updates)`` of ``version``; unknown versions follow ``version - 1`` by one update."""
        if version in self._rows:
            return self._rows[version]
        return (version - 1, 1) if version > 0 else (None, 0)

    def path(self, version: int) -> dict[int, int]:
        """``{ancestor: updates from it up to version}`` for ``version`` and every ancestor (itself: 0)."""
        out, depth, seen = {}, 0, set()
        current: int | None = int(version)
        while current is not None and current not in seen:
            seen.add(current)
            out[current] = depth
            parent, updates = self._step(current)
            depth += updates
            current = parent
        return out

    def depth(self, version: int) -> int:
        """Updates from the initial adapter to ``version``."""
        return max(self.path(version).values(), default=0)

    def staleness(self, sampled: int, current: int) -> int:
        """Updates on the tree path between the weights of ``sampled`` and those of ``current`` (module doc)."""
        ancestors = self.path(current)
        for version, up in self.path(sampled).items():
            if version in ancestors:
                return up + ancestors[version]
        return self.depth(sampled) + self.depth(current)  # different roots: they meet at the initial adapter

    def undone(self, current: int, target: int) -> list[int]:
        """The updates of ``current``'s path that ``target``'s weights do not contain (a rollback undoes them)."""
        keep = self.path(target)
        return sorted(v for v in self.path(current) if v not in keep and self._step(v)[1] > 0)


class PolicyLineage:
    """Published versions and their lineage (module docstring): ``store.lineage``."""

    def __init__(self, db: Database):
        self._db = db

    def record_published(self, version: int, parent: int | None, updates: int, note: str = "") -> bool:
        """Record the publication of ``version`` (before the engine serves it). A version already recorded
        keeps its row (the same weights published again, e.g. at a restart). Returns whether it was new."""
        with self._db.tx() as tx:
            cur = tx.execute(
                "INSERT OR IGNORE INTO policy_lineage (version, parent, updates, created, note)"
                " VALUES (?, ?, ?, ?, ?)",
                (int(version), None if parent is None else int(parent), int(updates), time.time(), note),
            )
            return cur.rowcount > 0

    def published_version(self, version: int) -> PublishedVersion | None:
        row = (
            self._db.conn()
            .execute("SELECT * FROM policy_lineage WHERE version = ?", (int(version),))
            .fetchone()
        )
        if row is None:
            return None
        return PublishedVersion(
            row["version"], row["parent"], row["updates"], row["created"], row["note"] or ""
        )

    def held_back(self, limit: int = 100) -> list[PublishedVersion]:
        """The versions whose trained weights the version guard held back (their rows' ``note`` starts with
        ``held``: they serve the weights of their ``parent``), oldest first, the last ``limit``."""
        rows = (
            self._db.conn()
            .execute(
                "SELECT * FROM policy_lineage WHERE note LIKE 'held%' ORDER BY version DESC LIMIT ?",
                (int(limit),),
            )
            .fetchall()
        )
        return [
            PublishedVersion(r["version"], r["parent"], r["updates"], r["created"], r["note"] or "")
            for r in reversed(rows)
        ]

    def last_published_version(self) -> int | None:
        """The highest version number ever published on this store (None: none recorded)."""
        return self._db.conn().execute("SELECT MAX(version) FROM policy_lineage").fetchone()[0]

    def lineage(self) -> Lineage:
        rows = self._db.conn().execute("SELECT version, parent, updates FROM policy_lineage").fetchall()
        return Lineage({r["version"]: (r["parent"], r["updates"]) for r in rows})
