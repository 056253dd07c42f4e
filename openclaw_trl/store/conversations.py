"""Conversations in the store: sessions, served turns, their next states, and explicit feedback.

Turn life cycle (``turns.status``)::

    awaiting --next state--> ready --scorer--> judged
        \\                     \\          (untrainable turns go to ``closed`` instead of ``ready``)
         \\                     `--judging raised ``max_attempts`` times--> failed  (error in judge_error)
          `--session ended / history diverged / side turn--> closed   (never trained; reason kept)
    any status --withdrawn (the user undid the exchange)--> closed ``withdrawn`` (never judged or trained)

A turn is committed before the server answers (:meth:`Conversations.add_turn`, one
:class:`~openclaw_trl.records.ServedTurn`); attaching a next state
checks and moves the turn's status in one transaction. A turn has at most one live sample: explicit
feedback on a judged turn whose sample was not trained on yet supersedes that sample (kept with
``dropped_reason = 'superseded'``, never handed out) and the turn is judged again; a sample that was
trained on, or is leased to the batch being trained (:mod:`~openclaw_trl.store.queue`), is never
superseded (the feedback is recorded only).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterable
from dataclasses import dataclass

from openclaw_trl.records import SERVED_TURN_COLUMNS, Column, ServedTurn, Session, Turn, dumps, insert_sql
from openclaw_trl.store.db import Database
from openclaw_trl.store.drops import SUPERSEDED
from openclaw_trl.store.queue import live_scorer_sample

# Closed turns a late next state may re-open: the conversation went on after all.
_REOPENABLE = ("session_ended", "history_diverged")
WITHDRAWN = "withdrawn"  # close_reason of a turn the user withdrew (undo), and dropped_reason of its sample
FEEDBACK_KINDS = ("rating", "correction", "edit", "reject")

# a served turn's columns, and those the store adds (``Conversations.add_turn``)
_INSERT_TURN_SQL = insert_sql(
    "turns",
    SERVED_TURN_COLUMNS + tuple(Column(n, "") for n in ("idx", "created", "status", "close_reason")),
)


@dataclass
class Withdrawal:
    """What withdrawing a turn did: ``trained_step`` is the step that already trained on its sample (the
    update stays; None when nothing was trained), ``sample_dropped`` whether a waiting sample was dropped."""

    turn_id: int
    already: bool  # it was withdrawn before (nothing changed)
    sample_dropped: bool
    trained_step: int | None


class Conversations:
    """Sessions, turns, next states and feedback (module docstring): ``store.conversations``."""

    def __init__(self, db: Database):
        self._db = db

    # ------------------------------------------------------------------ sessions
    def open_session(
        self, key: str | None, now: float | None = None, private: bool = False, anonymous: bool | None = None
    ) -> int:
        """Create a new session (the next generation of ``key``); returns its row id. ``anonymous`` (default:
        ``key is None``) marks a conversation the client named no id for (its key, if any, is the server's)."""
        now = time.time() if now is None else now
        with self._db.tx() as tx:
            generation = 0
            if key is not None:
                row = tx.execute("SELECT MAX(generation) FROM sessions WHERE key = ?", (key,)).fetchone()
                generation = 0 if row[0] is None else row[0] + 1
            cur = tx.execute(
                "INSERT INTO sessions (key, generation, created, last_active, private, anonymous)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (
                    key,
                    generation,
                    now,
                    now,
                    int(private),
                    int(key is None if anonymous is None else anonymous),
                ),
            )
            return int(cur.lastrowid)

    def find_open_session(self, key: str) -> Session | None:
        """The open (not ended) session of ``key``, or None."""
        sql = "SELECT * FROM sessions WHERE key = ? AND ended IS NULL ORDER BY generation DESC LIMIT 1"
        row = self._db.conn().execute(sql, (key,)).fetchone()
        return Session.from_row(row) if row else None

    def get_session(self, session_id: int) -> Session | None:
        row = self._db.conn().execute("SELECT * FROM sessions WHERE id = ?", (session_id,)).fetchone()
        return Session.from_row(row) if row else None

    def touch_session(self, session_id: int, now: float | None = None) -> None:
        now = time.time() if now is None else now
        with self._db.tx() as tx:
            _touch(tx, session_id, now)

    def set_private(self, session_id: int, private: bool = True) -> None:
        """Flag a session "don't learn from this": its turns are neither judged nor handed to the trainer."""
        with self._db.tx() as tx:
            cur = tx.execute("UPDATE sessions SET private = ? WHERE id = ?", (int(private), session_id))
            if cur.rowcount == 0:
                raise KeyError(f"unknown session {session_id}")

    def end_session(self, session_id: int, reason: str, now: float | None = None) -> None:
        """End a session: its turns still waiting for a next state are closed (never trained)."""
        now = time.time() if now is None else now
        with self._db.tx() as tx:
            tx.execute(
                "UPDATE sessions SET ended = ?, end_reason = ? WHERE id = ? AND ended IS NULL",
                (now, reason, session_id),
            )
            tx.execute(
                "UPDATE turns SET status = 'closed', close_reason = 'session_ended'"
                " WHERE session_id = ? AND status = 'awaiting'",
                (session_id,),
            )

    def idle_sessions(self, older_than: float) -> list[int]:
        """Ids of open sessions whose last activity is before ``older_than`` (a timestamp)."""
        sql = "SELECT id FROM sessions WHERE ended IS NULL AND last_active < ?"
        return [r[0] for r in self._db.conn().execute(sql, (older_than,)).fetchall()]

    # ------------------------------------------------------------------ turns
    def add_turn(self, turn: ServedTurn, now: float | None = None) -> int:
        """Commit one served turn (before the reply goes out); returns the turn id.

        A main turn starts ``awaiting`` its next state; a side turn is ``closed`` at once (never trained).
        """
        row = turn.to_row()
        now = time.time() if now is None else now
        status, reason = ("awaiting", None) if turn.turn_type == "main" else ("closed", "side")
        with self._db.tx() as tx:
            sql = "SELECT COALESCE(MAX(idx), -1) + 1 FROM turns WHERE session_id = ?"
            idx = tx.execute(sql, (turn.session_id,)).fetchone()[0]
            row.update(idx=idx, created=now, status=status, close_reason=reason)
            cur = tx.execute(_INSERT_TURN_SQL, row)
            _touch(tx, turn.session_id, now)
            return int(cur.lastrowid)

    def get_turn(self, turn_id: int) -> Turn | None:
        row = self._db.conn().execute("SELECT * FROM turns WHERE id = ?", (turn_id,)).fetchone()
        return Turn.from_row(row) if row else None

    def last_main_turn(self, session_id: int) -> Turn | None:
        """The most recent main turn of a session (whatever its status), or None."""
        sql = "SELECT * FROM turns WHERE session_id = ? AND turn_type = 'main' ORDER BY idx DESC LIMIT 1"
        row = self._db.conn().execute(sql, (session_id,)).fetchone()
        return Turn.from_row(row) if row else None

    def last_main_turn_of_key(self, key: str) -> Turn | None:
        """The most recent main turn of any session named ``key`` (any generation, open or ended), or None."""
        sql = (
            "SELECT t.* FROM turns t JOIN sessions s ON s.id = t.session_id"
            " WHERE s.key = ? AND t.turn_type = 'main' ORDER BY t.id DESC LIMIT 1"
        )
        row = self._db.conn().execute(sql, (key,)).fetchone()
        return Turn.from_row(row) if row else None

    def find_chained_turns(
        self, keys: Iterable[str], session_id: int | None = None, column: str = "exchange_key"
    ) -> list[Turn]:
        """Main turns whose ``column`` (``exchange_key`` or ``reply_key``) is one of ``keys``, newest first: those of
        ``session_id``, or (None) those of open anonymous sessions (conversations recognised by their history)."""
        if column not in ("exchange_key", "reply_key"):
            raise ValueError(f"column must be exchange_key or reply_key, got {column!r}")
        keys = list(dict.fromkeys(k for k in keys if k))
        if not keys:
            return []
        marks = ",".join("?" * len(keys))
        scope = "t.session_id = ?" if session_id is not None else "s.anonymous = 1 AND s.ended IS NULL"
        sql = (
            "SELECT t.* FROM turns t JOIN sessions s ON s.id = t.session_id"
            f" WHERE t.{column} IN ({marks}) AND t.turn_type = 'main' AND {scope} ORDER BY t.id DESC"
        )
        params = [*keys, session_id] if session_id is not None else keys
        return [Turn.from_row(row) for row in self._db.conn().execute(sql, params).fetchall()]

    def attach_next_state(
        self, turn_id: int, next_state: dict, source: str, now: float | None = None, replace: bool = False
    ) -> bool:
        """Attach the next state of a main turn; returns True when it was attached.

        A turn awaiting its next state (or closed because its session ended or its history diverged) gets
        it; a trainable turn then becomes ``ready`` for the scorer, an untrainable one ``closed`` (the next
        state is kept for export). ``replace=True`` (explicit feedback, :meth:`attach_feedback`) also
        replaces a next state that was not judged yet, or re-opens a judged or failed turn, superseding its
        sample when that was not trained on yet. Attaching starts a new judge round (verdict and attempts
        reset).
        """
        return self._attach(turn_id, next_state, source, now, replace) is None

    def attach_feedback(
        self,
        turn_id: int,
        next_state: dict,
        now: float | None = None,
        correction_until: float | None = None,
    ) -> str | None:
        """Explicit feedback as the turn's next state (``attach_next_state(replace=True)``); returns None
        when attached, else why not (a side turn, a withdrawn turn, a sample already trained on ...).

        ``correction_until`` (a Unix time) opens the turn's correction window: its samples are not handed
        to a batch before then (:mod:`openclaw_trl.store.holds`); any other attachment closes the window.
        """
        return self._attach(turn_id, next_state, "feedback", now, replace=True, hold=correction_until)

    def _attach(
        self,
        turn_id: int,
        next_state: dict,
        source: str,
        now: float | None,
        replace: bool,
        hold: float | None = None,
    ):
        now = time.time() if now is None else now
        with self._db.tx() as tx:  # no batch leases the sample meanwhile (one write transaction at a time)
            row = tx.execute(
                "SELECT turn_type, trainable, status, close_reason FROM turns WHERE id = ?", (turn_id,)
            ).fetchone()
            if row is None:
                raise KeyError(f"unknown turn {turn_id}")
            refusal, sample = _refusal(tx, turn_id, row, replace)
            if refusal is not None:
                return refusal
            if sample is not None:
                tx.execute("UPDATE samples SET dropped_reason = ? WHERE id = ?", (SUPERSEDED, sample))
            tx.execute(
                "UPDATE turns SET next_state = ?, next_state_source = ?, next_state_at = ?, status = ?,"
                " close_reason = ?, judge_round = judge_round + 1, judged_at = NULL, reward = NULL,"
                " hint = NULL, judge_error = NULL, judge_attempts = 0, correction_until = ? WHERE id = ?",
                (
                    dumps(next_state),
                    source,
                    now,
                    "ready" if row["trainable"] else "closed",
                    None if row["trainable"] else "untrainable",
                    hold,
                    turn_id,
                ),
            )
            return None

    def withdraw_turn(self, turn_id: int) -> Withdrawal:
        """Withdraw a turn (the user undid the exchange): ``closed`` with reason ``withdrawn``, whatever its
        status, so it is never judged or trained; its waiting sample, if any, is dropped (kept, reason
        ``withdrawn``). A sample already trained on stays trained (``Withdrawal.trained_step``); one in the
        batch being trained is left to it. Nothing is deleted; withdrawing twice changes nothing."""
        with self._db.tx() as tx:
            row = tx.execute("SELECT status, close_reason FROM turns WHERE id = ?", (turn_id,)).fetchone()
            if row is None:
                raise KeyError(f"unknown turn {turn_id}")
            if row["status"] == "closed" and row["close_reason"] == WITHDRAWN:
                return Withdrawal(turn_id, True, False, None)
            tx.execute(
                "UPDATE turns SET status = 'closed', close_reason = ? WHERE id = ?", (WITHDRAWN, turn_id)
            )
            _withdraw_group_samples(tx, turn_id)
            sample = live_scorer_sample(tx, turn_id)
            if sample is None:
                return Withdrawal(turn_id, False, False, None)
            waiting = sample["consumed_step"] is None and sample["dropped_reason"] is None
            if waiting and sample["lease"] is None:
                tx.execute("UPDATE samples SET dropped_reason = ? WHERE id = ?", (WITHDRAWN, sample["id"]))
                return Withdrawal(turn_id, False, True, None)
            return Withdrawal(turn_id, False, False, sample["consumed_step"])

    def close_turn(self, turn_id: int, reason: str) -> None:
        """Close an awaiting turn without a next state (e.g. the conversation history diverged)."""
        with self._db.tx() as tx:
            tx.execute(
                "UPDATE turns SET status = 'closed', close_reason = ? WHERE id = ? AND status = 'awaiting'",
                (reason, turn_id),
            )

    # ------------------------------------------------------------------ feedback
    def add_feedback(
        self, turn_id: int, rating: int | None, text: str | None, attached: bool, kind: str | None = None
    ) -> int:
        """Record one explicit feedback (``kind``: one of ``FEEDBACK_KINDS``); returns its id."""
        if kind is not None and kind not in FEEDBACK_KINDS:
            raise ValueError(f"feedback kind must be one of {FEEDBACK_KINDS}, got {kind!r}")
        with self._db.tx() as tx:
            cur = tx.execute(
                "INSERT INTO feedback (turn_id, rating, text, created, attached, kind) VALUES (?, ?, ?, ?, ?, ?)",
                (turn_id, rating, text, time.time(), int(attached), kind),
            )
            return int(cur.lastrowid)

    def latest_rating(self, turn_id: int) -> int | None:
        """The rating of the turn's most recent feedback that has one (+1 / -1), or None."""
        sql = "SELECT rating FROM feedback WHERE turn_id = ? AND rating IS NOT NULL ORDER BY id DESC LIMIT 1"
        row = self._db.conn().execute(sql, (turn_id,)).fetchone()
        return None if row is None else int(row[0])

    def set_feedback_attached(self, feedback_id: int, attached: bool) -> None:
        with self._db.tx() as tx:
            tx.execute("UPDATE feedback SET attached = ? WHERE id = ?", (int(attached), feedback_id))


