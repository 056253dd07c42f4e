"""Best-of-N groups: the candidates of a served turn with their quick scores, and their group samples.

A group and its samples are written in one transaction (:meth:`Groups.add_group`), in the one that records
the served turn (``store.atomic()``), before the reply leaves: a crash never leaves a group without its
samples, samples without their group, or a served turn without its group. Group samples have
``origin = 'group'`` and join the sample queue like judged ones (oldest first, withheld when their session
is flagged private, dropped when too stale).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import asdict

from openclaw_trl.records import CandidateGroup, TrainingSample, dumps
from openclaw_trl.store.db import Database
from openclaw_trl.store.queue import insert_sample


class Groups:
    """Best-of-N groups (module docstring): ``store.groups``."""

    def __init__(self, db: Database):
        self._db = db

    def add_group(self, group: CandidateGroup, samples: list[TrainingSample]) -> int:
        """Store ``group`` and its training ``samples`` (each gets ``group_id``); returns the group id.

        ``samples`` may be empty (no candidate was scored: the group is kept, nothing is trained).
        """
        now = time.time()
        with self._db.tx() as tx:
            cur = tx.execute(
                "INSERT INTO candidate_groups (turn_id, created, backend, served_index, candidates,"
                " score_mean, score_std, served_prob) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    int(group.turn_id),
                    now,
                    group.backend,
                    int(group.served_index),
                    dumps([asdict(c) for c in group.candidates]),
                    group.score_mean,
                    group.score_std,
                    group.served_prob,
                ),
            )
            group_id = int(cur.lastrowid)
            for sample in samples:
                sample.group_id = group_id
                sample.sample_id = insert_sample(tx, sample, origin="group", now=now)
        group.id, group.created = group_id, now
        if samples:
            self._db.notify_waiters()  # once the enclosing ``atomic`` block, if any, has committed
        return group_id

    def get_group(self, group_id: int) -> CandidateGroup | None:
        row = self._db.conn().execute("SELECT * FROM candidate_groups WHERE id = ?", (group_id,)).fetchone()
        return None if row is None else CandidateGroup.from_row(row)

    def group_of_turn(self, turn_id: int) -> CandidateGroup | None:
        """The Best-of-N group whose served candidate is turn ``turn_id`` (None: a turn with one completion)."""
        sql = "SELECT * FROM candidate_groups WHERE turn_id = ?"
        row = self._db.conn().execute(sql, (int(turn_id),)).fetchone()
        return None if row is None else CandidateGroup.from_row(row)

    def iter_groups(self, include_private: bool = False) -> Iterator[CandidateGroup]:
        """Every group, oldest first, with its turn's ``session_id``; those of private sessions only with
        ``include_private=True``."""
        sql = (
            "SELECT g.*, t.session_id AS session_id FROM candidate_groups g"
            " JOIN turns t ON t.id = g.turn_id JOIN sessions s ON s.id = t.session_id"
            + ("" if include_private else " WHERE s.private = 0")
            + " ORDER BY g.id"
        )
        for row in self._db.conn().execute(sql).fetchall():
            yield CandidateGroup.from_row(row)

    def count_groups(self) -> int:
        """Best-of-N groups stored (served turns that sampled several candidates)."""
        return self._db.conn().execute("SELECT COUNT(*) FROM candidate_groups").fetchone()[0]
