"""The durable record of everything the pipeline sees: sessions, turns, judge votes and samples.

One SQLite file in WAL mode with ``synchronous=FULL``: every write is a committed transaction when the
method returns, so a turn recorded before the server answers survives a crash (power loss aside, a
``SIGKILL`` loses nothing that was committed). Each thread gets its own connection (server threads, the
scorer and the trainer share one :class:`Store`); writers take ``BEGIN IMMEDIATE`` so concurrent writers
queue on SQLite's lock instead of failing on a read-to-write upgrade.

Nothing is ever deleted by the pipeline. Samples beyond a training batch stay queued for the next
batch; a consumed sample is marked with the training step that used it.

Turn life cycle (``turns.status``)::

    awaiting --next state--> ready --scorer--> judged
        \\                     \\          (untrainable turns go to ``closed`` instead of ``ready``)
         \\                     `--judging raised ``max_attempts`` times--> failed  (error in judge_error)
          `--session ended / history diverged / side turn--> closed   (never trained; reason kept)

A judged turn whose ``judge_error`` starts with ``teacher`` lost its teacher (the teacher prompt could not
be built or the teacher scoring failed): it keeps at most its RL reward (:meth:`Store.count_teacher_failed`).

Reopening a store resumes: ``ready`` turns are judged again (a judgement commits votes, the turn's new
status and its sample in one transaction, so a crash never leaves half of one), and unconsumed samples
are served to the trainer first, oldest first.

"Handed out" is tracked per :class:`Store` object: the trainer process must take samples through one
object (a second object in the same process would hand the same samples out again). Token ids and
log-probs are stored as JSON (exact); top-K teacher rows as packed int32 / float32 arrays.

Trainer API: :meth:`Store.take_samples`, :meth:`Store.wait_for_samples`, :meth:`Store.mark_consumed`,
:meth:`Store.release`, :meth:`Store.count_waiting`, :meth:`Store.resume_position`,
:meth:`Store.requeue_after`; :meth:`Store.add_sample` inserts a sample directly (tests, replay).
Export API: :meth:`Store.iter_sessions`, :meth:`Store.iter_turns`, :meth:`Store.iter_samples` (plain dicts).
Session / scorer API: the remaining public methods, used by :mod:`openclaw_trl.sessions` and
:mod:`openclaw_trl.judging.scorer`.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from array import array
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from openclaw_trl.records import TrainingSample, Vote

SCHEMA_VERSION = 1

TURN_STATUSES = ("awaiting", "ready", "judged", "closed", "failed")
TEACHER_ERROR_PREFIX = "teacher"  # judge_error of a turn that lost its teacher

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
    attached INTEGER NOT NULL          -- 1 when it became the turn's next state
);

CREATE TABLE IF NOT EXISTS samples (
    id INTEGER PRIMARY KEY,
    turn_id INTEGER NOT NULL,
    origin TEXT NOT NULL,              -- scorer / direct
    created REAL NOT NULL,
    prompt_ids TEXT NOT NULL,
    completion_ids TEXT NOT NULL,
    sampling_logprobs TEXT NOT NULL,
    temperature REAL NOT NULL,
    policy_version INTEGER NOT NULL,
    reward REAL NOT NULL,
    has_hint INTEGER NOT NULL,
    hint TEXT,
    teacher_logprobs TEXT,
    topk_shape TEXT,                   -- JSON [T, K] when top-K is stored
    topk_ids BLOB,                     -- int32, row-major
    topk_logprobs BLOB,                -- float32, row-major
    meta TEXT NOT NULL,
    finish_reason TEXT,                -- stop / length (the turn's)
    teacher_prompt_ids TEXT,           -- JSON list of ints: the hint-augmented prompt the teacher scored
    consumed_step INTEGER,
    consumed_at REAL
);
CREATE UNIQUE INDEX IF NOT EXISTS samples_one_per_turn ON samples(turn_id) WHERE origin = 'scorer';
CREATE INDEX IF NOT EXISTS samples_queue ON samples(consumed_step, id);
"""


# Sample columns added after schema version 1 shipped: nullable, so an existing store gains them in place.
_TURN_JSON = (
    "prompt_messages",
    "tools",
    "prompt_ids",
    "completion_ids",
    "sampling_logprobs",
    "response_message",
    "next_state",
)

