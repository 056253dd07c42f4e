"""The database under the store: one SQLite file, a connection per thread, write transactions, the schema.

One SQLite file in WAL mode with ``synchronous=FULL``: every write is a committed transaction when the
method that makes it returns, so a turn recorded before the server answers survives a crash (power loss
aside, a ``SIGKILL`` loses nothing that was committed). Each thread gets its own connection (server
threads, the scorer and the trainer share one store); writers take ``BEGIN IMMEDIATE`` so concurrent
writers queue on SQLite's lock instead of failing on a read-to-write upgrade.

The schema carries ``SCHEMA_VERSION`` in ``PRAGMA user_version``; a file written by a newer version is
refused. The write-ahead log is bounded (``WAL_LIMIT_BYTES``), and so is each connection's page cache
(``PAGE_CACHE_KIB``). Columns added after a store file may have been created (``_ADDED_COLUMNS``) are nullable or
defaulted, so an existing store gains them in place when it is opened; so do tables added later
(``candidate_groups``, ``policy_lineage``), created when missing. Version 2 added ``samples.lease`` (the
batch lease): a version-1 file gains it (NULL: nothing leased) when it is opened and keeps every row.
"""

from __future__ import annotations

import errno
import sqlite3
import threading
from contextlib import contextmanager
from pathlib import Path

from openclaw_trl.records import SAMPLE_COLUMNS, table_sql

WAL_LIMIT_BYTES = 16 * 1024 * 1024
"""The write-ahead log's size bound (``journal_size_limit``): SQLite checkpoints the log into the store file
every 1000 pages (about 4 MB) and truncates it back to at most this size, so a server that writes for weeks
keeps a bounded ``-wal`` file beside its store."""

PAGE_CACHE_KIB = 512
"""Each connection's page cache (``cache_size``), in KiB. A server's threads have a connection each, and each
cache fills up to its size as the store grows (SQLite's default, 2000 KiB, makes a few dozen threads hold tens
of MB more after hours than after minutes); a page that is not cached is read again from the file, which the
system's own file cache usually holds."""

