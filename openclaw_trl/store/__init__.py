"""The durable record of everything the pipeline sees: sessions, turns, judge votes and samples.

:class:`Store` is one SQLite file shared by the server threads, the scorer and the trainer, as a
composition: one :class:`~openclaw_trl.store.db.Database` (``store.db``: WAL, ``synchronous=FULL``, a
connection per thread, ``BEGIN IMMEDIATE`` write transactions ``tx()``, ``atomic()`` blocks) and small
repositories over it, one job each, sharing nothing but the database:

* ``store.conversations`` (:class:`~openclaw_trl.store.conversations.Conversations`): sessions and served
  turns, their next states and feedback, withdrawals; the turn life cycle. Used by the sessions;
* ``store.judging`` (:class:`~openclaw_trl.store.judging.Judging`): ready turns, judgements committed in one
  transaction, votes, judge failures. Used by :mod:`openclaw_trl.judging`;
* ``store.queue`` (:class:`~openclaw_trl.store.queue.SampleQueue`): samples leased to the trainer oldest
  first, consumed, released, re-queued; the queue rules and the batch lease. Used by the trainer;
* ``store.holds`` (:class:`~openclaw_trl.store.holds.CorrectionWindows`): a bare 👎 waits for its correction,
  its samples held until the window closes. Used by :mod:`openclaw_trl.sessions` and the status views;
* ``store.groups`` (:class:`~openclaw_trl.store.groups.Groups`): Best-of-N groups, their candidates, quick
  scores and group samples. Used by the Best-of-N serving path;
* ``store.queries`` (:class:`~openclaw_trl.store.queries.Queries`): read-only views (the export, counts,
  recent hints, recent prompts);
* ``store.responses`` (:class:`~openclaw_trl.store.responses.ResponseIds`): Responses API ids -> turns;
* ``store.versions`` (:class:`~openclaw_trl.store.versions.AdapterVersions`): the published adapter versions
  a rollback chooses from, the samples a rollback undid, the persisted learning pause;
* ``store.lineage`` (:class:`~openclaw_trl.store.lineage.PolicyLineage`): every published policy version, the
  weights it came from, the staleness of a sample along that lineage.

A consumer that needs one repository receives that one. Every write is committed when its method returns,
so nothing committed is lost to a ``SIGKILL``, and nothing is ever deleted by the pipeline. The store
returns typed records (:mod:`openclaw_trl.records`), never rows; each record's columns are declared once
there. The batch lease lives in the database (``samples.lease``), so every ``Store`` object on the file, in
any process, respects it (:mod:`~openclaw_trl.store.queue`). Reopening a store resumes: ``ready`` turns are
judged again and unconsumed samples are served first.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from openclaw_trl.store.conversations import FEEDBACK_KINDS, WITHDRAWN, Conversations, Withdrawal
from openclaw_trl.store.db import SCHEMA_VERSION, Database, StoreBusy, StoreError, StoreFull
from openclaw_trl.store.groups import Groups
from openclaw_trl.store.holds import CorrectionWindow, CorrectionWindows
from openclaw_trl.store.judging import TEACHER_ERROR_PREFIX, Judging
from openclaw_trl.store.lineage import Lineage, PolicyLineage, PublishedVersion
from openclaw_trl.store.queries import TURN_STATUSES, Queries
from openclaw_trl.store.queue import ResumePosition, SampleQueue, SampleSourceError
from openclaw_trl.store.responses import ResponseIds, StoredResponse
from openclaw_trl.store.versions import ROLLED_BACK_PREFIX, AdapterVersion, AdapterVersions

__all__ = [
    "FEEDBACK_KINDS",
    "ROLLED_BACK_PREFIX",
    "SCHEMA_VERSION",
    "AdapterVersion",
    "AdapterVersions",
    "Conversations",
    "CorrectionWindow",
    "CorrectionWindows",
    "Database",
    "Groups",
    "Judging",
    "Lineage",
    "PolicyLineage",
    "PublishedVersion",
    "Queries",
    "ResponseIds",
    "ResumePosition",
    "SampleQueue",
    "SampleSourceError",
    "Store",
    "StoreBusy",
    "StoreError",
    "StoreFull",
    "StoredResponse",
    "TEACHER_ERROR_PREFIX",
    "TURN_STATUSES",
    "WITHDRAWN",
    "Withdrawal",
]


class Store:
    """SQLite store shared by the server threads, the scorer and the trainer (see the module docstring).

    ``Store(path)`` creates the file (and its parent directory) or resumes an existing one, migrating an
    older schema in place; it refuses a store written with a newer schema. Use it as a context manager or
    call :meth:`close`.
    """

    def __init__(self, path: str | Path, busy_timeout_s: float = 60.0):
        self.db = Database(path, busy_timeout_s)
        self.path = self.db.path
        self.conversations = Conversations(self.db)
        self.judging = Judging(self.db)
        self.lineage = PolicyLineage(self.db)
        self.queue = SampleQueue(self.db, self.lineage)
        self.holds = CorrectionWindows(self.db)
        self.groups = Groups(self.db)
        self.queries = Queries(self.db)
        self.responses = ResponseIds(self.db)
        self.versions = AdapterVersions(self.db)

    def atomic(self):
        """``with store.atomic():`` the writes of this thread inside it are one transaction (all or none),
        e.g. a served turn, its Best-of-N group and its Responses id (``Database.atomic``)."""
        return self.db.atomic()

    def close(self) -> None:
        """Release the samples this store's queue still leases, then close every connection it opened (from
        any thread)."""
        try:
            self.queue.release_all()
        except (sqlite3.Error, StoreError):  # a closed or vanished file: its leases end with the next run
            pass
        self.db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
