"""The durable record of everything the pipeline sees: sessions, turns, judge votes and samples.

:class:`Store` is one SQLite file (:mod:`~openclaw_trl.store.db`: WAL, ``synchronous=FULL``, a connection
per thread, ``BEGIN IMMEDIATE`` writers) shared by the server threads, the scorer and the trainer. Every
write is committed when its method returns, so nothing committed is lost to a ``SIGKILL``, and nothing is
ever deleted by the pipeline. The store returns typed records (:mod:`openclaw_trl.records`), never rows.

Its parts, one API each:

* :class:`~openclaw_trl.store.conversations.Conversations` (sessions and served turns, their next states
  and feedback; the turn life cycle), used by :mod:`openclaw_trl.sessions`;
* :class:`~openclaw_trl.store.judging.Judging` (ready turns, judgements committed in one transaction,
  votes, judge failures), used by :mod:`openclaw_trl.judging`;
* :class:`~openclaw_trl.store.queue.SampleQueue` (samples handed to the trainer oldest first, consumed,
  released, re-queued; the queue rules), used by the trainer;
* :class:`~openclaw_trl.store.holds.CorrectionWindows` (a bare 👎 waits for its correction: its samples
  are held until the window closes), used by :mod:`openclaw_trl.sessions` and the status views;
* :class:`~openclaw_trl.store.groups.Groups` (Best-of-N groups: a served turn's candidates, their quick
  scores and their group samples), used by the Best-of-N serving path;
* :class:`~openclaw_trl.store.queries.Queries` (everything for the export, counts, recent hints);
* :class:`~openclaw_trl.store.responses.ResponseIds` (Responses API ids -> turns), used by the server;
* :class:`~openclaw_trl.store.versions.AdapterVersions` (the published adapter versions a rollback
  chooses from, the samples a rollback undid, the persisted learning pause), used by the trainer and the
  learning control.
* :class:`~openclaw_trl.store.lineage.PolicyLineage` (every published policy version, the weights it came
  from, and the staleness of a sample along that lineage), used by the trainer and the sample queue.

Reopening a store resumes: ``ready`` turns are judged again and unconsumed samples are served first.
"""

from __future__ import annotations

from pathlib import Path

from openclaw_trl.store.conversations import FEEDBACK_KINDS, WITHDRAWN, Conversations, Withdrawal
from openclaw_trl.store.db import SCHEMA_VERSION, Database, StoreError
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
    "CorrectionWindow",
    "TEACHER_ERROR_PREFIX",
    "TURN_STATUSES",
    "WITHDRAWN",
    "Lineage",
    "PublishedVersion",
    "ResumePosition",
    "SampleSourceError",
    "Store",
    "StoreError",
    "StoredResponse",
    "Withdrawal",
]


class Store(
    Conversations,
    Judging,
    SampleQueue,
    CorrectionWindows,
    Groups,
    Queries,
    ResponseIds,
    AdapterVersions,
    PolicyLineage,
):
    """SQLite store shared by the server threads, the scorer and the trainer (see the module docstring).

    ``Store(path)`` creates the file (and its parent directory) or resumes an existing one; it refuses a
    store written with a newer schema. Use it as a context manager or call :meth:`close`.
    """

    def __init__(self, path: str | Path, busy_timeout_s: float = 60.0):
        self._db = Database(path, busy_timeout_s)
        self.path = self._db.path
        self._init_queue()

    def atomic(self):
        """``with store.atomic():`` the writes of this thread inside it are one transaction (all or none),
        e.g. a served turn, its Best-of-N group and its Responses id (``Database.atomic``)."""
        return self._db.atomic()

    def close(self) -> None:
        """Close every connection this store opened (from any thread)."""
        self._db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
