"""Responses API ids in the store: which served turn a ``resp_...`` id names, and the response object the
client received (so ``previous_response_id`` continues that turn's conversation and ``GET`` returns it).

A row is written after its turn is committed and before the reply leaves, so an id a client has seen always
resolves. Rows are never deleted (they point at training data).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from openclaw_trl.records import dumps, loads
from openclaw_trl.store.db import Database


@dataclass
class StoredResponse:
    """One Responses API id: the turn it names and the response object as it was sent."""

    id: str
    turn_id: int
    created: float
    body: dict


class ResponseIds:
    """Responses API ids: ``store.responses``."""

    def __init__(self, db: Database):
        self._db = db

    def add_response(self, response_id: str, turn_id: int, body: dict, now: float | None = None) -> None:
        """Record that ``response_id`` names turn ``turn_id`` (an id is written once)."""
        now = time.time() if now is None else now
        with self._db.tx() as tx:
            tx.execute(
                "INSERT INTO responses (id, turn_id, created, body) VALUES (?, ?, ?, ?)",
                (response_id, int(turn_id), now, dumps(body)),
            )

    def get_response(self, response_id: str) -> StoredResponse | None:
        row = self._db.conn().execute("SELECT * FROM responses WHERE id = ?", (response_id,)).fetchone()
        if row is None:
            return None
        return StoredResponse(row["id"], row["turn_id"], row["created"], loads(row["body"]))
