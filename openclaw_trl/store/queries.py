"""Read-only views of the store: everything for the export, row counts and recent hints for status pages."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator

from openclaw_trl.records import Feedback, Session, TrainingSample, Turn
from openclaw_trl.store.db import Database

TURN_STATUSES = ("awaiting", "ready", "judged", "closed", "failed")
_TABLES = ("sessions", "turns", "votes", "samples", "feedback")


class Queries:
    """Export and inspection: ``store.queries``; records oldest first."""

    def __init__(self, db: Database):
        self._db = db

    def _records(self, record: type, sql: str) -> Iterator:
        """One ``record.from_row`` per row of ``sql`` (rows fetched first: no cursor left open)."""
        for row in self._db.conn().execute(sql).fetchall():
            yield record.from_row(row)

    def iter_sessions(self) -> Iterator[Session]:
        """Every session, private ones included (``private`` tells)."""
        return self._records(Session, "SELECT * FROM sessions ORDER BY id")

    def iter_turns(self, include_private: bool = False) -> Iterator[Turn]:
        """Every turn with its ``session_key`` / ``session_generation`` / ``private``; turns of private
        sessions only with ``include_private=True``."""
        sql = (
            "SELECT t.*, s.key AS session_key, s.generation AS session_generation, s.private AS private"
            " FROM turns t JOIN sessions s ON s.id = t.session_id"
            + ("" if include_private else " WHERE s.private = 0")
            + " ORDER BY t.id"
        )
        return self._records(Turn, sql)

    def iter_samples(self, include_private: bool = False) -> Iterator[TrainingSample]:
        """Every sample, consumed, dropped or not (``origin``, ``created``, ``consumed_step``, ``dropped_reason``)."""
        sql = (
            "SELECT s.* FROM samples s LEFT JOIN turns t ON s.origin IN ('scorer', 'group') AND t.id = s.turn_id"
            " LEFT JOIN sessions ss ON ss.id = t.session_id"
            + ("" if include_private else " WHERE COALESCE(ss.private, 0) = 0")
            + " ORDER BY s.id"
        )
        return self._records(TrainingSample, sql)

    def iter_feedback(self) -> Iterator[Feedback]:
        return self._records(Feedback, "SELECT * FROM feedback ORDER BY id")

    def recent_hints(self, n: int = 5) -> list[str]:
        """The hints of the ``n`` most recently judged turns that have one (private sessions left out)."""
        sql = (
            "SELECT t.hint FROM turns t JOIN sessions s ON s.id = t.session_id"
            " WHERE t.hint IS NOT NULL AND s.private = 0 ORDER BY t.judged_at DESC, t.id DESC LIMIT ?"
        )
        rows = self._db.conn().execute(sql, (int(n),)).fetchall()
        return [r["hint"] for r in reversed(rows)]

    def counts(self) -> dict[str, int]:
        """Row counts per table and ``turns_<status>`` per turn status (status pages, tests)."""
        conn = self._db.conn()
        out = {t: conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in _TABLES}
        for status in TURN_STATUSES:
            sql = "SELECT COUNT(*) FROM turns WHERE status = ?"
            out[f"turns_{status}"] = conn.execute(sql, (status,)).fetchone()[0]
        return out

    def recent_prompt_turns(
        self, n: int, key: Callable[[Turn], Hashable] | None = None, scan: int = 8
    ) -> list[Turn]:
        """The ``n`` most recent main turns with distinct prompts, newest first, of sessions not marked
        private ("don't learn from this conversation"); side turns are left out (the prompts a comparison
        of two versions replays: "did it learn for me?"). Two prompts are the same when ``key`` (default: the
        prompt's token ids) says so; the ``n * scan`` most recent turns are looked at."""
        key = key or (lambda turn: tuple(turn.prompt_ids))
        sql = (
            "SELECT t.*, s.key AS session_key, s.generation AS session_generation, s.private AS private"
            " FROM turns t JOIN sessions s ON s.id = t.session_id"
            " WHERE s.private = 0 AND t.turn_type = 'main' ORDER BY t.id DESC LIMIT ?"
        )
        seen, out = set(), []
        for row in self._db.conn().execute(sql, (int(n) * scan,)).fetchall():
            turn = Turn.from_row(row)
            if key(turn) not in seen:
                seen.add(key(turn))
                out.append(turn)
            if len(out) == n:
                break
        return out