SCHEMA_VERSION = 2
"""1: the first schema; 2: ``samples.lease`` (the batch lease, :mod:`~openclaw_trl.store.queue`)."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    id INTEGER PRIMARY KEY,
    key TEXT,                          -- the client's session id (NULL for anonymous sessions)
    generation INTEGER NOT NULL,       -- 0, 1, ... per key: a reused id after the end starts a new one
    created REAL NOT NULL,
    last_active REAL NOT NULL,
    ended REAL,
    end_reason TEXT,                   -- done / idle / ...
    private INTEGER NOT NULL DEFAULT 0,   -- "don't learn from this conversation"
    anonymous INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS sessions_open ON sessions(key, ended);
CREATE UNIQUE INDEX IF NOT EXISTS sessions_key_gen ON sessions(key, generation) WHERE key IS NOT NULL;

CREATE TABLE IF NOT EXISTS turns (
    id INTEGER PRIMARY KEY,
    session_id INTEGER NOT NULL REFERENCES sessions(id),
    idx INTEGER NOT NULL,              -- position within the session (main and side turns)
    turn_type TEXT NOT NULL,           -- main / side
    created REAL NOT NULL,
    prompt_messages TEXT NOT NULL,     -- JSON list of the request's messages
    tools TEXT,                        -- JSON list or NULL
    history_hash TEXT,                 -- hash of the normalised prompt messages (next-state matching)
    prompt_ids TEXT NOT NULL,          -- JSON list of ints, exactly what the engine saw
    completion_ids TEXT NOT NULL,      -- JSON list of ints, exactly as sampled
    sampling_logprobs TEXT NOT NULL,   -- JSON list of floats, at the logprob temperature
    completion_text TEXT NOT NULL,     -- the decoded completion (special tokens kept)
    response_message TEXT,             -- JSON: the assistant message as the client received it
    temperature REAL NOT NULL,
    policy_version INTEGER NOT NULL,
    finish_reason TEXT,
    trainable INTEGER NOT NULL,        -- main turn of a trainable session with a non-empty completion
    status TEXT NOT NULL,
    close_reason TEXT,
    next_state TEXT,                   -- JSON {"role", "content", ...}
    next_state_source TEXT,            -- request / feedback
    next_state_at REAL,
    judge_round INTEGER NOT NULL DEFAULT 0,  -- +1 each time the next state is (re)attached
    judged_at REAL,
    reward REAL,
    hint TEXT,
    judge_error TEXT,
    judge_attempts INTEGER NOT NULL DEFAULT 0,  -- failed judging attempts of this judge_round
    UNIQUE(session_id, idx)
);
CREATE INDEX IF NOT EXISTS turns_status ON turns(status);
CREATE INDEX IF NOT EXISTS turns_history ON turns(history_hash);

CREATE TABLE IF NOT EXISTS votes (
    id INTEGER PRIMARY KEY,
    turn_id INTEGER NOT NULL REFERENCES turns(id),
    judge_round INTEGER NOT NULL,
    kind TEXT NOT NULL,                -- prm / hint
    vote_index INTEGER NOT NULL,
    backend TEXT NOT NULL,
    raw_text TEXT,
    value INTEGER,                     -- parsed verdict (NULL = invalid / failed vote)
    hint TEXT,
    error TEXT,
    created REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS votes_turn ON votes(turn_id);

CREATE TABLE IF NOT EXISTS feedback (
    id INTEGER PRIMARY KEY,
    turn_id INTEGER NOT NULL REFERENCES turns(id),
    rating INTEGER,
    text TEXT,
    created REAL NOT NULL,
    attached INTEGER NOT NULL,         -- 1 when it became the turn's next state
    kind TEXT                          -- rating / correction / edit / reject (NULL: written before kinds)
);

CREATE INDEX IF NOT EXISTS samples_queue ON samples(consumed_step, id);

CREATE TABLE IF NOT EXISTS responses (
    id TEXT PRIMARY KEY,               -- a Responses API id (resp_...): names one served turn
    turn_id INTEGER NOT NULL REFERENCES turns(id),
    created REAL NOT NULL,
    body TEXT NOT NULL                 -- JSON: the response object as the client received it
);

CREATE TABLE IF NOT EXISTS candidate_groups (
    id INTEGER PRIMARY KEY,
    turn_id INTEGER NOT NULL REFERENCES turns(id),  -- the served turn
    created REAL NOT NULL,
    backend TEXT NOT NULL,             -- the quick judge backend
    served_index INTEGER NOT NULL,
    candidates TEXT NOT NULL,          -- JSON list: ids, log-probs, text, finish reason, version, score
    score_mean REAL,                   -- over the scored candidates (NULL: none scored)
    score_std REAL,
    served_prob REAL                   -- P(served = served_index | candidates) (NULL: the best, always)
);
CREATE UNIQUE INDEX IF NOT EXISTS candidate_groups_turn ON candidate_groups(turn_id);

CREATE TABLE IF NOT EXISTS adapter_versions (
    version INTEGER PRIMARY KEY,       -- the policy version (= the trainer's global step) that published it
    created REAL NOT NULL,
    samples INTEGER NOT NULL,          -- samples its update consumed (0 for the initial and restored ones)
    metrics TEXT NOT NULL,             -- JSON: the metrics logged at that update
    restored_from INTEGER,             -- a rollback: the version whose checkpoint it published again
    checkpoint TEXT                    -- its checkpoint folder (adapter, optimizer, scheduler, RNG, step)
);

CREATE TABLE IF NOT EXISTS policy_lineage (
    version INTEGER PRIMARY KEY,       -- a published policy version: a number is published once per store
    parent INTEGER,                    -- the version its weights started from (NULL: the initial adapter)
    updates INTEGER NOT NULL,          -- optimizer updates from the parent's weights (0: same weights, renumbered)
    created REAL NOT NULL,
    note TEXT                          -- update / initial / rollback / resume
);

CREATE TABLE IF NOT EXISTS learning_state (
    key TEXT PRIMARY KEY,              -- paused
    value TEXT NOT NULL
);
"""


# Columns added after a store file may have been created: (table, column, declaration). The ``samples``
# table gains every column of ``SAMPLE_COLUMNS`` it lacks (declared there).
_ADDED_COLUMNS = (
    ("turns", "judge_attempts", "INTEGER NOT NULL DEFAULT 0"),
    ("feedback", "kind", "TEXT"),
    ("turns", "exchange_key", "TEXT"),
    ("turns", "reply_key", "TEXT"),
    ("candidate_groups", "served_prob", "REAL"),
    ("turns", "correction_until", "REAL"),  # a 👎 waits for its correction until then (store.holds)
)

