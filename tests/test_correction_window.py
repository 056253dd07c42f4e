"""The correction window: a bare 👎 waits for its correction before it can be trained (``correction_window_s``).

Real SQLite, real HTTP on 127.0.0.1 with the real ``openai`` client, the tiny model, the real scorer with the
``feedback`` judge; waits are on state (the queue's own blocking wait, or polling with a deadline), never sleeps.
"""

from __future__ import annotations

import math
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

import httpx
import openai
import pytest

from openclaw_trl.engines.base import Completion
from openclaw_trl.records import Judgement, TrainingSample
from openclaw_trl.sessions import MAX_CORRECTION_WINDOW_S, SessionConfig, TurnCollector
from openclaw_trl.store import Store
from tests._server_helpers import running_stack
from tests.helpers import tiny_hf_engine, wait_until

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    with tiny_hf_engine(tiny_model_dir) as engine:
        yield engine


def _scorer(store, engine):
    from openclaw_trl.judging import JudgeConfig, Scorer

    return Scorer(store, JudgeConfig(method="combine", backend="feedback"), engine=engine)


def _chat(client, session: str, messages: list[dict]) -> tuple[int, list[dict]]:
    """One turn of ``session`` through the API; returns its turn id and the conversation with the reply."""
    raw = client.chat.completions.with_raw_response.create(
        model="openclaw", messages=messages, max_tokens=6, extra_headers={"X-Session-Id": session}
    )
    reply = raw.parse().choices[0].message.content or ""
    return int(raw.headers["x-openclaw-turn-id"]), [*messages, {"role": "assistant", "content": reply}]


def _feedback(url: str, session: str, body: dict) -> dict:
    r = httpx.post(f"{url}/v1/feedback", json={"session_id": session, **body}, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def _client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)


def _live_samples(store, turn_id: int):
    return [s for s in store.queries.iter_samples(include_private=True) if s.turn_id == turn_id]


def test_a_correction_within_the_window_is_what_is_learned(engine, tmp_path):
    window = SessionConfig(correction_window_s=120)
    with running_stack(engine, tmp_path / "s.db", sessions=window) as stack:
        client, scorer = _client(stack.url), _scorer(stack.store, engine)
        try:
            turn, _ = _chat(client, "w1", [{"role": "user", "content": "what is 2+2?"}])
            before = time.time()
            rated = _feedback(stack.url, "w1", {"turn_id": turn, "rating": -1})
            assert rated["attached"] and rated["reason"] == ""
            until = datetime.fromisoformat(rated["correction_until"].replace("Z", "+00:00")).timestamp()
            assert before + 119 <= until <= time.time() + 120
            assert 100 < rated["correction_seconds_left"] <= 120
            assert scorer.run_until_idle() == 1  # the 👎 is judged at once ...
            (held,) = _live_samples(stack.store, turn)
            assert held.reward == -1.0 and not held.has_hint
            assert (
                stack.store.queue.count_waiting() == 0 and stack.store.queue.take_samples(5) == []
            )  # ... but held
            status = httpx.get(f"{stack.url}/v1/status", timeout=30).json()["correction_window"]
            assert (status["window_s"], status["waiting"]) == (120.0, 1)
            assert status["turns"][0]["turn_id"] == turn and 100 < status["seconds_left"] <= 120
            assert status["turns"][0]["correction_until"] == rated["correction_until"]

            corrected = _feedback(
                stack.url, "w1", {"turn_id": turn, "action": "correct", "text": "The answer is 4, as 2+2=4."}
            )
            assert corrected["attached"] and corrected["rating"] is None
            assert (corrected["correction_until"], corrected["correction_seconds_left"]) == (None, None)
            assert scorer.run_until_idle() == 1
            (sample,) = stack.store.queue.take_samples(
                5
            )  # trainable at once: the correction closed the window
            assert (sample.turn_id, sample.reward, sample.has_hint, sample.hint) == (
                turn,
                -1.0,
                True,
                "The answer is 4, as 2+2=4.",
            )
            assert sample.teacher_logprobs is not None  # the OPD signal of the correction
            reasons = sorted(str(s.dropped_reason) for s in _live_samples(stack.store, turn))
            assert reasons == ["None", "superseded"]  # the bare 👎's sample is kept, never trained
            assert httpx.get(f"{stack.url}/v1/status", timeout=30).json()["correction_window"]["waiting"] == 0
        finally:
            scorer.close()


def test_a_rating_without_correction_is_trained_when_the_window_closes(engine, tmp_path):
    with running_stack(engine, tmp_path / "s.db", sessions=SessionConfig(correction_window_s=1.5)) as stack:
        client, scorer = _client(stack.url), _scorer(stack.store, engine)
        try:
            turn, _ = _chat(client, "w2", [{"role": "user", "content": "hello"}])
            rated = _feedback(stack.url, "w2", {"turn_id": turn, "rating": -1})
            until = datetime.fromisoformat(rated["correction_until"].replace("Z", "+00:00")).timestamp()
            scorer.run_until_idle()
            assert stack.store.queue.count_waiting() == 0
            # a poll far longer than the test: only the window's closing can wake the wait
            got: list = []
            waiter = threading.Thread(
                target=lambda: got.extend(stack.store.queue.wait_for_samples(1, poll=3600)), daemon=True
            )
            waiter.start()
            wait_until(lambda: not waiter.is_alive(), 60, "the wait to wake when the window closes")
            (sample,) = got
            assert time.time() >= until - 0.01  # handed out once the window closed, not before
            assert (sample.turn_id, sample.reward, sample.has_hint) == (turn, -1.0, False)
            assert stack.store.conversations.get_turn(turn).next_state["kind"] == "rating"  # the 👎 stands
        finally:
            scorer.close()


