"""The scorer's side of the store: ready turns out, judgements (votes, verdict, sample) in.

A judgement commits the turn's votes, its new status and its sample in one transaction, so a crash never
leaves half of one; reopening a store resumes by judging the ``ready`` turns again. Each attachment of a
next state starts a new judge round (``turns.judge_round``): a judgement or a failure of an older round
is stale and changes nothing but the votes it records.

Each scorer sample stores its session baseline (:func:`session_baseline`: the mean judged reward of the
session's earlier turns), read in the transaction that writes the sample, so a replay or a resumed run
trains on the same advantages.

A judged turn whose ``judge_error`` starts with :data:`TEACHER_ERROR_PREFIX` lost its teacher (the
teacher prompt could not be built or the teacher scoring failed): it keeps at most its RL reward.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterable

from openclaw_trl.records import Judgement, Turn, Vote
from openclaw_trl.store.db import Database
from openclaw_trl.store.queue import has_scorer_sample, insert_sample

TEACHER_ERROR_PREFIX = "teacher"  # judge_error of a turn that lost its teacher

# Turns the scorer judges: trainable, with a next state, not judged yet, of non-private sessions.
_READY_SQL = (
    " FROM turns t JOIN sessions s ON s.id = t.session_id"
    " WHERE t.status = 'ready' AND t.trainable = 1 AND s.private = 0"
)


class Judging:
    """Ready turns, judgements, votes and judge failures (module docstring): ``store.judging``."""

    def __init__(self, db: Database):
        self._db = db

    def ready_turns(self, limit: int, exclude: Iterable[int] = ()) -> list[Turn]:
        """Up to ``limit`` ready turns, oldest first, leaving out the ids in ``exclude``."""
        exclude = set(exclude)
        sql = "SELECT t.*" + _READY_SQL + " ORDER BY t.id LIMIT ?"
        rows = self._db.conn().execute(sql, (limit + len(exclude),)).fetchall()
        return [Turn.from_row(r) for r in rows if r["id"] not in exclude][:limit]

    def count_ready(self) -> int:
        return self._db.conn().execute("SELECT COUNT(*)" + _READY_SQL).fetchone()[0]

    def save_judgement(self, judgement: Judgement) -> int | None:
        """Commit a turn's votes, verdict and (optional) sample in one transaction.

        Returns the sample id, or None when no sample was written. A stale judgement (the turn's next
        state changed since the judgement's ``turn.judge_round``, or it is no longer ``ready``) writes its
        votes only; a turn that already has a sample gets no second one.
        """
        turn, now = judgement.turn, time.time()
        with self._db.tx() as tx:
            _insert_votes(tx, turn.id, turn.judge_round, judgement.votes, now)
            row = tx.execute("SELECT status, judge_round FROM turns WHERE id = ?", (turn.id,)).fetchone()
            if row is None or row["status"] != "ready" or row["judge_round"] != turn.judge_round:
                return None
            tx.execute(
                "UPDATE turns SET status = 'judged', judged_at = ?, reward = ?, hint = ?, judge_error = ?"
                " WHERE id = ?",
                (now, float(judgement.reward), judgement.hint, judgement.error, turn.id),
            )
            if judgement.sample is None or has_scorer_sample(tx, turn.id):
                return None
            judgement.sample.baseline = session_baseline(tx, turn)
            sample_id = insert_sample(tx, judgement.sample, origin="scorer", now=now)
        self._db.notify_waiters()
        return sample_id

    def record_judge_failure(self, turn_id: int, judge_round: int, error: str, max_attempts: int) -> bool:
        """Count one failed judging attempt of a ``ready`` turn (its error kept in ``judge_error``).

        At ``max_attempts`` failures the turn becomes ``failed``: set aside, never judged again unless a new
        next state (feedback) arrives. Returns True when the turn was set aside. A stale attempt (the next
        state changed since ``judge_round``) changes nothing.
        """
        with self._db.tx() as tx:
            tx.execute(
                "UPDATE turns SET judge_attempts = judge_attempts + 1, judge_error = ?"
                " WHERE id = ? AND status = 'ready' AND judge_round = ?",
                (error, turn_id, judge_round),
            )
            cur = tx.execute(
                "UPDATE turns SET status = 'failed', judged_at = ?"
                " WHERE id = ? AND status = 'ready' AND judge_round = ? AND judge_attempts >= ?",
                (time.time(), turn_id, judge_round, int(max_attempts)),
            )
            return cur.rowcount > 0

    def count_teacher_failed(self) -> int:
        """Judged turns with an accepted hint that lost their teacher (private sessions left out)."""
        sql = (
            "SELECT COUNT(*) FROM turns t JOIN sessions s ON s.id = t.session_id"
            " WHERE t.status = 'judged' AND t.hint IS NOT NULL AND t.judge_error LIKE ? AND s.private = 0"
        )
        return self._db.conn().execute(sql, (TEACHER_ERROR_PREFIX + "%",)).fetchone()[0]

    def votes_for(self, turn_id: int) -> list[Vote]:
        """Every vote recorded for a turn (all judge rounds), in the order they were written."""
        sql = "SELECT * FROM votes WHERE turn_id = ? ORDER BY id"
        return [Vote.from_row(r) for r in self._db.conn().execute(sql, (turn_id,)).fetchall()]


def session_baseline(tx: sqlite3.Connection, turn: Turn) -> float:
    """The mean judged reward of the turns of ``turn``'s session that come before it (0 when none)."""
    sql = (
        "SELECT AVG(reward) FROM turns WHERE session_id = ? AND idx < ? AND status = 'judged'"
        " AND reward IS NOT NULL"
    )
    mean = tx.execute(sql, (turn.session_id, turn.idx)).fetchone()[0]
    return 0.0 if mean is None else float(mean)


def _insert_votes(tx: sqlite3.Connection, turn_id: int, judge_round: int, votes: list[Vote], now: float):
    tx.executemany(
        "INSERT INTO votes (turn_id, judge_round, kind, vote_index, backend, raw_text, value, hint,"
        " error, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (turn_id, judge_round, v.kind, i, v.backend, v.raw_text, v.value, v.hint, v.error, now)
            for i, v in enumerate(votes)
        ],
    )
