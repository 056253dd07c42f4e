"""The sample queue: judged training samples, handed to the trainer oldest first under a lease.

Queue rules:

* nothing is ever deleted: samples beyond a training batch stay queued for the next batch, and a consumed
  sample is marked with the training step that used it (:meth:`SampleQueue.mark_consumed`);
* "waiting" = not consumed, not dropped, and not of a session flagged private after it was judged (such
  samples are kept, never handed out); a batch takes waiting samples that no batch leases;
* a waiting sample whose weights are more than ``max_staleness`` updates away from the current ones along
  the lineage (:mod:`~openclaw_trl.store.lineage`) is dropped when a batch is taken: it stays in the store
  with its ``dropped_reason`` and is never handed out (:meth:`SampleQueue.drop_stale`); the batch is filled
  with the next waiting samples;
* a waiting sample sampled at another temperature than the trainer's is dropped when a batch is taken (its
  ``dropped_reason`` says which temperatures, :meth:`SampleQueue.drop_other_temperature`): its log-probs and
  its teacher's are those of another distribution, so its OPD and top-K terms would compare two temperatures
  (non-zero even where teacher and student agree); a run at that temperature can still train on it;
* when more than ``max_samples_waiting`` samples wait (the trainer cannot keep up with the turns), the oldest
  are dropped as a batch is taken (``backlog``, :meth:`SampleQueue.drop_backlog`): the queue, and the work of
  every update that looks at it, stay bounded however long the server runs, and training follows the recent
  turns;
* a waiting sample whose turn's correction window is open (:mod:`~openclaw_trl.store.holds`: a bare 👎 waiting
  for its correction) is not handed out before the window closes;
* the samples of a batch that no update could train on because the device ran out of memory are marked with
  the reason (:meth:`SampleQueue.skip`), kept and never handed out again;
* a waiting sample is also dropped when explicit feedback on its turn supersedes it (``superseded``: the
  turn is judged again) or the user withdraws its turn (``withdrawn``); a leased sample is never dropped
  (it is in the batch being trained: it is still trained on, and counted consumed).

The batch lease lives in the database: handing samples out writes the queue's owner token into
``samples.lease`` in the transaction that selects them, so every :class:`~openclaw_trl.store.Store` object
on the file, in this process or another, sees it: none hands a leased sample out again or drops it.
:meth:`SampleQueue.mark_consumed` and :meth:`SampleQueue.release` clear the lease (release: back at the
head of the queue); closing the store releases the leases its queue still holds. One trainer owns a store's
queue: the run that starts or resumes (:meth:`SampleQueue.requeue_after`, called before the first batch)
clears every lease, so the batch of a trainer process that died mid-update is waiting again, and the samples
of steps after the checkpoint it resumes from are waiting again too.

Token ids and log-probs are stored as JSON (exact); top-K teacher rows as packed int32 / float32 arrays.
"""

from __future__ import annotations

import os
import sqlite3
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from openclaw_trl.records import SAMPLE_COLUMNS, TrainingSample, insert_sql
from openclaw_trl.store.db import Database
from openclaw_trl.store.drops import (
    BACKLOG_REASON,
    FREE_SQL,
    OUT_OF_MEMORY_REASON,
    STALE_REASON,
    SUPERSEDED,
    TEMPERATURE_REASON,
    UNHELD_SQL,
    WAITING_SQL,
    Drops,
    count_reason,
)
from openclaw_trl.store.lineage import PolicyLineage

_INSERT_SQL = insert_sql("samples", SAMPLE_COLUMNS)


class SampleSourceError(RuntimeError):
    """The source of turns crashed: the samples waited for will never come (see ``fail_waiters``)."""


@dataclass
class ResumePosition:
    """Where training stands according to the store (for checkpoint resume)."""

    last_consumed_step: int | None  # the highest training step that consumed samples; None if none did
    consumed: int  # samples consumed so far
    waiting: int  # judged samples not yet consumed


def has_scorer_sample(tx: sqlite3.Connection, turn_id: int) -> bool:
    """Whether the scorer already turned this turn into a live sample (a turn has at most one; a
    superseded one does not count)."""
    return live_scorer_sample(tx, turn_id) is not None