def test_the_next_message_closes_the_window_and_the_rating_stands(engine, tmp_path):
    with running_stack(engine, tmp_path / "s.db", sessions=SessionConfig(correction_window_s=120)) as stack:
        client, scorer = _client(stack.url), _scorer(stack.store, engine)
        try:
            turn, messages = _chat(client, "w3", [{"role": "user", "content": "hello"}])
            other, _ = _chat(client, "elsewhere", [{"role": "user", "content": "hi"}])
            assert _feedback(stack.url, "w3", {"turn_id": turn, "rating": -1})["correction_until"]
            assert _feedback(stack.url, "elsewhere", {"turn_id": other, "rating": -1})["correction_until"]
            scorer.run_until_idle()
            assert stack.store.queue.count_waiting() == 0
            _chat(client, "w3", [*messages, {"role": "user", "content": "never mind, next question"}])
            (sample,) = stack.store.queue.take_samples(
                5
            )  # only w3's window closed; the other session's waits
            assert (sample.turn_id, sample.reward, sample.has_hint) == (turn, -1.0, False)
            state = stack.store.conversations.get_turn(turn).next_state
            assert (state["kind"], state["rating"]) == ("rating", -1)  # the 👎 stays the next state
            windows = httpx.get(f"{stack.url}/v1/status", timeout=30).json()["correction_window"]
            assert windows["waiting"] == 1 and [w["turn_id"] for w in windows["turns"]] == [other]
            # a side call of the session (a title request) is not its next message
            side = [{"role": "user", "content": "title?"}]
            client.chat.completions.create(
                model="openclaw",
                messages=side,
                max_tokens=4,
                extra_headers={"X-Session-Id": "elsewhere", "X-Turn-Type": "side"},
            )
            assert stack.store.queue.take_samples(5) == []
            assert stack.collector.end_session("elsewhere")  # a new conversation: the 👎 stands
            assert [s.turn_id for s in stack.store.queue.take_samples(5)] == [other]
        finally:
            scorer.close()


def _serve(collector, key: str, text: str) -> int:
    ctx = collector.begin([{"role": "user", "content": text}], headers={"X-Session-Id": key})
    return collector.record_turn(
        ctx, [1, 2], Completion([7, 8], [-0.1, -0.2], "stop", 0), 1.0, completion_text="a"
    )


def _judge(store, turn_id: int, reward: float) -> int:
    turn = store.conversations.get_turn(turn_id)
    sample = TrainingSample(turn_id, [1, 2], [7, 8], [-0.1, -0.2], 1.0, 0, reward=reward)
    return store.judging.save_judgement(Judgement(turn, [], reward, sample=sample))


_OTHER_PROCESS = """
import sys
from openclaw_trl.store import Store
with Store(sys.argv[1]) as store:
    print(len(store.queue.take_samples(5)), store.holds.count_open_correction_windows())
"""


