"""Published adapter versions and the learning switch: what a rollback chooses from, and whether updates run.

* ``adapter_versions``: one row per published policy version that has a checkpoint (the trainer records it
  when the checkpoint is written): its version (= the trainer's global step), time, the samples its update
  consumed, the metrics logged at that update and, for a rollback, the version it restored. A version number
  reused after a resume from an older checkpoint replaces its row (its old checkpoint was moved aside).
* ``learning_state``: ``paused`` (``"1"`` / ``"0"``), read by the trainer between updates; it outlives a restart.
* Samples consumed by updates that a rollback undid are marked (``dropped_reason`` ``rolled_back: ...``): kept
  and exported, never handed out again (:meth:`AdapterVersions.mark_rolled_back`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from openclaw_trl.store.db import Database

ROLLED_BACK_PREFIX = "rolled_back:"
"""``dropped_reason`` prefix of the samples whose updates a rollback undid."""


@dataclass
class AdapterVersion:
    """One published adapter version (a row of ``adapter_versions``)."""

    version: int  # policy version = the global step that published it
    created: float  # when its checkpoint was written (Unix time)
    samples: int  # samples its update consumed (0: the initial adapter, or a restored one)
    metrics: dict = field(default_factory=dict)  # what the trainer logged at that update
    restored_from: int | None = None  # a rollback republished this version's weights
    checkpoint: str | None = None  # its checkpoint folder

    @classmethod
    def from_row(cls, row) -> AdapterVersion:
        return cls(
            version=row["version"],
            created=row["created"],
            samples=row["samples"],
            metrics=json.loads(row["metrics"]),
            restored_from=row["restored_from"],
            checkpoint=row["checkpoint"],
        )


class AdapterVersions:
    """Adapter history and learning switch (module docstring): ``store.versions``."""

    def __init__(self, db: Database):
        self._db = db

    def record_adapter_version(self, version: AdapterVersion) -> None:
        """Write (or replace) the row of ``version.version``."""
        with self._db.tx() as tx:
            tx.execute(
                "INSERT OR REPLACE INTO adapter_versions"
                " (version, created, samples, metrics, restored_from, checkpoint) VALUES (?, ?, ?, ?, ?, ?)",
                (
                    int(version.version),
                    float(version.created),
                    int(version.samples),
                    json.dumps(version.metrics, default=float),
                    version.restored_from,
                    version.checkpoint,
                ),
            )

    def adapter_versions(self, up_to: int | None = None, limit: int | None = None) -> list[AdapterVersion]:
        """The recorded versions, newest first: at most ``limit``, none above ``up_to`` (rows of a branch
        a resume from an older checkpoint left behind)."""
        sql = "SELECT * FROM adapter_versions"
        params: list = []
        if up_to is not None:
            sql += " WHERE version <= ?"
            params.append(int(up_to))
        sql += " ORDER BY version DESC"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(int(limit))
        rows = self._db.conn().execute(sql, params).fetchall()
        return [AdapterVersion.from_row(r) for r in rows]

    def count_consumed_at(self, step: int) -> int:
        """Samples consumed by the update of ``step``."""
        sql = "SELECT COUNT(*) FROM samples WHERE consumed_step = ?"
        return self._db.conn().execute(sql, (int(step),)).fetchone()[0]

    def mark_rolled_back(self, steps: list[int], reason: str) -> int:
        """Mark the samples consumed by the updates of ``steps`` (undone by a rollback) as such
        (``dropped_reason = "rolled_back: " + reason``); they keep their ``consumed_step``. Returns how many."""
        if not steps:
            return 0
        marks = ",".join("?" * len(steps))
        with self._db.tx() as tx:
            cur = tx.execute(
                f"UPDATE samples SET dropped_reason = ? WHERE consumed_step IN ({marks})"
                " AND dropped_reason IS NULL",
                (f"{ROLLED_BACK_PREFIX} {reason}", *[int(s) for s in steps]),
            )
            return cur.rowcount

    def count_rolled_back(self) -> int:
        """Samples whose updates a rollback undid (over every run on this store)."""
        sql = "SELECT COUNT(*) FROM samples WHERE dropped_reason LIKE ?"
        return self._db.conn().execute(sql, (f"{ROLLED_BACK_PREFIX}%",)).fetchone()[0]

    def set_learning_paused(self, paused: bool) -> None:
        with self._db.tx() as tx:
            tx.execute(
                "INSERT OR REPLACE INTO learning_state (key, value) VALUES ('paused', ?)",
                ("1" if paused else "0",),
            )

    def learning_paused(self) -> bool:
        """Whether updates are paused (``POST /v1/learning``); False on a store that never set it."""
        row = self._db.conn().execute("SELECT value FROM learning_state WHERE key = 'paused'").fetchone()
        return row is not None and row["value"] == "1"
