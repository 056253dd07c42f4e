"""Typed records that travel between the layers: sessions, turns, votes, feedback, judgements and samples.

The store returns them, the scorer and the sessions build and read them, the trainer and the export read
their attributes; nothing here does I/O. Each stored record is built from a row in one place, its
``from_row(row)`` (a row is any mapping of column names to values, e.g. a ``sqlite3.Row``), which decodes the
record's JSON columns, named once in its ``JSON_COLUMNS``, and turns its 0/1 columns into booleans.

Column encodings shared with the store's writes (:func:`dumps` / :func:`loads`, :func:`pack_topk` /
:func:`unpack_topk`): token ids, log-probs and messages are JSON (exact: Python floats round-trip through
JSON); top-K teacher rows are row-major packed ``int32`` ids and ``float32`` log-probs with their ``[T, K]``
shape as JSON.
"""

from __future__ import annotations

import json
from array import array
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar


def dumps(value) -> str | None:
    """A JSON column value (None stays NULL)."""
    return None if value is None else json.dumps(value, ensure_ascii=False)


def loads(text):
    """The value of a JSON column (NULL gives None)."""
    return None if text is None else json.loads(text)


def pack_topk(ids, logprobs) -> tuple[str | None, bytes | None, bytes | None]:
    """``(shape JSON, int32 ids, float32 log-probs)`` of ``[T][K]`` top-K rows; all None without them."""
    if ids is None or logprobs is None:
        return None, None, None
    rows = len(ids)
    k = len(ids[0]) if rows else 0
    if any(len(r) != k for r in ids) or len(logprobs) != rows or any(len(r) != k for r in logprobs):
        raise ValueError("top-K ids and log-probs must both be [T][K] with the same T and K")
    flat_ids = array("i", [int(x) for r in ids for x in r])
    flat_lp = array("f", [float(x) for r in logprobs for x in r])
    return json.dumps([rows, k]), flat_ids.tobytes(), flat_lp.tobytes()


def unpack_topk(shape_text, ids_blob, lp_blob) -> tuple[list | None, list | None]:
    """The ``[T][K]`` ids and log-probs packed by :func:`pack_topk` (None, None without a shape)."""
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


class _Row:
    """``from_row``: a record from a row holding (at least) its columns; extra columns are ignored and
    missing ones keep the field's default."""

    JSON_COLUMNS: ClassVar[tuple[str, ...]] = ()
    BOOL_COLUMNS: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def _decoded(cls, row: Mapping[str, Any]) -> dict[str, Any]:
        data = dict(row)
        for name in cls.JSON_COLUMNS:
            if name in data:
                data[name] = loads(data[name])
        for name in cls.BOOL_COLUMNS:
            if data.get(name) is not None:
                data[name] = bool(data[name])
        return {f.name: data[f.name] for f in fields(cls) if f.name in data}

    @classmethod
    def from_row(cls, row: Mapping[str, Any]):
        return cls(**cls._decoded(row))


@dataclass
class Session(_Row):
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
class Turn(_Row):
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


@dataclass
class Vote(_Row):
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
class Feedback(_Row):
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


@dataclass
class TrainingSample(_Row):
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

    JSON_COLUMNS: ClassVar[tuple[str, ...]] = (
        "prompt_ids",
        "completion_ids",
        "sampling_logprobs",
        "teacher_logprobs",
        "teacher_prompt_ids",
        "meta",
    )
    BOOL_COLUMNS: ClassVar[tuple[str, ...]] = ("has_hint",)

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
class CandidateGroup(_Row):
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