def _touch(tx: sqlite3.Connection, session_id: int, now: float) -> None:
    tx.execute("UPDATE sessions SET last_active = MAX(last_active, ?) WHERE id = ?", (now, session_id))


def _withdraw_group_samples(tx: sqlite3.Connection, turn_id: int) -> None:
    """A withdrawn turn's waiting Best-of-N group samples are dropped too (kept, reason ``withdrawn``): the
    undone exchange teaches nothing, its candidates included; those leased to a batch are left to it."""
    tx.execute(
        "UPDATE samples SET dropped_reason = ? WHERE turn_id = ? AND origin = 'group'"
        " AND consumed_step IS NULL AND dropped_reason IS NULL AND lease IS NULL",
        (WITHDRAWN, turn_id),
    )


def _refusal(
    tx: sqlite3.Connection, turn_id: int, row: sqlite3.Row, replace: bool
) -> tuple[str | None, int | None]:
    """Why a main turn in ``row``'s state takes no (new) next state (None: it does), and the id of the
    sample the new one supersedes (:meth:`Conversations.attach_next_state` rules)."""
    if row["turn_type"] != "main":
        return "side turns are never trained on", None
    status, reason = row["status"], row["close_reason"]
    if status == "awaiting" or (status == "closed" and reason in _REOPENABLE):
        return None, None
    if not replace:
        return "the turn has a next state already", None
    if status == "closed" and reason != "untrainable":
        return f"the turn is closed ({reason})", None
    sample = live_scorer_sample(tx, turn_id)
    if sample is None:
        return None, None
    if sample["consumed_step"] is not None:
        return f"the turn was already trained on (step {sample['consumed_step']})", None
    if sample["dropped_reason"] is not None:
        return f"the turn's sample was dropped ({sample['dropped_reason']})", None
    if sample["lease"] is not None:
        return "the turn's sample is in the training batch being computed", None
    return None, int(sample["id"])
