"""One request never harms another, and a turn is stored whole or not at all.

* the HF engine: a request that fails on its own (its generator, its sampling step) fails alone, and the other
  requests decoded in the same batch complete;
* the store: a turn, its Best-of-N group and its Responses id are one transaction: when any part fails nothing is
  stored; a Responses stream cut while its turn is being stored leaves all of it stored, never a turn alone;
* ownership: ``POST /v1/feedback`` acts only on turns of the session it names.
"""

from __future__ import annotations

import json
import socket
import threading
from urllib.parse import urlsplit

import httpx
import pytest

from openclaw_trl.engines.base import GenerationRequest, SamplingParams
from tests._server_helpers import running_stack
from tests.helpers import tiny_hf_engine


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    with tiny_hf_engine(tiny_model_dir, max_batch_size=8, batch_wait_s=0.3) as engine:
        yield engine


# --------------------------------------------------------------------------------------------------
# Per-request isolation in the HF engine batch
# --------------------------------------------------------------------------------------------------


def _generate_together(engine, samplings: list[SamplingParams]) -> list:
    """Each sampling as its own concurrent caller (so they share one batch); a result or the exception."""
    prompt = engine.tokenizer.encode("hello there", add_special_tokens=False)
    results: list = [None] * len(samplings)
    start = threading.Barrier(len(samplings))

    def call(i: int) -> None:
        start.wait()
        try:
            results[i] = engine.generate([GenerationRequest(prompt, samplings[i])])[0]
        except Exception as exc:  # noqa: BLE001 - the test reads it
            results[i] = exc

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(samplings))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return results


@pytest.mark.parametrize("where", ["generator", "sampling step"])
def test_a_failing_request_fails_alone_and_its_batch_completes(engine, monkeypatch, where):
    import openclaw_trl.engines.hf_runner as hf

    if where == "generator":
        make = engine._make_generator

        def make_generator(seed):
            if seed == 13:
                raise ValueError("this seed takes no generator")
            return make(seed)

        monkeypatch.setattr(engine, "_make_generator", make_generator)
    else:
        sample = hf.sample_token

        def sample_token(logits, sp, generator):
            if sp.seed == 13:
                raise ValueError("this request cannot be sampled")
            return sample(logits, sp, generator)

        monkeypatch.setattr(hf, "sample_token", sample_token)
    batches = engine.stats["batches"]
    ok = [SamplingParams(max_new_tokens=3, seed=s) for s in (1, 2, 3)]
    bad, *good = _generate_together(engine, [SamplingParams(max_new_tokens=3, seed=13), *ok])
    assert isinstance(bad, RuntimeError), bad
    assert "cannot be sampled" in str(bad) or "takes no generator" in str(bad), bad
    assert all(not isinstance(g, Exception) and len(g.token_ids) >= 1 for g in good), good
    assert engine.stats["batches"] - batches == 1  # they did share one batch


def test_a_seed_no_engine_takes_is_refused_before_the_batch(engine):
    prompt = engine.tokenizer.encode("hi", add_special_tokens=False)
    for seed in (2**63, -(2**63) - 1, 1.5, True):
        with pytest.raises(ValueError, match="seed must be a 64-bit integer"):
            engine.generate([GenerationRequest(prompt, SamplingParams(max_new_tokens=2, seed=seed))])
    edge = [SamplingParams(max_new_tokens=2, seed=s, n=n) for s, n in ((2**63 - 1, 3), (-(2**63), 1))]
    assert all(len(c.token_ids) >= 1 for s in edge for c in engine.generate([GenerationRequest(prompt, s)]))


