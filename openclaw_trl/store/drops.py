"""Samples kept out of training: why (``samples.dropped_reason``), marking them, and counting them per reason.

A dropped sample stays in the store, exported with its reason, and is never handed out to a batch. Every
reason text begins with one of the prefixes below, and counting the samples dropped for one reason is a range
over the partial index ``samples_dropped`` (only dropped samples are in it): its cost follows how many were
dropped for that reason, not how many samples the store holds, so a server that has stored millions of
samples still counts them in a moment on every update. :class:`Drops` holds the rules that drop waiting
samples as the trainer takes a batch (too stale, another temperature, a queue longer than its bound).
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections import Counter
from collections.abc import Iterable

logger = logging.getLogger(__name__)
BACKLOG_WARN_EVERY_S = 300.0  # a queue that keeps overflowing is logged at most this often

STALE_REASON = "stale:"
"""How the ``dropped_reason`` of a sample more than ``max_staleness`` updates old begins."""

TEMPERATURE_REASON = "temperature:"
"""How the ``dropped_reason`` of a sample sampled at another temperature than the trainer's begins."""

OUT_OF_MEMORY_REASON = "out of memory:"
"""How the ``dropped_reason`` of a sample whose batch no update could train on (out of memory) begins."""

BACKLOG_REASON = "backlog:"
"""How the ``dropped_reason`` of a sample dropped from a queue longer than ``max_samples_waiting`` begins."""

SUPERSEDED = "superseded"
"""The ``dropped_reason`` of a scorer sample replaced by later explicit feedback on its turn."""

# What "waiting" means, for the queue and the rules here: not consumed, not dropped, and not of a session
# flagged private after it was judged (such samples are withheld: kept, never handed out) ... The rows come
# from the partial index of the samples neither consumed nor dropped (``samples_waiting``), named so that the
# planner never walks the dropped ones, which pile up for as long as the server runs.
WAITING_SQL = (
    " FROM samples s INDEXED BY samples_waiting LEFT JOIN turns t ON s.origin IN ('scorer', 'group') AND t.id = s.turn_id"
    " LEFT JOIN sessions ss ON ss.id = t.session_id"
    " WHERE s.consumed_step IS NULL AND s.dropped_reason IS NULL AND COALESCE(ss.private, 0) = 0"
)
FREE_SQL = " AND s.lease IS NULL"  # ... and not leased to a batch

# ... and not held by an open correction window of its turn (the parameter: now, a Unix time).
UNHELD_SQL = " AND COALESCE(t.correction_until, 0) <= ?"


def count_reason(conn: sqlite3.Connection, prefix: str) -> int:
    """Samples whose ``dropped_reason`` begins with ``prefix`` (a range over the ``samples_dropped`` index:
    every text that begins with ``prefix`` sorts at or after it and before ``prefix`` with its last character
    raised by one)."""
    upper = prefix[:-1] + chr(ord(prefix[-1]) + 1)
    sql = "SELECT COUNT(*) FROM samples WHERE dropped_reason >= ? AND dropped_reason < ?"
    return conn.execute(sql, (prefix, upper)).fetchone()[0]


def mark_dropped(tx: sqlite3.Connection, reasons: Iterable[tuple[int, str]]) -> int:
    """Mark ``(sample id, reason)`` pairs dropped, in the transaction ``tx``; a consumed or leased sample is
    never dropped (it is in a batch being trained, or was trained on). Returns how many were marked."""
    cur = tx.executemany(
        "UPDATE samples SET dropped_reason = ? WHERE id = ? AND consumed_step IS NULL AND lease IS NULL",
        [(reason, int(i)) for i, reason in reasons],
    )
    return max(cur.rowcount, 0)


