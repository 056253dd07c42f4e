"""Typed records that travel between the layers: sessions, turns, votes, feedback, judgements and samples.

The store returns them, the scorer and the sessions build and read them, the trainer and the export read
their attributes; nothing here does I/O. Each stored record is built from a row in one place, its
``from_row(row)`` (a row is any mapping of column names to values, e.g. a ``sqlite3.Row``), which decodes the
record's JSON columns, named once in its ``JSON_COLUMNS``, and turns its 0/1 columns into booleans.

A sample's columns are declared once, in :data:`SAMPLE_COLUMNS` (:class:`~openclaw_trl.columns.Column`): the
store creates its table and its ``INSERT`` from them, :meth:`TrainingSample.to_row` writes them, and the
export takes its features from them; a served turn's written columns likewise (:data:`SERVED_TURN_COLUMNS`,
:class:`ServedTurn`). The encodings (JSON ids and log-probs, packed top-K rows): :mod:`openclaw_trl.columns`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from openclaw_trl.columns import (  # noqa: F401 - the column helpers are part of this module's API
    Column,
    Row,
    dumps,
    insert_sql,
    loads,
    pack_topk,
    table_sql,
    unpack_topk,
)


@dataclass
class Session(Row):
    """One conversation: the ``generation``-th session of the client's ``key`` (None when anonymous)."""

    id: int
    key: str | None
    generation: int
    created: float
    last_active: float
    ended: float | None = None  # when it ended (None while open)
    end_reason: str | None = None  # done / idle / ...
    private: bool = False  # "don't learn from this conversation"
    anonymous: bool = False

    BOOL_COLUMNS: ClassVar[tuple[str, ...]] = ("private", "anonymous")


@dataclass
class Turn(Row):
    """One served assistant turn: the prompt and the sampled completion exactly as the engine saw them,
    its next state once known, and the judge's verdict.

    ``status`` is ``awaiting`` (no next state yet), ``ready`` (to judge), ``judged``, ``closed`` (never
    trained; ``close_reason`` says why) or ``failed`` (judging kept raising; ``judge_error`` says why).
    ``session_key``, ``session_generation`` and ``private`` are filled where the turn is read with its
    session (the export), None otherwise.
    """

    id: int
    session_id: int
    idx: int  # position within the session (main and side turns)
    turn_type: str  # main / side
    created: float
    prompt_messages: list[dict]
    tools: list[dict] | None
    prompt_ids: list[int]
    completion_ids: list[int]
    sampling_logprobs: list[float]  # at ``temperature``, one per completion token
    completion_text: str  # the decoded completion (special tokens kept)
    temperature: float
    policy_version: int
    trainable: bool  # a main turn of a trainable session with a non-empty completion
    status: str
    history_hash: str | None = None  # hash of the normalised prompt messages (next-state matching)
    exchange_key: str | None = (
        None  # the prompt's last user/tool message + the reply, normalised (sessions.chaining)
    )
    reply_key: str | None = None  # the reply alone, normalised (None for a short reply)
    response_message: dict | None = None  # the assistant message as the client received it
    finish_reason: str | None = None
    close_reason: str | None = None
    next_state: dict | None = None  # {"role", "content", ...}; feedback adds "rating", "text"
    next_state_source: str | None = None  # request / feedback
    next_state_at: float | None = None
    correction_until: float | None = None  # a bare 👎's samples are not trained before then (Unix time)
    judge_round: int = 0  # +1 each time the next state is (re)attached
    judged_at: float | None = None
    reward: float | None = None
    hint: str | None = None
    judge_error: str | None = None
    judge_attempts: int = 0  # failed judging attempts of this judge round
    session_key: str | None = None
    session_generation: int | None = None
    private: bool | None = None

    JSON_COLUMNS: ClassVar[tuple[str, ...]] = (
        "prompt_messages",
        "tools",
        "prompt_ids",
        "completion_ids",
        "sampling_logprobs",
        "response_message",
        "next_state",
    )
    BOOL_COLUMNS: ClassVar[tuple[str, ...]] = ("trainable", "private")