def test_the_window_survives_a_restart_and_holds_in_another_process(tmp_path):
    path = tmp_path / "s.db"
    store = Store(path)
    collector = TurnCollector(store, SessionConfig(correction_window_s=4))
    turn = _serve(collector, "r", "hello")
    until = collector.feedback(turn, -1).correction_until
    _judge(store, turn, -1.0)
    store.close()  # the server stops during the window

    other = subprocess.run(
        [sys.executable, "-c", _OTHER_PROCESS, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert other.returncode == 0, other.stderr[-2000:]
    if time.time() < until:  # (the child's start can take longer than the window on a loaded machine)
        assert other.stdout.split() == ["0", "1"]  # another process does not take the held sample either

    with Store(path) as reopened:  # the window is in the store: the rest of it is waited for
        assert reopened.conversations.get_turn(turn).correction_until == until
        if time.time() < until:
            assert reopened.queue.take_samples(5) == []
        (sample,) = reopened.queue.wait_for_samples(1, timeout=60)
        assert time.time() >= until and sample.turn_id == turn
    with Store(path) as after:  # a window that closed while nothing ran holds nothing
        assert after.holds.count_open_correction_windows() == 0 and after.queue.count_waiting() == 1


def test_window_zero_trains_a_rating_at_once(tmp_path):
    with Store(tmp_path / "s.db") as store:
        collector = TurnCollector(store, SessionConfig(correction_window_s=0))
        turn = _serve(collector, "z", "hello")
        result = collector.feedback(turn, -1)
        assert result.attached and result.correction_until is None
        _judge(store, turn, -1.0)
        assert [s.turn_id for s in store.queue.take_samples(5)] == [turn]
        assert store.conversations.get_turn(turn).correction_until is None


def test_only_a_bare_thumbs_down_waits(tmp_path):
    with Store(tmp_path / "s.db") as store:
        collector = TurnCollector(store, SessionConfig(correction_window_s=120))
        up, with_text, rejected, changed = (_serve(collector, f"k{i}", "hello") for i in range(4))
        assert collector.feedback(up, 1).correction_until is None  # 👍: nothing more is expected
        assert collector.feedback(with_text, -1, "Shorter.").correction_until is None  # already a correction
        assert collector.reject(rejected).correction_until is None  # the retry's request follows at once
        assert collector.feedback(changed, -1).correction_until is not None
        assert collector.feedback(changed, 1).correction_until is None  # changed to 👍: the window closes
        for turn in (up, with_text, rejected, changed):
            _judge(store, turn, 1.0)
        assert sorted(s.turn_id for s in store.queue.take_samples(5)) == sorted(
            [up, with_text, rejected, changed]
        )


@pytest.mark.parametrize(
    "value", [-1, -0.001, MAX_CORRECTION_WINDOW_S + 1, math.nan, math.inf, True, "60", None]
)
def test_correction_window_bounds(value):
    from openclaw_trl.config import OpenClawConfig

    with pytest.raises(
        ValueError, match="correction_window_s must be a number of seconds from 0 .off. to 600"
    ):
        SessionConfig(correction_window_s=value)
    with pytest.raises(ValueError, match="correction_window_s"):
        OpenClawConfig(output_dir="/tmp/unused", report_to="none", correction_window_s=value)


def test_correction_window_edges_are_accepted():
    from openclaw_trl.config import OpenClawConfig

    for value in (0, 0.5, MAX_CORRECTION_WINDOW_S):
        assert SessionConfig(correction_window_s=value).correction_window_s == value
        config = OpenClawConfig(output_dir="/tmp/unused", report_to="none", correction_window_s=value)
        assert config.session_config().correction_window_s == value
    assert OpenClawConfig(output_dir="/tmp/unused", report_to="none").correction_window_s == 60


def test_the_offline_demo_learns_the_correction_typed_after_a_thumbs_down(tmp_path):
    """The offline demo's loop (batch of 2, ``feedback`` judge) with the trainer in a thread: a 👎 does not
    complete the batch; the correction typed after it does, and the update trains on the correction."""
    from openclaw_trl.runtime import build_runtime, load_recipe, run

    argv = ["--config", "recipes/tiny_offline.yaml", "--output_dir", str(tmp_path / "run"), "--port", "0"]
    argv += [
        "--save_strategy",
        "no",
        "--adapter_history",
        "0",
        "--max_steps",
        "1",
        "--correction_window_s",
        "120",
    ]
    runtime = build_runtime(*load_recipe(argv))
    errors: list[BaseException] = []
    thread = threading.Thread(target=lambda: _run_into(run, runtime, errors), daemon=True)
    thread.start()
    try:
        wait_until(lambda: runtime.server is not None and runtime.server.server.started, 300, "the server")
        url, store = runtime.server.url, runtime.user.store
        client = _client(url)
        liked, _ = _chat(client, "demo-1", [{"role": "user", "content": "Tell me about apples."}])
        disliked, _ = _chat(client, "demo-2", [{"role": "user", "content": "Tell me about pears."}])
        assert _feedback(url, "demo-1", {"turn_id": liked, "rating": 1})["correction_until"] is None
        assert _feedback(url, "demo-2", {"turn_id": disliked, "rating": -1})["correction_seconds_left"] > 100
        wait_until(lambda: len(list(store.queries.iter_samples())) == 2, 300, "both ratings judged")
        status = httpx.get(f"{url}/v1/status", timeout=30).json()
        assert status["samples_waiting"] == 1 and status["correction_window"]["waiting"] == 1
        assert runtime.engine.policy_version == 0  # the 👎 did not complete the batch of 2
        text = "Please answer as a short bulleted list."
        assert _feedback(url, "demo-2", {"turn_id": disliked, "action": "correct", "text": text})["attached"]
        thread.join(timeout=300)
        assert not thread.is_alive() and not errors, errors
        trained = {s.turn_id: s for s in store.queries.iter_samples() if s.consumed_step == 1}
        assert sorted(trained) == sorted([liked, disliked])
        assert (trained[liked].reward, trained[liked].has_hint) == (1.0, False)
        assert (trained[disliked].has_hint, trained[disliked].hint) == (True, text)  # the correction
        (bare,) = [
            s for s in store.queries.iter_samples() if s.turn_id == disliked and s.consumed_step is None
        ]
        assert (bare.dropped_reason, bare.has_hint) == ("superseded", False)
    finally:
        runtime.stop_event.set()
        thread.join(timeout=60)
        runtime.close()


def _run_into(run, runtime, errors: list) -> None:
    try:
        run(runtime)
    except BaseException as err:  # reported by the test
        errors.append(err)
