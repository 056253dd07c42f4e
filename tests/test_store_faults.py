"""The store under faults from outside the server, over real HTTP on the tiny model: the disk fills while a turn is
stored, another process holds the SQLite file locked, and the file is copied (backed up) while the server writes.

A full disk is SQLite's own ``SQLITE_FULL``: every connection of the store gets ``PRAGMA max_page_count`` at its
current size, so a write that needs a new page fails exactly as on a full disk (the error, the rollback), and
raising the limit again is the space coming back. Nothing is mocked but the disk's size.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
import threading

import httpx
import pytest

from openclaw_trl.engines import create_engine
from openclaw_trl.store import Store, StoreBusy, StoreFull
from openclaw_trl.store import db as store_db
from openclaw_trl.store.backup import backup_store
from tests._server_helpers import running_stack, turns

UNLIMITED = 1073741823


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    engine = create_engine("hf", str(tiny_model_dir))
    yield engine
    engine.close()


class Disk:
    """The store's disk, which can fill up: ``full()`` caps every connection at the file's current pages."""

    def __init__(self, monkeypatch):
        self.limit = UNLIMITED
        original = store_db.Database.conn

        def conn(db):
            connection = original(db)
            if not connection.in_transaction:
                connection.execute(f"PRAGMA max_page_count={self.limit}")
            return connection

        monkeypatch.setattr(store_db.Database, "conn", conn)

    def full(self, store) -> None:
        self.limit = store.db.conn().execute("PRAGMA page_count").fetchone()[0]

    def space_returns(self) -> None:
        self.limit = UNLIMITED


def _chat(url: str, text: str, session: str, **kwargs) -> httpx.Response:
    body = {"model": "openclaw", "messages": [{"role": "user", "content": text}], "max_tokens": 4, **kwargs}
    headers = {"X-Session-Id": session, "X-Turn-Type": "main"}
    return httpx.post(f"{url}/v1/chat/completions", json=body, headers=headers, timeout=120)


def test_a_full_disk_fails_the_turn_with_507_keeps_the_store_readable_and_heals_by_itself(
    engine, tmp_path, monkeypatch, caplog
):
    disk = Disk(monkeypatch)
    with running_stack(engine, tmp_path / "s.db") as stack:
        assert _chat(stack.url, "hello", "a").status_code == 200
        before = turns(stack.store)
        disk.full(stack.store)
        big = "words " * 400  # 2,400 characters, ~1,200 tokens: overflow pages the full disk has no room for
        response = _chat(stack.url, big, "b")
        assert response.status_code == 507, response.text
        error = response.json()["error"]
        assert error["code"] == "insufficient_storage" and "disk under the store" in error["message"]
        assert "free some space" in error["message"]
        assert turns(stack.store) == before  # nothing half-written, and the store still reads
        assert any("disk under the store" in r.getMessage() for r in caplog.records)
        assert not any(r.exc_info for r in caplog.records if "disk under the store" in r.getMessage())
        disk.space_returns()
        assert _chat(stack.url, big, "b").status_code == 200  # space back: the same request works
        assert len(turns(stack.store)) == len(before) + 1


def test_a_full_disk_rolls_back_the_whole_write_and_says_so(tmp_path, monkeypatch):
    disk = Disk(monkeypatch)
    with Store(tmp_path / "s.db") as store:
        with store.db.tx() as tx:
            tx.execute("CREATE TABLE filler (x)")
        disk.full(store)
        with pytest.raises(StoreFull, match="nothing of this write was kept"):
            with store.db.tx() as tx:
                tx.execute("INSERT INTO filler VALUES ('small')")
                tx.execute("INSERT INTO filler VALUES (?)", ("y" * 50_000,))
        assert store.db.conn().execute("SELECT COUNT(*) FROM filler").fetchone()[0] == 0
        disk.space_returns()
        with store.db.tx() as tx:
            tx.execute("INSERT INTO filler VALUES (?)", ("y" * 50_000,))
        assert store.db.conn().execute("SELECT COUNT(*) FROM filler").fetchone()[0] == 1


HOLD_LOCK = textwrap.dedent(
    """
    import sqlite3, sys, time
    conn = sqlite3.connect(sys.argv[1], isolation_level=None)
    conn.execute("BEGIN EXCLUSIVE")
    print("locked", flush=True)
    sys.stdin.readline()
    conn.execute("ROLLBACK")
    """
)


def test_a_store_locked_by_another_process_fails_requests_with_503_and_nothing_half_written(engine, tmp_path):
    from openclaw_trl.serving.app import ServerThread, create_app
    from openclaw_trl.serving.settings import ServerSettings
    from openclaw_trl.sessions import TurnCollector

    path = tmp_path / "s.db"
    store = Store(path, busy_timeout_s=0.5)
    app = create_app(engine, TurnCollector(store), store, ServerSettings(ui=False, default_max_tokens=4))
    server = ServerThread(app).start()
    try:
        assert _chat(server.url, "hello", "a").status_code == 200
        before = turns(store)
        holder = subprocess.Popen(
            [sys.executable, "-c", HOLD_LOCK, str(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert holder.stdout.readline().strip() == "locked"
            response = _chat(server.url, "are you there?", "b")
            assert response.status_code == 503, response.text
            error = response.json()["error"]
            assert error["code"] == "store_busy" and "locked by another process" in error["message"]
            assert httpx.get(f"{server.url}/v1/status", timeout=30).status_code == 200  # reads go on
        finally:
            holder.communicate("\n", timeout=30)
        assert turns(store) == before
        assert _chat(server.url, "are you there?", "b").status_code == 200  # the lock gone: served and stored
        assert len(turns(store)) == len(before) + 1
    finally:
        server.stop()
        store.close()


def test_store_busy_names_what_to_do(tmp_path):
    err = store_db.storage_error(sqlite3.OperationalError("database is locked"), tmp_path / "s.db")
    assert isinstance(err, StoreBusy) and "retry" in str(err)
    assert store_db.storage_error(ValueError("x"), tmp_path) is None


def test_a_backup_taken_while_the_server_writes_holds_every_turn_committed_before_it(engine, tmp_path):
    with running_stack(engine, tmp_path / "s.db") as stack:
        stop = threading.Event()
        codes = []

        def talk():
            i = 0
            while not stop.is_set():
                codes.append(_chat(stack.url, f"message {i}", f"s{i % 3}").status_code)
                i += 1

        writer = threading.Thread(target=talk)
        writer.start()
        try:
            while len(codes) < 3:
                threading.Event().wait(0.05)
            committed = {t.id for t in turns(stack.store)}
            copy = backup_store(stack.store.path, tmp_path / "backup" / "s.db")
        finally:
            stop.set()
            writer.join()
        assert set(codes) == {200}
        with Store(copy) as restored:  # opens as a store, and holds every turn committed before the backup
            assert committed <= {t.id for t in turns(restored)}
            assert restored.db.conn().execute("PRAGMA integrity_check").fetchone()[0] == "ok"