# Indexes over added columns, created once the columns exist. A turn has at most one live scorer sample:
# one superseded by later explicit feedback (kept, never trained) makes room for the new judgement. The partial
# indexes keep what every update or every turn looks up (the waiting samples, dropped samples by reason, the
# latest hints) as cheap in a store of a million turns as in a new one.
_INDEXES = """
CREATE INDEX IF NOT EXISTS turns_exchange ON turns(exchange_key);
CREATE INDEX IF NOT EXISTS turns_reply ON turns(reply_key);
DROP INDEX IF EXISTS samples_one_per_turn;
CREATE UNIQUE INDEX IF NOT EXISTS samples_one_live_per_turn ON samples(turn_id)
    WHERE origin = 'scorer' AND COALESCE(dropped_reason, '') != 'superseded';
CREATE INDEX IF NOT EXISTS samples_lease ON samples(lease) WHERE lease IS NOT NULL;
CREATE INDEX IF NOT EXISTS samples_dropped ON samples(dropped_reason) WHERE dropped_reason IS NOT NULL;
CREATE INDEX IF NOT EXISTS samples_waiting ON samples(id) WHERE consumed_step IS NULL AND dropped_reason IS NULL;
CREATE INDEX IF NOT EXISTS turns_hinted ON turns(judged_at, id) WHERE hint IS NOT NULL;
"""


class Wakeup:
    """Wakes the threads of this process that wait for new rows (the sample queue's batch wait).

    A waiter reads :meth:`seen` before it looks at the store and passes it to :meth:`wait`, which returns at
    once when a wake-up came in between (none is lost), else after ``timeout`` seconds at most.
    """

    def __init__(self):
        self._cond = threading.Condition()
        self._count = 0

    def seen(self) -> int:
        with self._cond:
            return self._count

    def notify(self) -> None:
        with self._cond:
            self._count += 1
            self._cond.notify_all()

    def wait(self, seen: int, timeout: float) -> None:
        with self._cond:
            if self._count == seen:
                self._cond.wait(timeout)


class StoreError(RuntimeError):
    """A store that cannot be used as asked (e.g. written by a newer openclaw-trl, or closed)."""


class StoreFull(StoreError):
    """The disk under the store is full: the write was rolled back whole (nothing of it kept), the store stays
    readable, and the same write succeeds once space is freed. ``http_status``: what a server answers (507)."""

    http_status, code = 507, "insufficient_storage"


class StoreBusy(StoreError):
    """Another process held the store's write lock for longer than the busy timeout: the write was rolled back
    whole and may be retried. ``http_status``: what a server answers (503)."""

    http_status, code = 503, "store_busy"


def storage_error(err: BaseException, path: Path) -> StoreError | None:
    """``err`` as :class:`StoreFull` or :class:`StoreBusy` when it is one of those (SQLite's ``SQLITE_FULL``
    or an ``ENOSPC``; ``SQLITE_BUSY`` / ``SQLITE_LOCKED``), else ``None``."""
    code = getattr(err, "sqlite_errorcode", None)
    text = str(err)
    if (isinstance(err, OSError) and err.errno == errno.ENOSPC) or (
        isinstance(err, sqlite3.OperationalError) and (code == sqlite3.SQLITE_FULL or "disk is full" in text)
    ):
        return StoreFull(
            f"the disk under the store {path} is full ({text}): nothing of this write was kept; "
            "free some space (old runs, checkpoints) and it works again"
        )
    if isinstance(err, sqlite3.OperationalError) and (
        code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED) or "database is locked" in text
    ):
        return StoreBusy(
            f"the store {path} is locked by another process ({text}): nothing of this write was kept; "
            "retry, and stop whatever holds it (an open sqlite3 shell, a backup that locks the file)"
        )
    return None


