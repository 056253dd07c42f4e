"""Best-of-N serving: the group advantage rule, the quick judge backends, the group in the store, and a
Best-of-4 turn served over real HTTP (the real ``openai`` client, streaming and not), stored as a group of 4
and trained with group-relative advantages (the gradient checked against a direct computation)."""

from __future__ import annotations

import json
import math
import os
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import openai
import pytest
import torch

from openclaw_trl.config import OpenClawConfig
from openclaw_trl.engines.base import Completion
from openclaw_trl.export import collect_rows
from openclaw_trl.judging import BestOfN, QuickJudgeConfig, QuickJudgeInput, make_quick_judge
from openclaw_trl.judging.best_of_n import group_samples, served_index
from openclaw_trl.losses import group_relative_advantages, group_statistics
from openclaw_trl.records import TrainingSample
from openclaw_trl.status import LearningStatus
from openclaw_trl.store import Store
from tests._server_helpers import ScriptedEngine, running_stack
from tests.helpers import clipped_surrogate, served_turn, tiny_hf_engine, token_mean
from tests.trainer_helpers import direct_grads, train_and_capture

ROOT = Path(__file__).parent.parent


def length_score(turn: QuickJudgeInput) -> float:
    """A callable quick judge: longer replies score higher (distinct scores for the tiny model's replies)."""
    return float(len(turn.response)) + 0.001 * len(turn.messages)


# ------------------------------------------------------------------ the group advantage rule


def test_group_statistics_leave_out_missing_scores():
    mean, std = group_statistics([2.0, 4.0, 9.0, None])
    assert mean == pytest.approx(5.0) and std == pytest.approx(math.sqrt(13.0))  # Bessel: 26 / 2
    assert group_statistics([None, None]) == (None, None)
    assert group_statistics([3.0, None]) == (3.0, 0.0)


@pytest.mark.parametrize(
    ("scale", "batch_std", "divisor"),
    [("none", None, 1.0), ("group", None, math.sqrt(13.0) + 1e-4), ("batch", 2.0, 2.0 + 1e-4)],
)
def test_group_relative_advantages_hand_values(scale, batch_std, divisor):
    # scores 2, 4, 9 and one without a score (reward = the group mean 5): A = r - 5, then scaled
    rewards = torch.tensor([2.0, 4.0, 9.0, 5.0])
    means, stds = torch.full((4,), 5.0), torch.full((4,), math.sqrt(13.0))
    got = group_relative_advantages(rewards, means, stds, scale, batch_std)
    torch.testing.assert_close(got, torch.tensor([-3.0, -1.0, 4.0, 0.0]) / divisor)


def test_batch_scaling_with_one_score_falls_back_to_the_group_std():
    got = group_relative_advantages(
        torch.tensor([1.0]), torch.tensor([0.0]), torch.tensor([0.5]), "batch", None
    )
    torch.testing.assert_close(got, torch.tensor([1.0 / (0.5 + 1e-4)]))


@pytest.mark.parametrize("scale", ["group", "batch"])
def test_group_std_floor_keeps_small_differences_small(scale):
    # four candidates about as good (scores within 0.2 nats): divided by their own std they would get +-1;
    # with a floor of 2 nats they get a tenth of that, while a group 9 nats apart is scaled as before
    close = torch.tensor([1.0, 1.2, 1.1, 0.9])
    mean, std = close.mean(), close.std()
    batch_std = float(std) if scale == "batch" else None
    plain = group_relative_advantages(close, mean.expand(4), std.expand(4), scale, batch_std)
    floored = group_relative_advantages(close, mean.expand(4), std.expand(4), scale, batch_std, std_floor=2.0)
    assert plain.abs().max() > 1.0
    torch.testing.assert_close(floored, (close - mean) / (2.0 + 1e-4))
    apart = torch.tensor([0.0, 9.0, 1.0, 8.0])
    a_mean, a_std = apart.mean(), apart.std()
    a_batch = float(a_std) if scale == "batch" else None
    torch.testing.assert_close(
        group_relative_advantages(apart, a_mean.expand(4), a_std.expand(4), scale, a_batch, std_floor=2.0),
        group_relative_advantages(apart, a_mean.expand(4), a_std.expand(4), scale, a_batch),
    )


