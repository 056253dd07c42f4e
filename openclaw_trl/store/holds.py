"""Correction windows: a bare 👎 waits a short time for its correction before its samples can be trained.

A 👎 without text stamps its turn with ``turns.correction_until`` (a Unix time). Until then the turn's samples
(its scorer sample and its Best-of-N group samples) are not handed to a batch (:mod:`openclaw_trl.store.queue`),
while the turn is judged as usual: a correction that arrives within the window finds the 👎's sample untrained
and supersedes it, so the correction is what is learned. Any other next state attached to the turn (a
correction, a 👍, another rating) replaces the stamp; :meth:`CorrectionWindows.end_correction_windows` clears
the open windows of a session (its next message, its end), and the 👎 then stands.

The window is a timestamp in the store, not a timer: it holds in every process that reads the store (a trainer
in another process sees the same column) and across restarts (a reopened store holds a turn for the rest of its
window; a window that closed while the server was down holds nothing).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from openclaw_trl.store.db import Database

# Open windows worth showing: trainable turns with a next state (judged or about to be), of non-private sessions.
_OPEN_SQL = (
    " FROM turns t JOIN sessions s ON s.id = t.session_id"
    " WHERE t.correction_until > ? AND t.trainable = 1 AND t.status IN ('ready', 'judged') AND s.private = 0"
)


@dataclass
class CorrectionWindow:
    """An open correction window: a correction of ``turn_id`` replaces its 👎 until ``until`` (Unix time)."""

    turn_id: int
    session_id: int
    until: float


class CorrectionWindows:
    """Open, list and close correction windows (module docstring): ``store.holds``."""

    def __init__(self, db: Database):
        self._db = db

    def end_correction_windows(self, session_id: int, now: float | None = None) -> int:
        """Close the open windows of a session (its next message arrived, or it ended): their 👎s stand and
        their samples can be trained now. Returns how many were open."""
        now = time.time() if now is None else now
        where = " WHERE session_id = ? AND correction_until > ?"
        some = (
            self._db.conn().execute("SELECT 1 FROM turns" + where + " LIMIT 1", (session_id, now)).fetchone()
        )
        if some is None:
            return 0  # the usual case: a read, no write transaction on every request
        with self._db.tx() as tx:
            closed = tx.execute(
                "UPDATE turns SET correction_until = NULL" + where, (session_id, now)
            ).rowcount
        if closed:
            self._db.notify_waiters()
        return closed

    def open_correction_windows(self, now: float | None = None, limit: int = 20) -> list[CorrectionWindow]:
        """Up to ``limit`` open windows of trainable turns, the one closing first first."""
        now = time.time() if now is None else now
        sql = (
            "SELECT t.id, t.session_id, t.correction_until"
            + _OPEN_SQL
            + " ORDER BY t.correction_until LIMIT ?"
        )
        rows = self._db.conn().execute(sql, (now, int(limit))).fetchall()
        return [CorrectionWindow(r[0], r[1], float(r[2])) for r in rows]

    def count_open_correction_windows(self, now: float | None = None) -> int:
        """How many trainable turns wait for a correction now."""
        now = time.time() if now is None else now
        return self._db.conn().execute("SELECT COUNT(*)" + _OPEN_SQL, (now,)).fetchone()[0]
