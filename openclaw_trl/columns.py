"""Stored columns, declared once per record: their SQL declaration, their encoding, their export.

A record module lists its table's columns as a tuple of :class:`Column` next to its dataclass; the store
creates the table and its ``INSERT`` from it (:func:`table_sql`, :func:`insert_sql`), the record writes its
row with it (``to_row``) and reads one back (``from_row``, :class:`Row`), and the export takes its features
from it. Nothing here does I/O.

Column encodings (:func:`dumps` / :func:`loads`, :func:`pack_topk` / :func:`unpack_topk`): token ids,
log-probs and messages are JSON (exact: Python floats round-trip through JSON); top-K teacher rows are
row-major packed ``int32`` ids and ``float32`` log-probs with their ``[T, K]`` shape as JSON.
"""

from __future__ import annotations

import json
from array import array
from collections.abc import Mapping
from dataclasses import dataclass, fields
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


@dataclass(frozen=True)
class Column:
    """One stored column of a record, declared once: the table is created, an existing table gains it, the
    record is written (``to_row``) and read (``from_row``), and the export gets its feature, all from this.

    ``kind`` says how its value is encoded: ``int``, ``float``, ``text`` (as is), ``bool`` (0/1), ``ids`` (a
    JSON list of ints), ``floats`` (a JSON list of floats), ``json`` (any JSON value), ``int32_rows`` /
    ``float32_rows`` (``[T][K]`` rows the record packs itself, :func:`pack_topk`). ``attr`` is the record
    attribute (default: ``name``); the export names the column after it. ``written``: the record's ``to_row``
    writes it (False: set by the store's own updates, e.g. ``consumed_step``). ``export``: a column of the
    dataset export.
    """

    name: str
    sql: str  # the SQL declaration, e.g. "INTEGER NOT NULL"; a column added to an existing file must be
    # nullable or have a DEFAULT (``ALTER TABLE ... ADD COLUMN``)
    kind: str = "text"
    attr: str = ""
    written: bool = True
    export: bool = True

    @property
    def field(self) -> str:
        return self.attr or self.name

    def encode(self, value):
        """The column value of the record attribute ``value`` (None stays NULL)."""
        if value is None:
            return None
        if self.kind == "int":
            return int(value)
        if self.kind == "float":
            return float(value)
        if self.kind == "bool":
            return int(bool(value))
        if self.kind == "ids":
            return dumps([int(t) for t in value])
        if self.kind == "floats":
            return dumps([float(x) for x in value])
        if self.kind == "json":
            return dumps(value)
        return value


def table_sql(table: str, columns: tuple[Column, ...]) -> str:
    """``CREATE TABLE IF NOT EXISTS`` of ``columns`` (the first one is the primary key)."""
    body = ",\n    ".join(f"{c.name} {c.sql}" for c in columns)
    return f"CREATE TABLE IF NOT EXISTS {table} (\n    {body}\n)"


def insert_sql(table: str, columns: tuple[Column, ...]) -> str:
    """The ``INSERT`` of the written ``columns`` (named parameters: ``:name``)."""
    names = [c.name for c in columns if c.written]
    return f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join(':' + n for n in names)})"


class Row:
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