def test_served_candidate_is_the_best_the_first_on_ties_and_0_without_scores():
    assert served_index([None, 3.0, 7.0, 7.0]) == 2
    assert served_index([-1.0, -0.5]) == 1
    assert served_index([None, None, None]) == 0


def _completion(ids, version=0):
    return Completion(list(ids), [-0.5] * len(ids), "stop", version)


def test_group_samples_carry_score_group_mean_and_std():
    comps = [_completion([5, 6]), _completion([7]), _completion([]), _completion([8, 9, 10])]
    samples = group_samples(11, [1, 2], 1.0, comps, [2.0, None, 4.0, 9.0], served=3)
    assert [s.completion_ids for s in samples] == [[5, 6], [7], [8, 9, 10]]  # the empty candidate is left out
    assert [s.reward for s in samples] == [2.0, 5.0, 9.0]  # no score: the group mean
    assert all(s.baseline == 5.0 and s.group_std == pytest.approx(math.sqrt(13.0)) for s in samples)
    assert [s.meta["best_of_n"] for s in samples] == [
        {"index": 0, "served": False, "score": 2.0},
        {"index": 1, "served": False, "score": None},
        {"index": 3, "served": True, "score": 9.0},
    ]
    assert group_samples(11, [1, 2], 1.0, comps[:2], [None, None], served=0) == []


# ------------------------------------------------------------------ the quick judge backends


def _items(n=3):
    messages = [{"role": "user", "content": "Tell me about tea."}]
    return [QuickJudgeInput(messages, f"reply {'x' * i}", "s1") for i in range(n)]


def test_callable_quick_judge_scores_in_parallel_and_bounds_bad_answers():
    def judge(turn):
        text = turn.response
        if text.endswith("xx"):
            raise RuntimeError("judge broke")
        return {"reply ": True, "reply x": 2}.get(text)

    qj = make_quick_judge(QuickJudgeConfig(backend="callable", callable="unused:fn"), fn=judge)
    try:
        assert qj.scores(_items(3)) == [None, 2.0, None]  # a bool is no score, an exception is no score
    finally:
        qj.close()

    released = threading.Event()

    def slow(turn):  # the second reply's judge answers only after the scores are returned
        if turn.response.endswith("x"):
            released.wait(60)
        return 1.0

    qj = make_quick_judge(QuickJudgeConfig(backend="callable", callable="unused:fn", timeout_s=0.2), fn=slow)
    try:
        assert qj.scores(_items(2)) == [1.0, None]  # late: no score
    finally:
        released.set()
        qj.close()


def test_callable_quick_judge_is_imported_from_its_path():
    qj = make_quick_judge(QuickJudgeConfig(backend="callable", callable="tests.test_best_of_n:length_score"))
    try:
        assert qj.scores(_items(2)) == [pytest.approx(6.001), pytest.approx(7.001)]
    finally:
        qj.close()


class _Spy:
    """The real engine, recording the requests it gets."""

    def __init__(self, engine):
        self.engine, self.tokenizer, self.requests = engine, engine.tokenizer, []

    def generate(self, requests, on_token=None, priority="serve", timeout_s=None):
        self.requests.append((list(requests), priority))
        return self.engine.generate(requests, on_token=on_token, priority=priority)


def test_engine_quick_judge_rates_on_the_base_weights(hf_engine):
    spy = _Spy(hf_engine)
    qj = make_quick_judge(QuickJudgeConfig(backend="engine"), engine=spy, tokenizer=hf_engine.tokenizer)
    try:
        scores = qj.scores(_items(3))
    finally:
        qj.close()
    ((requests, priority),) = spy.requests
    assert len(requests) == 3 and priority == "serve"
    assert all(r.weights == "base" and r.sampling.temperature == 0.0 for r in requests)
    text = hf_engine.tokenizer.decode(requests[0].prompt_ids)
    assert "Rate this reply to this conversation from 0 to 10" in text and "Tell me about tea." in text
    assert all(s is None or 0.0 <= s <= 10.0 for s in scores)  # the random tiny model rarely writes one