# Columns added after a store file may have been created: (table, column, declaration).
_ADDED_COLUMNS = (
    ("turns", "judge_attempts", "INTEGER NOT NULL DEFAULT 0"),
    ("samples", "finish_reason", "TEXT"),
    ("samples", "teacher_prompt_ids", "TEXT"),
)


class StoreError(RuntimeError):
    """A store that cannot be used as asked (e.g. written by a newer openclaw-trl)."""


class SampleSourceError(RuntimeError):
    """The source of turns crashed: the samples waited for will never come (see :meth:`Store.fail_waiters`)."""


@dataclass
class ResumePosition:
    """Where training stands according to the store (for checkpoint resume)."""

    last_consumed_step: int | None  # the highest training step that consumed samples; None if none did
    consumed: int  # samples consumed so far
    waiting: int  # judged samples not yet consumed


def _dumps(value) -> str | None:
    return None if value is None else json.dumps(value, ensure_ascii=False)


def _loads(text):
    return None if text is None else json.loads(text)


def _pack_topk(ids, logprobs) -> tuple[str | None, bytes | None, bytes | None]:
    if ids is None or logprobs is None:
        return None, None, None
    rows = len(ids)
    k = len(ids[0]) if rows else 0
    if any(len(r) != k for r in ids) or len(logprobs) != rows or any(len(r) != k for r in logprobs):
        raise ValueError("top-K ids and log-probs must both be [T][K] with the same T and K")
    flat_ids = array("i", [int(x) for r in ids for x in r])
    flat_lp = array("f", [float(x) for r in logprobs for x in r])
    return json.dumps([rows, k]), flat_ids.tobytes(), flat_lp.tobytes()


def _unpack_topk(shape_text, ids_blob, lp_blob):
    if shape_text is None:
        return None, None
    rows, k = json.loads(shape_text)
    ids, lps = array("i"), array("f")
    ids.frombytes(ids_blob)
    lps.frombytes(lp_blob)
    return (
        [list(ids[r * k : (r + 1) * k]) for r in range(rows)],
        [list(lps[r * k : (r + 1) * k]) for r in range(rows)],
    )