# The columns of a served turn that ``Conversations.add_turn`` writes from a :class:`ServedTurn` (the store
# adds ``idx``, ``created``, ``status`` and ``close_reason``; the next state and the verdict come later).
SERVED_TURN_COLUMNS: tuple[Column, ...] = (
    Column("session_id", "INTEGER NOT NULL", "int"),
    Column("turn_type", "TEXT NOT NULL"),
    Column("prompt_messages", "TEXT NOT NULL", "json"),
    Column("tools", "TEXT", "json"),
    Column("history_hash", "TEXT"),
    Column("prompt_ids", "TEXT NOT NULL", "ids"),
    Column("completion_ids", "TEXT NOT NULL", "ids"),
    Column("sampling_logprobs", "TEXT NOT NULL", "floats"),
    Column("completion_text", "TEXT NOT NULL"),
    Column("response_message", "TEXT", "json"),
    Column("temperature", "REAL NOT NULL", "float"),
    Column("policy_version", "INTEGER NOT NULL", "int"),
    Column("finish_reason", "TEXT"),
    Column("trainable", "INTEGER NOT NULL", "bool"),
    Column("exchange_key", "TEXT"),
    Column("reply_key", "TEXT"),
)


@dataclass
class ServedTurn:
    """A turn the server is about to answer with, as the store records it (``Conversations.add_turn``):
    the prompt and completion exactly as the engine saw and sampled them (fields as in :class:`Turn`)."""

    session_id: int
    turn_type: str  # main / side
    prompt_messages: list[dict]
    tools: list[dict] | None
    prompt_ids: Sequence[int]
    completion_ids: Sequence[int]
    sampling_logprobs: Sequence[float]
    completion_text: str
    temperature: float
    policy_version: int
    finish_reason: str | None
    trainable: bool  # only a main turn is (a side turn is stored untrainable)
    history_hash: str | None = None
    response_message: dict | None = None
    exchange_key: str | None = None
    reply_key: str | None = None

    def to_row(self) -> dict[str, Any]:
        """Its columns (``SERVED_TURN_COLUMNS``); checks the turn type and the per-token log-probs."""
        if self.turn_type not in ("main", "side"):
            raise ValueError(f"turn_type must be 'main' or 'side', got {self.turn_type!r}")
        if len(self.sampling_logprobs) != len(self.completion_ids):
            raise ValueError(
                f"{len(self.sampling_logprobs)} sampling log-probs for "
                f"{len(self.completion_ids)} completion tokens"
            )
        row = {c.name: c.encode(getattr(self, c.field)) for c in SERVED_TURN_COLUMNS}
        row["prompt_messages"] = dumps(list(self.prompt_messages))
        row["trainable"] = int(bool(self.trainable) and self.turn_type == "main")
        return row


@dataclass
class Vote(Row):
    """One judge vote: ``value`` is the parsed verdict (None = invalid, failed or timed out).

    The judge builds the first six fields; the store adds where the vote belongs when it reads it back.
    """

    kind: str  # prm / hint
    backend: str
    raw_text: str | None
    value: int | None
    hint: str | None = None
    error: str | None = None
    turn_id: int | None = None
    judge_round: int | None = None
    vote_index: int | None = None
    created: float | None = None


@dataclass
class Feedback(Row):
    """Explicit feedback on a turn (a rating of +1 / -1 and/or a text); ``attached`` when it became the
    turn's next state. ``kind``: ``rating`` (👍/👎), ``correction`` (typed), ``edit`` (the answer edited in
    the UI), ``reject`` (retry: the user asked for another answer); None for feedback stored before kinds."""

    id: int
    turn_id: int
    rating: int | None
    text: str | None
    created: float
    attached: bool
    kind: str | None = None

    BOOL_COLUMNS: ClassVar[tuple[str, ...]] = ("attached",)