def test_engine_quick_judge_parses_the_rating(hf_engine):
    scripted = ScriptedEngine(hf_engine, script=lambda ids: "Rating: 8")
    qj = make_quick_judge(QuickJudgeConfig(backend="engine"), engine=scripted, tokenizer=hf_engine.tokenizer)
    try:
        assert qj.scores(_items(1)) == [8.0]
    finally:
        qj.close()


def test_openai_quick_judge_against_our_own_server(hf_engine, tmp_path):
    scripted = ScriptedEngine(hf_engine, script=lambda ids: "9")
    with running_stack(scripted, tmp_path / "judge.db") as judge_server:
        config = QuickJudgeConfig(
            backend="openai", openai_base_url=judge_server.url + "/v1", openai_model="openclaw"
        )
        qj = make_quick_judge(config)
        try:
            assert qj.scores(_items(2)) == [9.0, 9.0]
        finally:
            qj.close()


# ------------------------------------------------------------------ config


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (dict(best_of_n=0), "best_of_n must be an integer from 1"),
        (dict(best_of_n=17), "best_of_n must be an integer from 1"),
        (dict(best_of_n=4, method="opd"), "RL term"),
        (dict(best_of_n=4, source="replay", replay_path="x.jsonl"), "source replay serves nothing"),
        (dict(best_of_n=8, engine_max_batch_size=4), "raise engine_max_batch_size"),
        (dict(best_of_n=4, quick_judge_backend="feedback"), "quick judge backend must be one of"),
        (dict(best_of_n=4, quick_judge_backend="callable"), "needs quick_judge_callable"),
        (dict(best_of_n=4, quick_judge_backend="openai"), "judge_openai_base_url"),
        (dict(scale_rewards="none"), "only apply to Best-of-N groups"),
        (dict(quick_judge_callable="a.b:c"), "only apply to Best-of-N groups"),
        (dict(best_of_n=4, scale_rewards="std"), "scale_rewards must be group, batch or none"),
        (dict(group_std_floor=1.0), "only apply to Best-of-N groups"),
        (dict(best_of_n=4, group_std_floor=-1.0), "group_std_floor must be a finite number >= 0"),
        (dict(best_of_n=4, group_std_floor=float("nan")), "group_std_floor must be a finite number >= 0"),
        (dict(best_of_n=4, group_std_floor=float("inf")), "group_std_floor must be a finite number >= 0"),
    ],
)
def test_config_refuses_what_cannot_work(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        OpenClawConfig(output_dir=str(tmp_path), report_to="none", **overrides)


def test_config_builds_the_quick_judge_from_the_judges_fields(tmp_path):
    config = OpenClawConfig(
        output_dir=str(tmp_path),
        report_to="none",
        best_of_n=4,
        scale_rewards=True,  # TRL's alias of "group"
        quick_judge_backend="openai",
        judge_openai_base_url="http://127.0.0.1:9/v1",
        judge_openai_model="m",
        judge_timeout_s=7.0,
    )
    qj = config.quick_judge_config()
    assert config.scale_rewards == "group"
    assert (qj.backend, qj.openai_base_url, qj.openai_model, qj.timeout_s) == (
        "openai",
        "http://127.0.0.1:9/v1",
        "m",
        7.0,
    )


# ------------------------------------------------------------------ the store


def _turn(store: Store, key: str = "s") -> int:
    session = store.conversations.open_session(key)
    return store.conversations.add_turn(served_turn(session))


def _group(store: Store, turn_id: int, scores) -> int:
    comps = [_completion([5 + i, 6]) for i in range(len(scores))]
    choice_index = served_index(scores)
    picker = BestOfN(
        len(scores), make_quick_judge(QuickJudgeConfig("callable", "x:y"), fn=length_score), store
    )
    from openclaw_trl.judging.best_of_n import GroupChoice

    try:
        return picker.record(turn_id, [1, 2], 1.0, comps, [f"t{i}" for i in range(len(scores))],
                             GroupChoice(list(scores), choice_index))  # fmt: skip
    finally:
        picker.close()


def test_group_is_stored_queued_exported_and_withheld_when_private(tmp_path):
    with Store(tmp_path / "s.db") as store:
        turn_id = _turn(store)
        group_id = _group(store, turn_id, [1.0, None, 3.0])
        empty = _group(store, _turn(store, "t"), [None, None])
        group = store.groups.get_group(group_id)
        assert group.scores == [1.0, None, 3.0] and group.served_index == 2 and group.score_mean == 2.0
        assert [c.completion_text for c in group.candidates] == ["t0", "t1", "t2"]
        assert store.groups.get_group(empty).candidates and store.groups.count_groups() == 2
        samples = store.queue.take_samples(10)
        assert [s.origin for s in samples] == ["group"] * 3 and {s.group_id for s in samples} == {group_id}
        assert [s.reward for s in samples] == [1.0, 2.0, 3.0] and samples[0].group_std == pytest.approx(
            math.sqrt(2.0)
        )
        store.queue.release([s.sample_id for s in samples])
        rows = collect_rows(store)
        assert [g["scores"] for g in rows["groups"]] == [[1.0, None, 3.0], [None, None]]
        assert [r["group_id"] for r in rows["samples"]] == [group_id] * 3
        store.conversations.set_private(store.conversations.get_turn(turn_id).session_id, True)
        assert store.queue.count_waiting() == 0  # kept, never handed out
        assert collect_rows(store)["groups"][0]["turn_id"] != turn_id


def test_withdrawing_the_served_turn_drops_its_waiting_group_samples(tmp_path):
    with Store(tmp_path / "s.db") as store:
        kept, undone = _turn(store), _turn(store, "u")
        _group(store, kept, [1.0, 3.0])
        _group(store, undone, [0.0, 2.0])
        store.conversations.withdraw_turn(undone)
        samples = store.queue.take_samples(10)
        assert {s.turn_id for s in samples} == {kept} and len(samples) == 2
        reasons = [r["dropped_reason"] for r in collect_rows(store)["samples"] if r["turn_id"] == undone]
        assert reasons == ["withdrawn", "withdrawn"]  # kept in the store, never handed out


def test_existing_store_gains_the_group_table_and_columns(tmp_path):
    path = tmp_path / "old.sqlite"
    with Store(path) as store:
        store.queue.add_sample(TrainingSample(1, [1, 2], [3], [-0.5], 1.0, 0, reward=1.0))
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE candidate_groups")
    conn.execute("ALTER TABLE samples DROP COLUMN group_id")
    conn.execute("ALTER TABLE samples DROP COLUMN group_std")
    conn.commit()
    conn.close()
    with Store(path) as store:
        (back,) = store.queue.take_samples(1)
        assert back.group_id is None and back.group_std is None
        assert store.groups.count_groups() == 0
        _group(store, _turn(store), [1.0, 2.0])
        assert store.groups.count_groups() == 1


# ------------------------------------------------------------------ end to end


@pytest.fixture(scope="module")
def hf_engine(tiny_model_dir):
    with tiny_hf_engine(tiny_model_dir, max_batch_size=8) as engine:
        yield engine


def test_best_of_4_served_over_http_stored_as_a_group_and_trained(hf_engine, tiny_model_dir, tmp_path):
    from openclaw_trl.serving.app import ServerThread, create_app
    from openclaw_trl.serving.settings import ServerSettings
    from openclaw_trl.sessions import TurnCollector

    store = Store(tmp_path / "store.sqlite")
    quick = make_quick_judge(QuickJudgeConfig("callable", "x:y"), fn=length_score)
    picker = BestOfN(4, quick, store, explore=0.0)  # always the best
    app = create_app(
        hf_engine,
        TurnCollector(store),
        store,
        ServerSettings(ui=False, default_max_tokens=8),
        best_of_n=picker,
    )
    server = ServerThread(app).start()
    try:
        client = openai.OpenAI(
            base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120,
            default_headers={"x-session-id": "bon"},
        )  # fmt: skip
        messages = [{"role": "user", "content": "Tell me about tea."}]
        reply = client.chat.completions.create(model="openclaw", messages=messages, max_tokens=8)
        first = reply.model_extra["openclaw"]
        stream = client.chat.completions.create(
            model="openclaw", messages=[{"role": "user", "content": "And coffee?"}], max_tokens=8, stream=True
        )
        chunks = list(stream)
        streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        second = chunks[-1].model_extra["openclaw"]
        side = client.chat.completions.create(
            model="openclaw", messages=messages, max_tokens=4, extra_headers={"x-turn-type": "side"}
        )  # never trained on: one sample, no group
    finally:
        server.stop()
        picker.close()

    for meta, content in [(first, reply.choices[0].message.content), (second, streamed)]:
        bon = meta["best_of_n"]
        group = store.groups.get_group(bon["group_id"])
        turn = store.conversations.get_turn(meta["turn_id"])
        assert bon["n"] == 4 and len(group.candidates) == 4 and group.turn_id == turn.id
        assert bon["scores"] == group.scores and bon["served_index"] == served_index(group.scores)
        served = group.candidates[bon["served_index"]]
        assert (
            turn.completion_ids == served.completion_ids
            and turn.sampling_logprobs == served.sampling_logprobs
        )
        assert turn.response_message["content"] == content  # the conversation holds only the served reply
        assert max(group.scores) == group.scores[bon["served_index"]]
    assert "best_of_n" not in side.model_extra["openclaw"] and store.groups.count_groups() == 2
    config = OpenClawConfig(output_dir=str(tmp_path / "cfg"), report_to="none", best_of_n=4)
    assert LearningStatus(config, hf_engine, store)()["best_of_n_groups"] == 2

    samples = store.queue.take_samples(4)  # the first turn's group: 4 samples, its candidates in order
    store.queue.release([s.sample_id for s in samples])
    assert {s.group_id for s in samples} == {first["best_of_n"]["group_id"]} and len(samples) == 4
    scores = torch.tensor(first["best_of_n"]["scores"])
    want_adv = (scores - scores.mean()) / (scores.std() + 1e-4)  # scale_rewards: group, hand-computed
    assert want_adv.abs().max() > 0.1  # the candidates differ: a real group signal
    store.close()

    trainer, init, got = train_and_capture(
        tiny_model_dir, tmp_path, [], method="rl", best_of_n=4, scale_rewards="group",
        quick_judge_backend="callable", quick_judge_callable="tests.test_best_of_n:length_score",
    )  # fmt: skip
    logs = trainer.state.log_history[0]
    assert logs["best_of_n/score_mean"] == pytest.approx(float(scores.mean()), rel=1e-5)
    assert logs["best_of_n/served_score"] == pytest.approx(float(scores.max()), rel=1e-5)
    assert logs["best_of_n/reward_std"] == pytest.approx(float(scores.std()), rel=1e-5)

    def loss_fn(logp, logits, batch, mask):  # the clipped GRPO objective, ratio 1 on the first pass
        return token_mean(clipped_surrogate(logp, want_adv[:, None]), mask)

    want = direct_grads(tiny_model_dir, init, samples, loss_fn)
    assert set(want) == set(got)
    for n in want:
        torch.testing.assert_close(got[n], want[n], atol=1e-5, rtol=1e-4)


@pytest.mark.slow
def test_acceptance_tiny_simulated_best_of_4(tmp_path):
    """``app.py --config recipes/tiny_simulated.yaml --max_steps 2 --best_of_n 4`` finishes (engine quick
    judge, the random tiny model's ratings), and stores a group of 4 for its trainable turns."""
    cmd = [
        sys.executable, "app.py", "--config", "recipes/tiny_simulated.yaml", "--max_steps", "2",
        "--best_of_n", "4", "--output_dir", str(tmp_path / "run"), "--json-summary",
    ]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False"}
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["policy_version"] == 2
    with Store(tmp_path / "run" / "openclaw.sqlite") as store:
        groups = list(store.groups.iter_groups())
        assert groups and all(len(g.candidates) == 4 for g in groups)


def test_export_has_a_groups_split_only_when_there_are_groups(tmp_path):
    from openclaw_trl.export import build_dataset

    path = tmp_path / "s.db"
    with Store(path) as store:
        _turn(store)
    assert "groups" not in build_dataset(path)
    with Store(path) as store:
        _group(store, _turn(store, "b"), [4.0, None])
    dataset = build_dataset(path)
    (row,) = dataset["groups"]
    assert row["scores"] == [4.0, None] and row["served_index"] == 0 and row["completions"] == ["t0", "t1"]
    assert dataset["samples"]["group_id"] == [row["group_id"]] * 2