class Database:
    """The store's SQLite file: ``conn()`` is this thread's connection, ``tx()`` a write transaction.

    Creates the file (and its parent directory) or opens an existing one, applying the schema and its
    added columns; refuses a file written with a newer schema.
    """

    def __init__(self, path: str | Path, busy_timeout_s: float = 60.0):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._busy_timeout_s = busy_timeout_s
        self._local = threading.local()
        self._conns: list[sqlite3.Connection] = []
        self._conns_lock = threading.Lock()
        self._closed = False
        self.wakeup = Wakeup()  # wakes the waiters of this process (``notify_waiters``)
        self._init_schema()

    def conn(self) -> sqlite3.Connection:
        """This thread's connection (opened on first use; rows are ``sqlite3.Row``)."""
        if self._closed:
            raise StoreError(f"store {self.path} is closed")
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(
                self.path, timeout=self._busy_timeout_s, isolation_level=None, check_same_thread=False
            )
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute("PRAGMA foreign_keys=ON")
            conn.execute(f"PRAGMA journal_size_limit={WAL_LIMIT_BYTES}")
            conn.execute(f"PRAGMA cache_size=-{PAGE_CACHE_KIB}")
            self._local.conn = conn
            with self._conns_lock:
                self._conns.append(conn)
        return conn

    @contextmanager
    def tx(self):
        """A write transaction: committed on exit, rolled back on error (nothing half-written).

        A transaction of this thread's connection that is open outside any ``tx`` was left by an exception
        raised between ``BEGIN`` and the commit's end (a signal handler's, e.g. SIGTERM): it never committed,
        so it is rolled back before the new one begins. A ``tx`` inside a ``tx`` of the same thread is refused."""
        conn = self.conn()
        if getattr(self._local, "atomic", False):  # inside ``atomic``: part of its one transaction
            yield conn
            return
        if getattr(self._local, "in_tx", False):
            raise StoreError("a store transaction was opened inside another one on the same thread")
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        self._local.in_tx = True
        try:
            conn.execute("BEGIN IMMEDIATE")
            yield conn
            conn.execute("COMMIT")
        except BaseException as err:
            if conn.in_transaction:
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:  # a full disk may fail the rollback too: SQLite then rolls back itself
                    pass
            translated = storage_error(err, self.path)
            if translated is not None:
                raise translated from err
            raise
        finally:
            self._local.in_tx = False

    @contextmanager
    def atomic(self):
        """Several writes of this thread as one transaction: every ``tx()`` inside it joins it, so they are
        all committed when it exits, or none of them when it raises (e.g. a served turn and the rows that
        name it). ``after_commit`` callbacks registered inside run once it has committed."""
        with self.tx() as conn:
            self._local.atomic, self._local.after_commit = True, []
            try:
                yield conn
            finally:
                self._local.atomic = False
                callbacks, self._local.after_commit = self._local.after_commit, None
        for callback in callbacks:
            callback()

    def after_commit(self, callback) -> None:
        """Run ``callback`` once the current ``atomic`` block has committed (at once outside of one): a
        wake-up of readers must not come before the rows they will read, nor take locks mid-transaction."""
        pending = getattr(self._local, "after_commit", None)
        if getattr(self._local, "atomic", False) and pending is not None:
            pending.append(callback)
        else:
            callback()

    def notify_waiters(self) -> None:
        """Wake this process's waiters (``wakeup``) once the current transaction has committed."""
        self.after_commit(self.wakeup.notify)

    def _init_schema(self) -> None:
        version = self.conn().execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"{self.path} was written with store schema version {version}, but this openclaw-trl only "
                f"knows versions up to {SCHEMA_VERSION}: upgrade openclaw-trl, or point the config at a "
                "new store file."
            )
        with self.tx() as tx:
            tx.execute(table_sql("samples", SAMPLE_COLUMNS))
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    tx.execute(statement)
            _add_missing_columns(tx)
            for statement in _INDEXES.split(";"):
                if statement.strip():
                    tx.execute(statement)
            tx.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def close(self) -> None:
        """Close every connection this database opened (from any thread)."""
        with self._conns_lock:
            conns, self._conns = self._conns, []
        for conn in conns:
            try:
                conn.close()
            except sqlite3.Error:
                pass
        self._closed = True


def _add_missing_columns(tx: sqlite3.Connection) -> None:
    added = _ADDED_COLUMNS + tuple(("samples", c.name, c.sql) for c in SAMPLE_COLUMNS)
    for table, column, declaration in added:
        if column in {r["name"] for r in tx.execute(f"PRAGMA table_info({table})")}:
            continue
        tx.execute(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")
        if (table, column) == ("samples", "finish_reason"):  # scorer samples kept it in their meta
            tx.execute("UPDATE samples SET finish_reason = json_extract(meta, '$.finish_reason')")