# The ``samples`` table, in export order (then the store's own bookkeeping, not exported): the one declaration
# of a sample's columns (``TrainingSample`` fields document their meaning).
SAMPLE_COLUMNS: tuple[Column, ...] = (
    Column("id", "INTEGER PRIMARY KEY", "int", attr="sample_id", written=False),
    Column("turn_id", "INTEGER NOT NULL", "int"),
    Column("origin", "TEXT NOT NULL"),  # scorer / group / direct
    Column("created", "REAL NOT NULL", "float"),
    Column("prompt_ids", "TEXT NOT NULL", "ids"),
    Column("completion_ids", "TEXT NOT NULL", "ids"),
    Column("sampling_logprobs", "TEXT NOT NULL", "floats"),
    Column("temperature", "REAL NOT NULL", "float"),
    Column("policy_version", "INTEGER NOT NULL", "int"),
    Column("reward", "REAL NOT NULL", "float"),
    Column("baseline", "REAL NOT NULL DEFAULT 0", "float"),
    Column("has_hint", "INTEGER NOT NULL", "bool"),
    Column("hint", "TEXT"),
    Column("teacher_logprobs", "TEXT", "floats"),
    Column("topk_ids", "BLOB", "int32_rows"),  # int32, row-major (pack_topk)
    Column("topk_logprobs", "BLOB", "float32_rows"),  # float32, row-major
    Column("meta", "TEXT NOT NULL", "json"),
    Column("consumed_step", "INTEGER", "int", written=False),
    Column("dropped_reason", "TEXT", written=False),  # stale / superseded / withdrawn / rolled_back: ...
    Column("group_id", "INTEGER", "int"),
    Column("group_std", "REAL", "float"),
    Column("weight", "REAL NOT NULL DEFAULT 1", "float"),
    Column("topk_shape", "TEXT", export=False),  # JSON [T, K] when top-K is stored
    Column("finish_reason", "TEXT", export=False),
    Column("teacher_prompt_ids", "TEXT", "ids", export=False),
    Column("consumed_at", "REAL", "float", written=False, export=False),
    # the batch lease: the owner token of the queue that handed it out, until consumed or released
    Column("lease", "TEXT", written=False, export=False),
)


@dataclass
class TrainingSample(Row):
    """One assistant turn, judged, ready for a PPO update.

    The token ids are exactly those the engine saw and sampled (never re-tokenized text).
    ``teacher_logprobs`` is only meaningful when ``has_hint`` (the OPD term is masked off otherwise).
    A Best-of-N group sample (``group_id`` set, ``origin`` ``group``) is one candidate of a served turn: its
    ``reward`` is the candidate's quick score, ``baseline`` and ``group_std`` its group's mean and std.
    ``origin``, ``created``, ``consumed_step`` and ``dropped_reason`` are the store's bookkeeping, filled
    when it reads a sample and left out of equality (two samples are equal when their content is).
    """

    turn_id: int
    prompt_ids: list[int]
    completion_ids: list[int]
    sampling_logprobs: list[float]  # lp_old at sampling time, at ``temperature``
    temperature: float
    policy_version: int  # the adapter version that sampled the completion
    reward: float = 0.0  # Binary-RL reward r in {-1, 0, +1}
    has_hint: bool = False  # opd_mask: an accepted hint and real teacher log-probs
    hint: str | None = None
    teacher_logprobs: list[float] | None = None  # lp_T, one per completion token
    topk_ids: list[list[int]] | None = None  # [T][K] teacher top-K ids (top-K distillation)
    topk_logprobs: list[list[float]] | None = None  # [T][K] teacher log-probs on those ids
    teacher_prompt_ids: list[int] | None = None  # the hint-augmented prompt the teacher scored
    finish_reason: str | None = None  # "stop" or "length" (cut at the token limit); None when unknown
    # b of the RL term: the mean judged reward of the session's earlier turns (advantage_baseline), or for a
    # Best-of-N group sample the mean quick score of its group
    baseline: float = 0.0
    group_id: int | None = None  # the Best-of-N group (CandidateGroup) of a group sample; None otherwise
    group_std: float | None = None  # std of its group's quick scores (scale_rewards: group)
    # multiplies the sample's advantage: the importance weight of a served Best-of-N candidate's verdict
    # (1/N over its probability of being served, see judging.best_of_n); 1 for every other sample
    weight: float = 1.0
    sample_id: int | None = None  # assigned by the store
    meta: dict = field(default_factory=dict)
    origin: str | None = field(default=None, compare=False)  # scorer / group / direct
    created: float | None = field(default=None, compare=False)
    consumed_step: int | None = field(default=None, compare=False)  # the step that used it (None: waiting)
    dropped_reason: str | None = field(default=None, compare=False)  # why it is never trained on (None: kept)
    # updates between its weights and the trainer's along the lineage, set when the trainer takes it
    staleness: int | None = field(default=None, compare=False)

    COLUMNS: ClassVar[tuple[Column, ...]] = SAMPLE_COLUMNS
    JSON_COLUMNS: ClassVar[tuple[str, ...]] = tuple(
        c.name for c in SAMPLE_COLUMNS if c.kind in ("ids", "floats", "json")
    )
    BOOL_COLUMNS: ClassVar[tuple[str, ...]] = tuple(c.name for c in SAMPLE_COLUMNS if c.kind == "bool")

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> TrainingSample:
        """A stored sample: its row's ``id`` is the ``sample_id``, its packed top-K rows are unpacked."""
        data = cls._decoded(row)
        data["sample_id"] = row["id"]
        data["meta"] = data.get("meta") or {}
        data["topk_ids"], data["topk_logprobs"] = unpack_topk(
            row["topk_shape"], row["topk_ids"], row["topk_logprobs"]
        )
        return cls(**data)

    def to_row(self, **store_fields) -> dict[str, Any]:
        """The written columns of this sample (``store_fields``, e.g. ``origin`` and ``created``, override its
        attributes); checks the per-token lengths."""
        if len(self.sampling_logprobs) != len(self.completion_ids):
            raise ValueError("sampling_logprobs must have one entry per completion token")
        if self.teacher_logprobs is not None and len(self.teacher_logprobs) != len(self.completion_ids):
            raise ValueError("teacher_logprobs must have one entry per completion token")
        shape, ids_blob, lp_blob = pack_topk(self.topk_ids, self.topk_logprobs)
        packed = {
            "topk_shape": shape,
            "topk_ids": ids_blob,
            "topk_logprobs": lp_blob,
            "meta": self.meta or {},
        }
        row = {}
        for column in SAMPLE_COLUMNS:
            if column.written:
                value = store_fields.get(
                    column.name, packed.get(column.name, getattr(self, column.field, None))
                )
                row[column.name] = column.encode(value)
        return row