class Store:
    """SQLite store shared by the server threads, the scorer and the trainer (see the module docstring).

    ``Store(path)`` creates the file (and its parent directory) or resumes an existing one; it refuses a
    store written with a newer schema. Use it as a context manager or call :meth:`close`.
    """

    def __init__(self, path: str | Path, busy_timeout_s: float = 60.0):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._busy_timeout_s = busy_timeout_s
        self._local = threading.local()
        self._conns: list[sqlite3.Connection] = []
        self._conns_lock = threading.Lock()
        self._queue_lock = threading.Condition()
        self._handed_out: set[int] = set()  # sample ids taken by this process and not yet consumed
        self._source_error: SampleSourceError | None = None
        self._closed = False
        self._init_schema()

    # ------------------------------------------------------------------ connections and transactions
    def _conn(self) -> sqlite3.Connection:
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
            self._local.conn = conn
            with self._conns_lock:
                self._conns.append(conn)
        return conn

    @contextmanager
    def _tx(self):
        """A write transaction: committed on exit, rolled back on error (nothing half-written)."""
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def _init_schema(self) -> None:
        conn = self._conn()
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"{self.path} was written with store schema version {version}, but this openclaw-trl only "
                f"knows versions up to {SCHEMA_VERSION}: upgrade openclaw-trl, or point the config at a "
                "new store file."
            )
        with self._tx() as tx:
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    tx.execute(statement)
            for table, column, declaration in _ADDED_COLUMNS:
                if column not in {r["name"] for r in tx.execute(f"PRAGMA table_info({table})")}:
                    tx.execute(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")
                    if (table, column) == (
                        "samples",
                        "finish_reason",
                    ):  # scorer samples kept it in their meta
                        tx.execute("UPDATE samples SET finish_reason = json_extract(meta, '$.finish_reason')")
            tx.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def close(self) -> None:
        """Close every connection this store opened (from any thread)."""
        with self._conns_lock:
            conns, self._conns = self._conns, []
        for conn in conns:
            try:
                conn.close()
            except sqlite3.Error:
                pass
        self._closed = True

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ sessions
    def open_session(self, key: str | None, now: float | None = None, private: bool = False) -> int:
        """Create a new session (the next generation of ``key``); returns its row id."""
        now = time.time() if now is None else now
        with self._tx() as tx:
            generation = 0
            if key is not None:
                row = tx.execute("SELECT MAX(generation) FROM sessions WHERE key = ?", (key,)).fetchone()
                generation = 0 if row[0] is None else row[0] + 1
            cur = tx.execute(
                "INSERT INTO sessions (key, generation, created, last_active, private, anonymous)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (key, generation, now, now, int(private), int(key is None)),
            )
            return int(cur.lastrowid)

    def find_open_session(self, key: str) -> dict | None:
        """The open (not ended) session of ``key``, as a dict, or None."""
        row = (
            self._conn()
            .execute(
                "SELECT * FROM sessions WHERE key = ? AND ended IS NULL ORDER BY generation DESC LIMIT 1",
                (key,),
            )
            .fetchone()
        )
        return dict(row) if row else None

    def get_session(self, session_id: int) -> dict | None:
        row = self._conn().execute("SELECT * FROM sessions WHERE id = ?", (session_id,)).fetchone()
        return dict(row) if row else None

    def touch_session(self, session_id: int, now: float | None = None) -> None:
        now = time.time() if now is None else now
        with self._tx() as tx:
            tx.execute(
                "UPDATE sessions SET last_active = MAX(last_active, ?) WHERE id = ?", (now, session_id)
            )

    def set_private(self, session_id: int, private: bool = True) -> None:
        """Flag a session "don't learn from this": its turns are neither judged nor handed to the trainer."""
        with self._tx() as tx:
            cur = tx.execute("UPDATE sessions SET private = ? WHERE id = ?", (int(private), session_id))
            if cur.rowcount == 0:
                raise KeyError(f"unknown session {session_id}")

    def end_session(self, session_id: int, reason: str, now: float | None = None) -> None:
        """End a session: its turns still waiting for a next state are closed (never trained)."""
        now = time.time() if now is None else now
        with self._tx() as tx:
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
        rows = (
            self._conn()
            .execute("SELECT id FROM sessions WHERE ended IS NULL AND last_active < ?", (older_than,))
            .fetchall()
        )
        return [r[0] for r in rows]

    # ------------------------------------------------------------------ turns
    def add_turn(
        self,
        session_id: int,
        turn_type: str,
        prompt_messages: list[dict],
        tools: list[dict] | None,
        prompt_ids: Sequence[int],
        completion_ids: Sequence[int],
        sampling_logprobs: Sequence[float],
        completion_text: str,
        temperature: float,
        policy_version: int,
        finish_reason: str | None,
        trainable: bool,
        history_hash: str | None = None,
        response_message: dict | None = None,
        now: float | None = None,
    ) -> int:
        """Commit one served turn (before the reply goes out); returns the turn id."""
        if turn_type not in ("main", "side"):
            raise ValueError(f"turn_type must be 'main' or 'side', got {turn_type!r}")
        if len(sampling_logprobs) != len(completion_ids):
            raise ValueError(
                f"{len(sampling_logprobs)} sampling log-probs for {len(completion_ids)} completion tokens"
            )
        now = time.time() if now is None else now
        status, reason = ("awaiting", None) if turn_type == "main" else ("closed", "side")
        with self._tx() as tx:
            row = tx.execute(
                "SELECT COALESCE(MAX(idx), -1) + 1 FROM turns WHERE session_id = ?", (session_id,)
            )
            idx = row.fetchone()[0]
            cur = tx.execute(
                "INSERT INTO turns (session_id, idx, turn_type, created, prompt_messages, tools, history_hash,"
                " prompt_ids, completion_ids, sampling_logprobs, completion_text, response_message, temperature,"
                " policy_version, finish_reason, trainable, status, close_reason)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    session_id,
                    idx,
                    turn_type,
                    now,
                    _dumps(list(prompt_messages)),
                    _dumps(tools),
                    history_hash,
                    _dumps([int(t) for t in prompt_ids]),
                    _dumps([int(t) for t in completion_ids]),
                    _dumps([float(x) for x in sampling_logprobs]),
                    completion_text,
                    _dumps(response_message),
                    float(temperature),
                    int(policy_version),
                    finish_reason,
                    int(bool(trainable) and turn_type == "main"),
                    status,
                    reason,
                ),
            )
            tx.execute(
                "UPDATE sessions SET last_active = MAX(last_active, ?) WHERE id = ?", (now, session_id)
            )
            return int(cur.lastrowid)

    @staticmethod
    def _turn_dict(row: sqlite3.Row) -> dict:
        d = dict(row)
        for key in _TURN_JSON:
            d[key] = _loads(d[key])
        d["trainable"] = bool(d["trainable"])
        return d

    def get_turn(self, turn_id: int) -> dict | None:
        row = self._conn().execute("SELECT * FROM turns WHERE id = ?", (turn_id,)).fetchone()
        return self._turn_dict(row) if row else None

    def last_main_turn(self, session_id: int) -> dict | None:
        """The most recent main turn of a session (whatever its status), or None."""
        row = (
            self._conn()
            .execute(
                "SELECT * FROM turns WHERE session_id = ? AND turn_type = 'main' ORDER BY idx DESC LIMIT 1",
                (session_id,),
            )
            .fetchone()
        )
        return self._turn_dict(row) if row else None

    def find_turn_by_history(self, hashes: Iterable[str], anonymous_only: bool = True) -> dict | None:
        """The newest awaiting main turn of an open session whose history hash is one of ``hashes``."""
        hashes = list(hashes)
        if not hashes:
            return None
        marks = ",".join("?" * len(hashes))
        sql = (
            "SELECT t.* FROM turns t JOIN sessions s ON s.id = t.session_id"
            f" WHERE t.history_hash IN ({marks}) AND t.turn_type = 'main' AND t.status = 'awaiting'"
            " AND s.ended IS NULL"
            + (" AND s.key IS NULL" if anonymous_only else "")
            + " ORDER BY t.id DESC LIMIT 1"
        )
        row = self._conn().execute(sql, hashes).fetchone()
        return self._turn_dict(row) if row else None

    def attach_next_state(
        self, turn_id: int, next_state: dict, source: str, now: float | None = None, replace: bool = False
    ) -> bool:
        """Attach the next state of a main turn; returns True when it was attached.

        A turn awaiting its next state (or closed because its session ended or its history diverged) gets
        it; a trainable turn then becomes ``ready`` for the scorer, an untrainable one ``closed`` (the next
        state is kept for export). ``replace=True`` (explicit feedback) also replaces a next state that was
        not judged yet, or re-opens a judged turn that produced no sample; a turn that already has a
        sample is never judged twice.
        """
        now = time.time() if now is None else now
        with self._tx() as tx:
            row = tx.execute(
                "SELECT turn_type, trainable, status, close_reason FROM turns WHERE id = ?", (turn_id,)
            ).fetchone()
            if row is None:
                raise KeyError(f"unknown turn {turn_id}")
            if row["turn_type"] != "main":
                return False
            status, reason = row["status"], row["close_reason"]
            has_sample = tx.execute(
                "SELECT 1 FROM samples WHERE turn_id = ? AND origin = 'scorer'", (turn_id,)
            ).fetchone()
            reopenable = status == "closed" and reason in ("session_ended", "history_diverged")
            if status == "awaiting" or reopenable:
                pass
            elif (
                replace
                and not has_sample
                and (status in ("ready", "judged", "failed") or reason == "untrainable")
            ):
                pass
            else:
                return False
            new_status = "ready" if row["trainable"] else "closed"
            tx.execute(
                "UPDATE turns SET next_state = ?, next_state_source = ?, next_state_at = ?, status = ?,"
                " close_reason = ?, judge_round = judge_round + 1, judged_at = NULL, reward = NULL,"
                " hint = NULL, judge_error = NULL, judge_attempts = 0 WHERE id = ?",
                (
                    _dumps(next_state),
                    source,
                    now,
                    new_status,
                    None if row["trainable"] else "untrainable",
                    turn_id,
                ),
            )
            return True

    def close_turn(self, turn_id: int, reason: str) -> None:
        """Close an awaiting turn without a next state (e.g. the conversation history diverged)."""
        with self._tx() as tx:
            tx.execute(
                "UPDATE turns SET status = 'closed', close_reason = ? WHERE id = ? AND status = 'awaiting'",
                (reason, turn_id),
            )

    def add_feedback(self, turn_id: int, rating: int | None, text: str | None, attached: bool) -> int:
        with self._tx() as tx:
            cur = tx.execute(
                "INSERT INTO feedback (turn_id, rating, text, created, attached) VALUES (?, ?, ?, ?, ?)",
                (turn_id, rating, text, time.time(), int(attached)),
            )
            return int(cur.lastrowid)

    def set_feedback_attached(self, feedback_id: int, attached: bool) -> None:
        with self._tx() as tx:
            tx.execute("UPDATE feedback SET attached = ? WHERE id = ?", (int(attached), feedback_id))

    # ------------------------------------------------------------------ scorer side
    def ready_turns(self, limit: int, exclude: Iterable[int] = ()) -> list[dict]:
        """Trainable turns with a next state, not yet judged, of non-private sessions; oldest first."""
        exclude = set(exclude)
        rows = (
            self._conn()
            .execute(
                "SELECT t.* FROM turns t JOIN sessions s ON s.id = t.session_id"
                " WHERE t.status = 'ready' AND t.trainable = 1 AND s.private = 0 ORDER BY t.id LIMIT ?",
                (limit + len(exclude),),
            )
            .fetchall()
        )
        return [self._turn_dict(r) for r in rows if r["id"] not in exclude][:limit]

    def count_ready(self) -> int:
        return (
            self._conn()
            .execute(
                "SELECT COUNT(*) FROM turns t JOIN sessions s ON s.id = t.session_id"
                " WHERE t.status = 'ready' AND t.trainable = 1 AND s.private = 0"
            )
            .fetchone()[0]
        )

    def save_judgement(
        self,
        turn_id: int,
        judge_round: int,
        votes: Sequence[Vote],
        reward: float | None,
        hint: str | None,
        sample: TrainingSample | None,
        error: str | None = None,
    ) -> int | None:
        """Commit a turn's votes, verdict and (optional) sample in one transaction.

        Returns the sample id, or None when no sample was written. A stale judgement (the turn's next
        state changed since ``judge_round``, or it is no longer ``ready``) writes its votes only.
        """
        now = time.time()
        with self._tx() as tx:
            for i, v in enumerate(votes):
                tx.execute(
                    "INSERT INTO votes (turn_id, judge_round, kind, vote_index, backend, raw_text, value, hint,"
                    " error, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (turn_id, judge_round, v.kind, i, v.backend, v.raw_text, v.value, v.hint, v.error, now),
                )
            row = tx.execute("SELECT status, judge_round FROM turns WHERE id = ?", (turn_id,)).fetchone()
            if row is None or row["status"] != "ready" or row["judge_round"] != judge_round:
                return None
            tx.execute(
                "UPDATE turns SET status = 'judged', judged_at = ?, reward = ?, hint = ?, judge_error = ?"
                " WHERE id = ?",
                (now, reward, hint, error, turn_id),
            )
            if sample is None:
                return None
            if tx.execute(
                "SELECT 1 FROM samples WHERE turn_id = ? AND origin = 'scorer'", (turn_id,)
            ).fetchone():
                return None
            sample_id = self._insert_sample(tx, sample, origin="scorer", now=now)
        self._notify()
        return sample_id

    def record_judge_failure(self, turn_id: int, judge_round: int, error: str, max_attempts: int) -> bool:
        """Count one failed judging attempt of a ``ready`` turn (its error kept in ``judge_error``).

        At ``max_attempts`` failures the turn becomes ``failed``: set aside, never judged again unless a new
        next state (feedback) arrives. Returns True when the turn was set aside. A stale attempt (the next
        state changed since ``judge_round``) changes nothing.
        """
        with self._tx() as tx:
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
        return (
            self._conn()
            .execute(
                "SELECT COUNT(*) FROM turns t JOIN sessions s ON s.id = t.session_id"
                " WHERE t.status = 'judged' AND t.hint IS NOT NULL AND t.judge_error LIKE ? AND s.private = 0",
                (TEACHER_ERROR_PREFIX + "%",),
            )
            .fetchone()[0]
        )

    def votes_for(self, turn_id: int) -> list[dict]:
        rows = (
            self._conn().execute("SELECT * FROM votes WHERE turn_id = ? ORDER BY id", (turn_id,)).fetchall()
        )
        return [dict(r) for r in rows]

    # ------------------------------------------------------------------ samples (trainer side)
    @staticmethod
    def _insert_sample(tx: sqlite3.Connection, s: TrainingSample, origin: str, now: float) -> int:
        if len(s.sampling_logprobs) != len(s.completion_ids):
            raise ValueError("sampling_logprobs must have one entry per completion token")
        if s.teacher_logprobs is not None and len(s.teacher_logprobs) != len(s.completion_ids):
            raise ValueError("teacher_logprobs must have one entry per completion token")
        shape, ids_blob, lp_blob = _pack_topk(s.topk_ids, s.topk_logprobs)
        cur = tx.execute(
            "INSERT INTO samples (turn_id, origin, created, prompt_ids, completion_ids, sampling_logprobs,"
            " temperature, policy_version, reward, has_hint, hint, teacher_logprobs, topk_shape, topk_ids,"
            " topk_logprobs, meta, finish_reason, teacher_prompt_ids)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                int(s.turn_id),
                origin,
                now,
                _dumps([int(t) for t in s.prompt_ids]),
                _dumps([int(t) for t in s.completion_ids]),
                _dumps([float(x) for x in s.sampling_logprobs]),
                float(s.temperature),
                int(s.policy_version),
                float(s.reward),
                int(bool(s.has_hint)),
                s.hint,
                _dumps(None if s.teacher_logprobs is None else [float(x) for x in s.teacher_logprobs]),
                shape,
                ids_blob,
                lp_blob,
                _dumps(s.meta or {}),
                s.finish_reason,
                _dumps(None if s.teacher_prompt_ids is None else [int(t) for t in s.teacher_prompt_ids]),
            ),
        )
        return int(cur.lastrowid)

    def add_sample(self, sample: TrainingSample) -> int:
        """Queue a sample directly (tests, replay); returns its id and sets ``sample.sample_id``."""
        with self._tx() as tx:
            sample_id = self._insert_sample(tx, sample, origin="direct", now=time.time())
        sample.sample_id = sample_id
        self._notify()
        return sample_id

    @staticmethod
    def _sample_from_row(r: sqlite3.Row) -> TrainingSample:
        topk_ids, topk_lp = _unpack_topk(r["topk_shape"], r["topk_ids"], r["topk_logprobs"])
        return TrainingSample(
            turn_id=r["turn_id"],
            prompt_ids=_loads(r["prompt_ids"]),
            completion_ids=_loads(r["completion_ids"]),
            sampling_logprobs=_loads(r["sampling_logprobs"]),
            temperature=r["temperature"],
            policy_version=r["policy_version"],
            reward=r["reward"],
            has_hint=bool(r["has_hint"]),
            hint=r["hint"],
            teacher_logprobs=_loads(r["teacher_logprobs"]),
            topk_ids=topk_ids,
            topk_logprobs=topk_lp,
            teacher_prompt_ids=_loads(r["teacher_prompt_ids"]),
            finish_reason=r["finish_reason"],
            sample_id=r["id"],
            meta=_loads(r["meta"]) or {},
        )

    # Samples of sessions flagged private after they were judged are withheld (kept, never handed out).
    _WAITING_SQL = (
        " FROM samples s LEFT JOIN turns t ON s.origin = 'scorer' AND t.id = s.turn_id"
        " LEFT JOIN sessions ss ON ss.id = t.session_id"
        " WHERE s.consumed_step IS NULL AND COALESCE(ss.private, 0) = 0"
    )

    def _notify(self) -> None:
        with self._queue_lock:
            self._queue_lock.notify_all()

    def _available_ids(self, limit: int | None = None) -> list[int]:
        with self._queue_lock:
            handed = set(self._handed_out)
        sql = "SELECT s.id" + self._WAITING_SQL + " ORDER BY s.id"
        params: tuple = ()
        if limit is not None:
            sql += " LIMIT ?"
            params = (limit + len(handed),)
        ids = [r[0] for r in self._conn().execute(sql, params).fetchall() if r[0] not in handed]
        return ids if limit is None else ids[:limit]

    def count_waiting(self) -> int:
        """Judged samples not consumed yet and not handed out by this process (what the next batch sees)."""
        with self._queue_lock:
            handed = set(self._handed_out)
        rows = self._conn().execute("SELECT s.id" + self._WAITING_SQL).fetchall()
        return sum(1 for r in rows if r[0] not in handed)

    def take_samples(self, n: int) -> list[TrainingSample]:
        """Hand out up to ``n`` of the oldest waiting samples (non-blocking; may return fewer).

        They stay in the store, unconsumed, until :meth:`mark_consumed`; :meth:`release` puts them back.
        """
        if n <= 0:
            return []
        with self._queue_lock:
            ids = self._available_ids(n)
            self._handed_out.update(ids)
        return self.get_samples(ids)

    def wait_for_samples(
        self, n: int, timeout: float | None = None, poll: float = 0.2
    ) -> list[TrainingSample]:
        """Block until ``n`` samples are waiting, then hand out exactly ``n`` (the surplus stays queued).

        Raises ``TimeoutError`` after ``timeout`` seconds, and :class:`SampleSourceError` as soon as
        :meth:`fail_waiters` is called while too few are waiting (nothing is handed out then).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._queue_lock:
                ids = self._available_ids(n)
                if len(ids) < n and self._source_error is not None:
                    raise self._source_error
                if len(ids) >= n:
                    self._handed_out.update(ids)
                    break
                wait = poll if deadline is None else min(poll, deadline - time.monotonic())
                if wait <= 0:
                    raise TimeoutError(f"only {len(ids)} of {n} samples waiting after {timeout} s")
                self._queue_lock.wait(wait)  # woken early by samples written in this process
        return self.get_samples(ids)

    def fail_waiters(self, error: str) -> None:
        """The source of turns crashed: wake :meth:`wait_for_samples` (now and later), which raises
        :class:`SampleSourceError` with ``error`` instead of waiting for samples that will never come."""
        with self._queue_lock:
            self._source_error = SampleSourceError(error)
            self._queue_lock.notify_all()

    def get_samples(self, sample_ids: Sequence[int]) -> list[TrainingSample]:
        """Samples by id, in the order given."""
        if not sample_ids:
            return []
        marks = ",".join("?" * len(sample_ids))
        rows = (
            self._conn().execute(f"SELECT * FROM samples WHERE id IN ({marks})", list(sample_ids)).fetchall()
        )
        by_id = {r["id"]: self._sample_from_row(r) for r in rows}
        return [by_id[i] for i in sample_ids if i in by_id]

    def mark_consumed(self, sample_ids: Sequence[int], step: int) -> None:
        """Record that training step ``step`` used these samples (idempotent for the same step).

        A sample already consumed by another step raises ``ValueError`` and nothing is changed.
        """
        ids = [int(i) for i in sample_ids]
        if not ids:
            return
        marks = ",".join("?" * len(ids))
        with self._tx() as tx:
            rows = tx.execute(f"SELECT id, consumed_step FROM samples WHERE id IN ({marks})", ids).fetchall()
            found = {r["id"]: r["consumed_step"] for r in rows}
            missing = [i for i in ids if i not in found]
            if missing:
                raise ValueError(f"unknown sample ids {missing}")
            clash = {i: s for i, s in found.items() if s is not None and s != step}
            if clash:
                raise ValueError(f"samples already consumed by other steps: {clash}")
            tx.execute(
                f"UPDATE samples SET consumed_step = ?, consumed_at = ? WHERE id IN ({marks})",
                [int(step), time.time(), *ids],
            )
        with self._queue_lock:
            self._handed_out.difference_update(ids)

    def release(self, sample_ids: Sequence[int]) -> None:
        """Put handed-out, unconsumed samples back at the head of the queue (e.g. after a failed step)."""
        with self._queue_lock:
            self._handed_out.difference_update(int(i) for i in sample_ids)
            self._queue_lock.notify_all()

    def requeue_after(self, step: int) -> int:
        """Make samples consumed by steps after ``step`` waiting again (resume from an older checkpoint).

        Returns how many were re-queued.
        """
        with self._tx() as tx:
            cur = tx.execute(
                "UPDATE samples SET consumed_step = NULL, consumed_at = NULL WHERE consumed_step > ?", (step,)
            )
            n = cur.rowcount
        self._notify()
        return n

    def resume_position(self) -> ResumePosition:
        conn = self._conn()
        last, consumed = conn.execute(
            "SELECT MAX(consumed_step), COUNT(consumed_step) FROM samples WHERE consumed_step IS NOT NULL"
        ).fetchone()
        waiting = conn.execute("SELECT COUNT(*)" + self._WAITING_SQL).fetchone()[0]
        return ResumePosition(last_consumed_step=last, consumed=consumed, waiting=waiting)

    def training_totals(self) -> dict[str, int]:
        """``{"samples", "turns"}``: samples consumed by training and the distinct turns they came from, over
        every run on this store (samples re-queued by a resume count once, when consumed again)."""
        samples, turns = (
            self._conn()
            .execute("SELECT COUNT(*), COUNT(DISTINCT turn_id) FROM samples WHERE consumed_step IS NOT NULL")
            .fetchone()
        )
        return {"samples": samples, "turns": turns}

    # ------------------------------------------------------------------ export / inspection
    def iter_sessions(self) -> Iterator[dict]:
        """Every session as a dict (oldest first), private ones included (``private`` tells)."""
        for row in self._conn().execute("SELECT * FROM sessions ORDER BY id").fetchall():
            d = dict(row)
            d["private"], d["anonymous"] = bool(d["private"]), bool(d["anonymous"])
            yield d

    def iter_turns(self, include_private: bool = False) -> Iterator[dict]:
        """Every turn as a dict with decoded JSON fields plus ``session_key`` / ``session_generation`` /
        ``private``; turns of private sessions only with ``include_private=True``."""
        sql = (
            "SELECT t.*, s.key AS session_key, s.generation AS session_generation, s.private AS private"
            " FROM turns t JOIN sessions s ON s.id = t.session_id"
            + ("" if include_private else " WHERE s.private = 0")
            + " ORDER BY t.id"
        )
        for row in self._conn().execute(sql).fetchall():
            d = self._turn_dict(row)
            d["private"] = bool(d["private"])
            yield d

    def iter_samples(self, include_private: bool = False) -> Iterator[dict]:
        """Every sample as a dict (TrainingSample fields + ``origin``, ``created``, ``consumed_step``)."""
        sql = (
            "SELECT s.* FROM samples s LEFT JOIN turns t ON s.origin = 'scorer' AND t.id = s.turn_id"
            " LEFT JOIN sessions ss ON ss.id = t.session_id"
            + ("" if include_private else " WHERE COALESCE(ss.private, 0) = 0")
            + " ORDER BY s.id"
        )
        for row in self._conn().execute(sql).fetchall():
            d = vars(self._sample_from_row(row)).copy()
            d.update(origin=row["origin"], created=row["created"], consumed_step=row["consumed_step"])
            yield d

    def recent_hints(self, n: int = 5) -> list[str]:
        """The hints of the ``n`` most recently judged turns that have one (private sessions left out)."""
        rows = (
            self._conn()
            .execute(
                "SELECT t.hint FROM turns t JOIN sessions s ON s.id = t.session_id"
                " WHERE t.hint IS NOT NULL AND s.private = 0 ORDER BY t.judged_at DESC, t.id DESC LIMIT ?",
                (int(n),),
            )
            .fetchall()
        )
        return [r["hint"] for r in reversed(rows)]

    def iter_feedback(self) -> Iterator[dict]:
        for row in self._conn().execute("SELECT * FROM feedback ORDER BY id").fetchall():
            yield dict(row)

    def counts(self) -> dict[str, int]:
        """Row counts per table and turns per status (status pages, tests)."""
        conn = self._conn()
        out = {
            t: conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
            for t in ("sessions", "turns", "votes", "samples", "feedback")
        }
        for status in TURN_STATUSES:
            out[f"turns_{status}"] = conn.execute(
                "SELECT COUNT(*) FROM turns WHERE status = ?", (status,)
            ).fetchone()[0]
        return out