class Drops:
    """The rules that drop waiting samples as a batch is taken, owned by the store's sample queue: ``counts``
    holds how many this object dropped per rule (``stale``, ``temperature``, ``backlog``), which the trainer
    reads around taking a batch."""

    def __init__(self, db, lineage):
        self._db, self._lineage = db, lineage
        self.counts: Counter[str] = Counter()
        # (trainer temperature, id): every waiting sample up to that id was sampled at that temperature
        self._checked: tuple[float | None, int] = (None, 0)
        self._backlog_logged = float("-inf")

    def forget_checked(self) -> None:
        """Look at every waiting sample's temperature again on the next call (samples consumed by another run,
        perhaps at another temperature, are waiting again)."""
        self._checked = (None, 0)

    def stale(self, policy_version: int, max_staleness: int) -> int:
        """Mark the waiting samples more than ``max_staleness`` updates away from ``policy_version`` along the
        lineage (:meth:`~openclaw_trl.store.lineage.Lineage.staleness`) as dropped (kept, with the reason,
        never handed out); returns how many were dropped now. Leased samples are never dropped."""
        sql = "SELECT s.id, s.policy_version" + WAITING_SQL + FREE_SQL + " AND s.policy_version != ?"
        rows = [(r[0], r[1]) for r in self._db.conn().execute(sql, (int(policy_version),)).fetchall()]
        if not rows:
            return 0
        lineage = self._lineage.lineage()
        # a version above the current one that was never published names no weights yet: not stale
        versions = {v for _, v in rows if lineage.knows(v) or v < policy_version}
        distance = {v: lineage.staleness(v, policy_version) for v in versions}
        stale = [(i, v) for i, v in rows if v in distance and distance[v] > max_staleness]
        return self._drop(
            "stale",
            (
                (
                    i,
                    f"{STALE_REASON} sampled by v{v}, {distance[v]} updates from policy v{policy_version}, "
                    f"max_staleness {max_staleness}",
                )
                for i, v in stale
            ),
        )

    def _drop(self, kind: str, reasons) -> int:
        """Mark ``(sample id, reason)`` pairs dropped (:func:`~openclaw_trl.store.drops.mark_dropped`: never a
        consumed or leased one) and count them in ``self.counts[kind]``; returns how many were marked."""
        reasons = list(reasons)
        if not reasons:
            return 0
        with self._db.tx() as tx:
            marked = mark_dropped(tx, reasons)
        self.counts[kind] += marked
        return marked

    def other_temperature(self, temperature: float) -> int:
        """Mark the waiting samples sampled at another temperature than ``temperature`` as dropped (kept, with
        the reason, never handed out); returns how many were dropped now. Leased samples are never dropped.

        A sample's temperature never changes, so each call looks only at the samples queued since the last
        one (ids above the checked mark): the cost of a call follows the new samples, not the queue. A leased
        sample at another temperature (another queue's batch) holds the mark below it, so it is looked at
        again once it is released."""
        temperature = float(temperature)
        checked_at, after = self._checked
        if checked_at != temperature:
            after = 0
        sql = (
            "SELECT id, temperature, lease FROM samples INDEXED BY samples_waiting"
            " WHERE consumed_step IS NULL AND dropped_reason IS NULL AND id > ? ORDER BY id"
        )
        rows = self._db.conn().execute(sql, (after,)).fetchall()
        other = [(i, t, lease) for i, t, lease in rows if t is not None and abs(t - temperature) > 1e-6]
        held = [i for i, _, lease in other if lease is not None]
        mark = min(held) - 1 if held else (rows[-1][0] if rows else after)
        self._checked = (temperature, mark)
        dropped = self._drop(
            "temperature",
            (
                (
                    i,
                    f"{TEMPERATURE_REASON} sampled at T={t:g}, the trainer trains at T={temperature:g} "
                    f"(a run with temperature {t:g} can train on it)",
                )
                for i, t, lease in other
                if lease is None
            ),
        )
        if dropped:
            logger.warning(
                "%d judged samples were sampled at another temperature than the trainer's (T=%g): they are "
                "kept in the store, not trained on (set temperature to theirs to train on them)",
                dropped,
                temperature,
            )
        return dropped

    def backlog(self, max_waiting: int) -> int:
        """Keep at most ``max_waiting`` samples waiting: mark the older ones dropped (kept, with the reason,
        never handed out; leased samples are never dropped); returns how many were dropped now. Costs one walk
        over the waiting samples, newest first (at most ``max_waiting`` of them plus those it drops)."""
        older = "SELECT s.id" + WAITING_SQL + FREE_SQL + " ORDER BY s.id DESC LIMIT -1 OFFSET ?"
        ids = [r[0] for r in self._db.conn().execute(older, (int(max_waiting),)).fetchall()]
        reason = (
            f"{BACKLOG_REASON} more than {max_waiting} samples were waiting for an update (max_samples_waiting):"
            " the oldest were dropped, so that training follows the recent turns"
        )
        dropped = self._drop("backlog", ((i, reason) for i in ids))
        now = time.monotonic()
        if dropped and now - self._backlog_logged >= BACKLOG_WARN_EVERY_S:
            self._backlog_logged = now
            logger.warning(
                "the trainer cannot keep up with the turns: more than %d samples were waiting, %d of the oldest "
                "were dropped (kept in the store, not trained on; %d so far in this run). A larger batch_size, "
                "or fewer best_of_n candidates, lets updates take more of them",
                max_waiting,
                dropped,
                self.counts["backlog"],
            )
        return dropped