@dataclass
class Candidate:
    """One Best-of-N candidate of a served turn: what the engine sampled and the quick judge's score."""

    completion_ids: list[int]
    sampling_logprobs: list[float]
    completion_text: str  # the decoded completion (special tokens kept)
    finish_reason: str | None
    policy_version: int
    score: float | None  # the quick judge's score (higher = better); None = no opinion


@dataclass
class CandidateGroup(Row):
    """The ``N`` candidates sampled for one served turn (Best-of-N), their quick scores, the one served.

    ``score_mean`` / ``score_std`` are over the candidates that have a score (the std with Bessel's
    correction, 0 for a single score; both None when none has one). The prompt and temperature are the
    served turn's (``turn_id``).
    """

    turn_id: int
    backend: str  # the quick judge backend that scored them
    served_index: int
    candidates: list[Candidate]
    score_mean: float | None = None
    score_std: float | None = None
    # P(served = served_index | the candidates): 1 - e + e/N for the best, e/N for another (e = the
    # exploration chance); None for groups stored before it was recorded (the best, always served)
    served_prob: float | None = None
    id: int | None = None  # assigned by the store
    created: float | None = None
    session_id: int | None = None  # filled where the group is read with its turn (the export)

    JSON_COLUMNS: ClassVar[tuple[str, ...]] = ("candidates",)

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> CandidateGroup:
        data = cls._decoded(row)
        data["candidates"] = [Candidate(**c) for c in data["candidates"]]
        return cls(**data)

    @property
    def scores(self) -> list[float | None]:
        return [c.score for c in self.candidates]


@dataclass
class TeacherScore:
    """The teacher's log-probs of a turn's original completion ids under the hint-augmented prompt
    (``prompt_ids``), at the turn's sampling temperature; top-K rows when top-K distillation is on."""

    logprobs: list[float]
    prompt_ids: list[int]
    topk_ids: list[list[int]] | None = None
    topk_logprobs: list[list[float]] | None = None


@dataclass
class Judgement:
    """One judged turn before it is committed: its votes, the reduced verdict (``reward``, ``hint``), the
    teacher's score when a hint was accepted and scored, and the sample it yields (None: no sample)."""

    turn: Turn
    votes: list[Vote] = field(default_factory=list)
    reward: int = 0
    hint: str | None = None
    error: str | None = None  # why the turn lost its teacher or its sample, when it did
    teacher: TeacherScore | None = None
    sample: TrainingSample | None = None