def test_a_huge_seed_over_http_is_a_400_and_a_request_beside_it_is_served(engine, tmp_path):
    with running_stack(engine, tmp_path / "store.db", max_context_len=256) as stack:
        replies = {}
        start = threading.Barrier(2)

        def send(kind: str, seed: int) -> None:
            start.wait()
            body = {"messages": [{"role": "user", "content": kind}], "max_tokens": 3, "seed": seed}
            replies[kind] = httpx.post(stack.url + "/v1/chat/completions", json=body, timeout=120)

        threads = [threading.Thread(target=send, args=a) for a in (("bad", 2**64), ("good", 7))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert replies["bad"].status_code == 400 and replies["bad"].json()["error"]["param"] == "seed"
        assert replies["good"].status_code == 200


# --------------------------------------------------------------------------------------------------
# A turn, its Best-of-N group and its Responses id: one transaction
# --------------------------------------------------------------------------------------------------


def quick_length(turn) -> float:
    return min(1.0, len(turn.response) / 20)


@pytest.fixture
def best_of_2(engine, tmp_path):
    """A served stack with Best-of-2 (a callable quick judge) over the shared engine."""
    from openclaw_trl.judging import BestOfN, QuickJudgeConfig, make_quick_judge
    from openclaw_trl.serving.app import ServerThread, create_app
    from openclaw_trl.serving.settings import ServerSettings
    from openclaw_trl.sessions import TurnCollector
    from openclaw_trl.store import Store

    store = Store(tmp_path / "store.db")
    picker = BestOfN(2, make_quick_judge(QuickJudgeConfig("callable", "x:y"), fn=quick_length), store)
    settings = ServerSettings(ui=False, default_max_tokens=3, max_context_len=256)
    app = create_app(engine, TurnCollector(store), store, settings, best_of_n=picker)
    server = ServerThread(app).start()
    try:
        yield server.url, store, app.state.tenants[None].service
    finally:
        server.stop()
        store.close()


def _rows(store, session: str) -> dict[str, int]:
    conn = store.db.conn()
    turns = "SELECT t.id FROM turns t JOIN sessions s ON s.id = t.session_id WHERE s.key = ?"
    out = {"turns": conn.execute(f"SELECT COUNT(*) FROM ({turns})", (session,)).fetchone()[0]}
    for table in ("responses", "candidate_groups"):
        sql = f"SELECT COUNT(*) FROM {table} WHERE turn_id IN ({turns})"
        out[table] = conn.execute(sql, (session,)).fetchone()[0]
    out["samples"] = conn.execute(
        f"SELECT COUNT(*) FROM samples WHERE origin = 'group' AND turn_id IN ({turns})", (session,)
    ).fetchone()[0]
    return out


def test_a_turn_whose_response_row_fails_is_not_stored_with_its_group(best_of_2, monkeypatch):
    url, store, _service = best_of_2

    def refuse(*_args, **_kwargs):
        raise RuntimeError("the response row cannot be written")

    monkeypatch.setattr(store.responses, "add_response", refuse)
    body = {"input": "tell me about tea", "max_output_tokens": 3}
    r = httpx.post(url + "/v1/responses", json=body, headers={"X-Session-Id": "atomic"}, timeout=120)
    assert r.status_code == 500 and r.json()["error"]["type"] == "server_error"
    assert _rows(store, "atomic") == {"turns": 0, "responses": 0, "candidate_groups": 0, "samples": 0}
    monkeypatch.undo()
    r = httpx.post(url + "/v1/responses", json=body, headers={"X-Session-Id": "atomic"}, timeout=120)
    assert r.status_code == 200
    assert _rows(store, "atomic") == {"turns": 1, "responses": 1, "candidate_groups": 1, "samples": 2}


def _drain(sock: socket.socket) -> None:
    try:
        while sock.recv(65536):
            pass
    except OSError:  # closed by the test
        pass


def test_a_responses_stream_cut_while_its_turn_is_stored_leaves_all_of_it(best_of_2, monkeypatch):
    """The client leaves while the server stores the turn (slowed down here): the turn, its group and its
    response id are all stored, never the turn alone."""
    url, store, service = best_of_2
    finish, storing, left, stored = service.finish, threading.Event(), threading.Event(), threading.Event()

    def slow_finish(*args, **kwargs):
        storing.set()
        left.wait(120)  # the client leaves meanwhile
        try:
            return finish(*args, **kwargs)
        finally:
            stored.set()

    monkeypatch.setattr(service, "finish", slow_finish)
    body = json.dumps({"input": "tell me about tea", "max_output_tokens": 3, "stream": True}).encode()
    host, port = urlsplit(url).hostname, urlsplit(url).port
    sock = socket.create_connection((host, port), timeout=120)
    head = (
        f"POST /v1/responses HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"X-Session-Id: cut\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    sock.sendall(head.encode() + body)
    reader = threading.Thread(target=_drain, args=(sock,), daemon=True)
    reader.start()  # the events are read as they come
    assert storing.wait(120)  # generated and streamed; the server is storing the turn now
    sock.shutdown(socket.SHUT_RDWR)  # the client leaves
    sock.close()
    left.set()
    assert stored.wait(120)  # the server finished storing after the client left
    rows = _rows(store, "cut")
    assert rows == {"turns": 1, "responses": 1, "candidate_groups": 1, "samples": 2}, rows


# --------------------------------------------------------------------------------------------------
# Ownership of turns
# --------------------------------------------------------------------------------------------------


def test_feedback_acts_only_on_the_named_sessions_turns(engine, tmp_path):
    with running_stack(engine, tmp_path / "store.db", max_context_len=256) as stack:
        ask = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        mine = httpx.post(stack.url + "/v1/chat/completions", json=ask, headers={"X-Session-Id": "alice"})
        turn = mine.json()["openclaw"]["turn_id"]
        assert mine.json()["openclaw"]["session_id"] == mine.headers["x-openclaw-session-id"] == "alice"
        feedback = lambda body, headers=None: httpx.post(  # noqa: E731
            stack.url + "/v1/feedback", json=body, headers=headers or {}
        )
        before = stack.store.queries.counts()
        for action in ({"rating": -1}, {"action": "correct", "text": "Say hello."}, {"action": "reject"}):
            r = feedback({"turn_id": turn, "session_id": "mallory", **action})
            assert r.status_code == 404 and "mallory" in r.json()["error"]["message"]
        assert (
            feedback({"turn_id": turn, "action": "withdraw"}, {"X-Session-Id": "mallory"}).status_code == 404
        )
        assert (
            stack.store.queries.counts() == before
            and stack.store.conversations.get_turn(turn).status == "awaiting"
        )
        r = feedback({"turn_id": turn, "session_id": "alice", "rating": -1, "text": "Say hello."})
        assert r.status_code == 200 and r.json()["attached"]
        assert feedback({"turn_id": turn, "action": "withdraw"}, {"X-Session-Id": "alice"}).status_code == 200
        # a conversation without a session id: named by the key the server made for it
        from openclaw_trl.sessions import session_matches

        meta = httpx.post(stack.url + "/v1/chat/completions", json=ask).json()["openclaw"]
        anon, key = meta["turn_id"], meta["session_id"]
        session = stack.store.conversations.get_session(stack.store.conversations.get_turn(anon).session_id)
        assert session.key == key and key.startswith("chain-") and session_matches(session, key)
        assert not session_matches(session, f"anonymous-{session.id}")
        r = feedback({"turn_id": anon, "session_id": key, "rating": 1})
        assert r.status_code == 200 and r.json()["attached"]