def live_scorer_sample(tx: sqlite3.Connection, turn_id: int) -> sqlite3.Row | None:
    """The turn's scorer sample that was not superseded (``id``, ``consumed_step``, ``dropped_reason``,
    ``lease``)."""
    sql = (
        "SELECT id, consumed_step, dropped_reason, lease FROM samples WHERE turn_id = ? AND origin = 'scorer'"
        " AND COALESCE(dropped_reason, '') != ?"
    )
    return tx.execute(sql, (turn_id, SUPERSEDED)).fetchone()


def insert_sample(tx: sqlite3.Connection, s: TrainingSample, origin: str, now: float) -> int:
    """Write one sample inside the caller's transaction; returns its id (checks the per-token lengths)."""
    return int(tx.execute(_INSERT_SQL, s.to_row(origin=origin, created=now)).lastrowid)


def _marks(ids: Sequence[int]) -> str:
    return ",".join("?" * len(ids))


class SampleQueue:
    """The trainer's side of the store (module docstring): ``store.queue``.

    ``owner`` is this queue's lease token (the process id and a random part): unique per queue object.
    """

    def __init__(self, db: Database, lineage: PolicyLineage):
        self._db, self._lineage = db, lineage
        self.owner = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
        self._leased_any = False  # whether this queue ever leased samples (``release_all`` on close)
        self._source_error: SampleSourceError | None = None
        self.drops = Drops(db, lineage)  # the samples it keeps out of training, and how many it did

    def add_sample(self, sample: TrainingSample) -> int:
        """Queue a sample directly (tests, replay); returns its id and sets ``sample.sample_id``."""
        with self._db.tx() as tx:
            sample_id = insert_sample(tx, sample, origin="direct", now=time.time())
        sample.sample_id = sample_id
        self._db.notify_waiters()
        return sample_id

    def _available_ids(self, limit: int | None = None, conn: sqlite3.Connection | None = None) -> list[int]:
        sql = "SELECT s.id" + WAITING_SQL + FREE_SQL + UNHELD_SQL + " ORDER BY s.id"
        params: tuple = (time.time(),)
        if limit is not None:
            sql += " LIMIT ?"
            params = (*params, limit)
        return [r[0] for r in (conn or self._db.conn()).execute(sql, params).fetchall()]

    def _lease(self, n: int) -> list[int]:
        """Lease up to ``n`` of the oldest waiting samples to this queue, in one transaction."""
        with self._db.tx() as tx:
            ids = self._available_ids(n, tx)
            if ids:
                tx.execute(f"UPDATE samples SET lease = ? WHERE id IN ({_marks(ids)})", [self.owner, *ids])
        self._leased_any = self._leased_any or bool(ids)
        return ids

    def count_waiting(self) -> int:
        """Judged samples not consumed yet, not held by a correction window and not leased to a batch (what
        the next batch sees)."""
        sql = "SELECT COUNT(*)" + WAITING_SQL + FREE_SQL + UNHELD_SQL
        return self._db.conn().execute(sql, (time.time(),)).fetchone()[0]

    def next_window_close(self) -> float | None:
        """Seconds until the first correction window holding a waiting sample closes (None: none holds one)."""
        now = time.time()
        sql = "SELECT MIN(t.correction_until)" + WAITING_SQL + " AND t.correction_until > ?"
        until = self._db.conn().execute(sql, (now,)).fetchone()[0]
        return None if until is None else max(0.0, float(until) - now)

    def take_samples(self, n: int) -> list[TrainingSample]:
        """Lease up to ``n`` of the oldest waiting samples (non-blocking; may return fewer).

        They stay in the store, unconsumed, until :meth:`mark_consumed`; :meth:`release` puts them back.
        """
        if n <= 0:
            return []
        return self.get_samples(self._lease(n))

    def wait_for_samples(
        self,
        n: int,
        timeout: float | None = None,
        poll: float = 0.2,
        policy_version: int = 0,
        max_staleness: int | None = None,
        temperature: float | None = None,
        max_waiting: int | None = None,
    ) -> list[TrainingSample]:
        """Block until ``n`` samples are waiting, then lease exactly ``n`` (the surplus stays queued).

        Looks at the store every ``poll`` seconds (samples written by other processes), when this process
        writes or releases samples, and when the first correction window holding a sample closes.

        With ``max_staleness``, waiting samples more than ``max_staleness`` updates away from
        ``policy_version`` along the lineage are dropped first, each time the queue is looked at
        (:meth:`drop_stale`), so the batch is made of fresh samples only; with ``temperature``, those sampled at
        another temperature too (:meth:`drop_other_temperature`); with ``max_waiting``, first the oldest beyond
        the newest ``max_waiting`` (:meth:`drop_backlog`). Raises ``TimeoutError`` after
        ``timeout`` seconds, and :class:`SampleSourceError` as soon as :meth:`fail_waiters` is called while
        too few are waiting (nothing is leased then).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        if max_waiting is not None:
            self.drop_backlog(max_waiting)
        while True:
            seen = self._db.wakeup.seen()
            if max_staleness is not None:
                self.drop_stale(policy_version, max_staleness)
            if temperature is not None:
                self.drop_other_temperature(temperature)
            ids = self._available_ids(n)
            if len(ids) < n and self._source_error is not None:
                raise self._source_error
            if len(ids) >= n:
                ids = self._lease(n)
                if len(ids) == n:
                    return self.get_samples(ids)
                self.release(ids)  # another queue object leased some meanwhile: look again
                continue
            wait = poll if deadline is None else min(poll, deadline - time.monotonic())
            if wait <= 0:
                raise TimeoutError(f"only {len(ids)} of {n} samples waiting after {timeout} s")
            closes = self.next_window_close()
            if closes is not None:
                wait = min(wait, closes + 0.001)  # past the close: the sample is free when we look
            self._db.wakeup.wait(seen, wait)  # woken early by samples written in this process

    def drop_stale(self, policy_version: int, max_staleness: int) -> int:
        """:meth:`~openclaw_trl.store.drops.Drops.stale`: the too-stale waiting samples dropped now."""
        return self.drops.stale(policy_version, max_staleness)

    def drop_other_temperature(self, temperature: float) -> int:
        """:meth:`~openclaw_trl.store.drops.Drops.other_temperature`: the samples dropped now."""
        return self.drops.other_temperature(temperature)

    def drop_backlog(self, max_waiting: int) -> int:
        """:meth:`~openclaw_trl.store.drops.Drops.backlog`: the oldest samples dropped now."""
        return self.drops.backlog(max_waiting)

    def count_dropped_temperature(self) -> int:
        """Samples dropped because they were sampled at another temperature (over every run on this store)."""
        return count_reason(self._db.conn(), TEMPERATURE_REASON)

    def count_dropped_stale(self) -> int:
        """Samples dropped because they were too stale (over every run on this store)."""
        return count_reason(self._db.conn(), STALE_REASON)

    def count_dropped_backlog(self) -> int:
        """Samples dropped from a queue longer than ``max_samples_waiting`` (over every run on this store)."""
        return count_reason(self._db.conn(), BACKLOG_REASON)

    def fail_waiters(self, error: str) -> None:
        """The source of turns crashed: wake :meth:`wait_for_samples` (now and later), which raises
        :class:`SampleSourceError` with ``error`` instead of waiting for samples that will never come."""
        self._source_error = SampleSourceError(error)
        self._db.wakeup.notify()

    def get_samples(self, sample_ids: Sequence[int]) -> list[TrainingSample]:
        """Samples by id, in the order given."""
        if not sample_ids:
            return []
        sql = f"SELECT * FROM samples WHERE id IN ({_marks(sample_ids)})"
        rows = self._db.conn().execute(sql, list(sample_ids)).fetchall()
        by_id = {r["id"]: TrainingSample.from_row(r) for r in rows}
        return [by_id[i] for i in sample_ids if i in by_id]

    def mark_consumed(self, sample_ids: Sequence[int], step: int) -> None:
        """Record that training step ``step`` used these samples (idempotent for the same step); their lease
        ends. A sample already consumed by another step raises ``ValueError`` and nothing is changed.
        """
        ids = [int(i) for i in sample_ids]
        if not ids:
            return
        marks = _marks(ids)
        with self._db.tx() as tx:
            rows = tx.execute(f"SELECT id, consumed_step FROM samples WHERE id IN ({marks})", ids).fetchall()
            found = {r["id"]: r["consumed_step"] for r in rows}
            missing = [i for i in ids if i not in found]
            if missing:
                raise ValueError(f"unknown sample ids {missing}")
            clash = {i: s for i, s in found.items() if s is not None and s != step}
            if clash:
                raise ValueError(f"samples already consumed by other steps: {clash}")
            tx.execute(
                f"UPDATE samples SET consumed_step = ?, consumed_at = ?, lease = NULL WHERE id IN ({marks})",
                [int(step), time.time(), *ids],
            )

    def skip(self, sample_ids: Sequence[int], reason: str) -> int:
        """Keep the samples of a batch no update could train on (it ran out of memory) out of training:
        ``dropped_reason`` is ``"out of memory: " + reason``, their lease ends, they stay in the store (a batch
        too large for the device is not handed out again and again). Consumed samples are left alone;
        returns how many were marked."""
        ids = [int(i) for i in sample_ids]
        if not ids:
            return 0
        with self._db.tx() as tx:
            sql = (
                f"UPDATE samples SET dropped_reason = ?, lease = NULL WHERE id IN ({_marks(ids)})"
                " AND consumed_step IS NULL AND dropped_reason IS NULL"
            )
            marked = tx.execute(sql, [f"{OUT_OF_MEMORY_REASON} {reason}", *ids]).rowcount
        self._db.wakeup.notify()
        return marked

    def count_skipped_out_of_memory(self) -> int:
        """Samples kept out of training because their batch ran out of memory (over every run on this store)."""
        return count_reason(self._db.conn(), OUT_OF_MEMORY_REASON)

    def release(self, sample_ids: Sequence[int]) -> None:
        """Put samples this queue leased and that were not consumed back at the head of the queue (e.g. after
        a failed step); samples leased by another queue object are left alone."""
        ids = [int(i) for i in sample_ids]
        if ids:
            with self._db.tx() as tx:
                sql = f"UPDATE samples SET lease = NULL WHERE lease = ? AND id IN ({_marks(ids)})"
                tx.execute(sql, [self.owner, *ids])
        self._db.wakeup.notify()

    def release_all(self) -> int:
        """Release every sample this queue still leases (the store is closed: they go back to the queue);
        returns how many."""
        if not self._leased_any:
            return 0
        with self._db.tx() as tx:
            released = tx.execute("UPDATE samples SET lease = NULL WHERE lease = ?", (self.owner,)).rowcount
        self._db.wakeup.notify()
        return released

    def requeue_after(self, step: int) -> int:
        """Bring the queue back to training step ``step`` (a run starts or resumes from its checkpoint):
        samples consumed by later steps are waiting again, and every lease is cleared (one trainer owns a
        store's queue: a batch leased by a process that stopped before consuming it is waiting again).

        Returns how many consumed samples were re-queued.
        """
        with self._db.tx() as tx:
            cur = tx.execute(
                "UPDATE samples SET consumed_step = NULL, consumed_at = NULL WHERE consumed_step > ?", (step,)
            )
            n = cur.rowcount
            tx.execute("UPDATE samples SET lease = NULL WHERE lease IS NOT NULL")
        self.drops.forget_checked()  # samples waiting again may come from a run at another temperature
        self._db.wakeup.notify()
        return n

    def resume_position(self) -> ResumePosition:
        conn = self._db.conn()
        last, consumed = conn.execute(
            "SELECT MAX(consumed_step), COUNT(consumed_step) FROM samples WHERE consumed_step IS NOT NULL"
        ).fetchone()
        waiting = conn.execute("SELECT COUNT(*)" + WAITING_SQL).fetchone()[0]
        return ResumePosition(last_consumed_step=last, consumed=consumed, waiting=waiting)

    def training_totals(self) -> dict[str, int]:
        """``{"samples", "turns"}``: samples consumed by training and the distinct turns they came from, over
        every run on this store (samples re-queued by a resume count once, when consumed again)."""
        sql = "SELECT COUNT(*), COUNT(DISTINCT turn_id) FROM samples WHERE consumed_step IS NOT NULL"
        samples, turns = self._db.conn().execute(sql).fetchone()
        return {"samples": samples, "turns": turns}
