"""The scorer on a scripted multi-session conversation: exact samples per method, judge backends, teacher."""

from __future__ import annotations

import json

import httpx
import pytest
import torch

from openclaw_trl.chat import render_prompt_ids
from openclaw_trl.engines.base import Completion
from openclaw_trl.judge import HINT_MARKER, append_hint
from openclaw_trl.judging import JudgeConfig, Scorer
from openclaw_trl.sessions import SessionConfig, TurnCollector
from openclaw_trl.store import Store
from tests.helpers import tiny_hf_engine, wait_until

TOOLS = [{"type": "function", "function": {"name": "calc", "parameters": {"type": "object"}}}]
FRENCH_HINT = "Answer in French, the language the user writes in."
CATS_HINT = "Make the joke about cats and keep it short."


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    with tiny_hf_engine(tiny_model_dir, device="cpu") as engine:
        yield engine


class Clock:
    t = 1000.0

    def __call__(self):
        return self.t


class Conversation:
    """Plays the server's part: begin -> (fake) completion -> record_turn, with the real chat template."""

    def __init__(self, store: Store, tokenizer, clock: Clock):
        self.tok = tokenizer
        self.col = TurnCollector(
            store,
            SessionConfig(session_idle_timeout=600, train_anonymous=False),
            tokenizer=tokenizer,
            clock=clock,
        )
        self.turns: dict[str, int] = {}

    def say(self, name, messages, reply, headers=None, body=None, tools=None, tool_call=None):
        ctx = self.col.begin(messages, tools=tools, headers=headers, body=body)
        prompt_ids = render_prompt_ids(self.tok, messages, tools)
        message = {"role": "assistant", "content": reply}
        text = reply
        if tool_call is not None:
            call = {"id": "c1", "type": "function", "function": {"name": tool_call, "arguments": '{"x": 20}'}}
            message = {"role": "assistant", "content": None, "tool_calls": [call]}
            text = f'<tool_call>\n{{"name": "{tool_call}", "arguments": {{"x": 20}}}}\n</tool_call>'
        ids = self.tok.encode(text, add_special_tokens=False) + [self.tok.convert_tokens_to_ids("<|im_end|>")]
        completion = Completion(ids, [-0.5] * len(ids), "stop", policy_version=1)
        self.turns[name] = self.col.record_turn(ctx, prompt_ids, completion, 0.7, response_message=message)
        return message


def scripted(store: Store, tokenizer) -> dict[str, int]:
    """Five conversations: tool results, a correction, a session_done end, an idle end, side/anon/private."""
    clock = Clock()
    conv = Conversation(store, tokenizer, clock)
    alice = {"X-Session-Id": "alice"}
    m = [{"role": "system", "content": "You are helpful."}, {"role": "user", "content": "what is 2 + 3?"}]
    m += [conv.say("a1", m, "5", headers=alice, tools=TOOLS)]
    conv.say(
        "side", [*m, {"role": "user", "content": "summarise"}], "ok", headers={**alice, "X-Turn-Type": "side"}
    )
    m += [{"role": "user", "content": "thanks, now multiply it by 4"}]
    m += [conv.say("a2", m, "", headers=alice, tools=TOOLS, tool_call="calc")]
    m += [{"role": "tool", "content": "result: 20"}]  # a tool-result next state (success)
    m += [conv.say("a3", m, "The answer is 20.", headers=alice, tools=TOOLS)]
    m += [{"role": "user", "content": "wrong language, answer like me"}]
    m += [conv.say("a4", m, "vingt", headers=alice, tools=TOOLS)]
    m += [{"role": "user", "content": "ok bye"}]
    conv.say("a5", m, "bye", headers=alice, body={"session_done": True}, tools=TOOLS)  # ends: no next state

    bob = {"X-Session-Id": "bob"}
    b = [{"role": "user", "content": "tell me a joke"}]
    b += [conv.say("b1", b, "a joke", headers=bob)]
    b += [{"role": "user", "content": "hmm, make it about cats and shorter"}]
    b += [conv.say("b2", b, "", headers=bob, tools=TOOLS, tool_call="calc")]
    b += [{"role": "tool", "content": "error: bad arguments"}]  # a failed tool call
    conv.say("b3", b, "sorry", headers=bob, tools=TOOLS)
    clock.t += 601
    conv.col.reap()  # bob idles out: b3 has no next state

    anon = [{"role": "user", "content": "anonymous question"}]
    anon += [conv.say("n1", anon, "answer")]
    conv.say("n2", [*anon, {"role": "user", "content": "thanks"}], "welcome")

    carol = {"X-Session-Id": "carol"}
    c = [{"role": "user", "content": "private question"}]
    c += [conv.say("c1", c, "answer", headers=carol, body={"session_private": True})]
    conv.say("c2", [*c, {"role": "user", "content": "thanks"}], "welcome", headers=carol)
    return conv.turns


RULES = "_scorer_rules:rule_judge"

EXPECTED = {  # turn name -> (reward, hint) of its sample
    "rl": {"a1": (1, None), "a2": (1, None), "a3": (-1, None), "b2": (-1, None)},
    "opd": {"a3": (0, FRENCH_HINT), "b1": (0, CATS_HINT)},
    "combine": {
        "a1": (1, None),
        "a2": (1, None),
        "a3": (-1, FRENCH_HINT),
        "b1": (0, CATS_HINT),
        "b2": (-1, None),
    },
}


@pytest.mark.parametrize("method", ["rl", "opd", "combine"])
def test_scripted_conversation_gives_exact_samples(tmp_path, tiny_tokenizer, engine, method):
    with Store(tmp_path / "s.db") as store:
        turns = scripted(store, tiny_tokenizer)
        names = {v: k for k, v in turns.items()}
        scorer = Scorer(store, JudgeConfig(method=method, backend="callable", callable=RULES), engine=engine)
        assert scorer.run_until_idle() == 6  # a1 a2 a3 a4 b1 b2: everything with a next state
        samples = store.queue.take_samples(100)
        got = {names[s.turn_id]: (s.reward, s.hint) for s in samples}
        assert got == EXPECTED[method]
        for s in samples:
            turn = store.conversations.get_turn(s.turn_id)
            assert s.completion_ids == turn.completion_ids and s.prompt_ids == turn.prompt_ids
            assert s.has_hint == (s.hint is not None) and s.temperature == 0.7 and s.policy_version == 1
            assert (s.teacher_logprobs is not None) == s.has_hint
            if s.has_hint:
                assert len(s.teacher_logprobs) == len(s.completion_ids)
        statuses = {n: store.conversations.get_turn(t).status for n, t in turns.items()}
        assert statuses["a5"] == statuses["b3"] == statuses["side"] == "closed"
        assert statuses["a4"] == "judged" and store.conversations.get_turn(turns["a4"]).reward == 0
        assert all(store.judging.votes_for(turns[n]) for n in ("a1", "a4", "b1"))
        scorer.close()


def test_teacher_logprobs_match_an_independent_forward(tmp_path, tiny_model_dir, tiny_tokenizer, engine):
    from transformers import AutoModelForCausalLM

    with Store(tmp_path / "s.db") as store:
        turns = scripted(store, tiny_tokenizer)
        config = JudgeConfig(method="opd", backend="callable", callable=RULES, kd_topk=4)
        Scorer(store, config, engine=engine).run_until_idle()
        samples = {s.turn_id: s for s in store.queue.take_samples(100)}
        model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
        for name, hint in (("a3", FRENCH_HINT), ("b1", CATS_HINT)):
            s, turn = samples[turns[name]], store.conversations.get_turn(turns[name])
            enhanced = render_prompt_ids(tiny_tokenizer, append_hint(turn.prompt_messages, hint), turn.tools)
            assert s.meta["teacher_prompt_len"] == len(enhanced) and len(enhanced) > len(s.prompt_ids)
            assert s.teacher_prompt_ids == enhanced and s.finish_reason == turn.finish_reason
            ids = torch.tensor([enhanced + s.completion_ids])
            with torch.no_grad():
                logits = model(ids).logits[0, len(enhanced) - 1 : -1]
            logp = torch.log_softmax(logits / 0.7, dim=-1)
            expected = logp.gather(-1, torch.tensor(s.completion_ids)[:, None])[:, 0]
            assert torch.allclose(torch.tensor(s.teacher_logprobs), expected, atol=1e-4)
            top = logp.topk(4, dim=-1)
            assert torch.allclose(torch.tensor(s.topk_logprobs), top.values, atol=1e-4)
            assert len(s.topk_ids) == len(s.completion_ids) and all(len(r) == 4 for r in s.topk_ids)


def test_engine_backend_garbage_votes_are_none(tmp_path, tiny_tokenizer, engine):
    """The random tiny model as judge: votes are garbage -> None -> reward 0, no hint, no sample."""
    with Store(tmp_path / "s.db") as store:
        turns = scripted(store, tiny_tokenizer)
        config = JudgeConfig(
            method="combine", backend="engine", m=2, max_tokens=6, temperature=1.0, batch_turns=8
        )
        scorer = Scorer(store, config, engine=engine)
        assert scorer.run_until_idle() == 6
        assert store.queue.count_waiting() == 0
        votes = store.judging.votes_for(turns["a1"])
        assert [v.kind for v in votes] == ["prm", "prm", "hint", "hint"]
        assert all(v.value is None and isinstance(v.raw_text, str) and v.raw_text for v in votes)
        assert scorer.stats["none_votes"] == scorer.stats["votes"] == 24
        scorer.close()


def test_feedback_after_judgement_rejudges_a_turn_without_sample(tmp_path, tiny_tokenizer, engine):
    with Store(tmp_path / "s.db") as store:
        conv = Conversation(store, tiny_tokenizer, Clock())
        h = {"X-Session-Id": "late"}
        m = [{"role": "user", "content": "hi"}]
        m += [conv.say("t1", m, "hello", headers=h)]
        conv.say("t2", [*m, {"role": "user", "content": "hmm"}], "ok", headers=h)
        scorer = Scorer(store, JudgeConfig(method="rl", backend="feedback"), engine=engine)
        assert scorer.run_until_idle() == 1 and store.queue.count_waiting() == 0  # a plain reply: nothing
        assert conv.col.feedback(conv.turns["t1"], -1).attached  # the 👎 arrives later
        assert scorer.run_until_idle() == 1
        (s,) = store.queue.take_samples(5)
        assert (s.turn_id, s.reward) == (conv.turns["t1"], -1.0)
        assert not conv.col.feedback(conv.turns["t1"], +1).attached  # judged into a sample: never twice
        assert scorer.run_until_idle() == 0
        scorer.close()


class _FailingScoreEngine:
    """Wraps the real engine; ``score`` fails for prompts longer than ``limit`` (like an over-long prompt)."""

    def __init__(self, engine, limit):
        self.engine, self.limit, self.tokenizer = engine, limit, engine.tokenizer

    def score(self, prompt_ids, completion_ids, **kw):
        if any(len(p) > self.limit for p in prompt_ids):
            raise ValueError("prompt too long")
        return self.engine.score(prompt_ids, completion_ids, **kw)


def test_one_failing_teacher_prompt_does_not_sink_the_group(tmp_path, tiny_tokenizer, engine):
    with Store(tmp_path / "s.db") as store:
        turns = scripted(store, tiny_tokenizer)
        a3_prompt = store.conversations.get_turn(turns["a3"]).prompt_ids  # the long one (tools + history)
        flaky = _FailingScoreEngine(engine, limit=len(a3_prompt))
        scorer = Scorer(store, JudgeConfig(method="opd", backend="callable", callable=RULES), engine=flaky)
        scorer.run_until_idle()
        (s,) = store.queue.take_samples(5)
        assert s.turn_id == turns["b1"]
        assert store.conversations.get_turn(turns["a3"]).judge_error.startswith(
            "teacher: ValueError: prompt too long"
        )
        scorer.close()


def test_feedback_backend(tmp_path, tiny_tokenizer, engine):
    with Store(tmp_path / "s.db") as store:
        conv = Conversation(store, tiny_tokenizer, Clock())
        h = {"X-Session-Id": "f"}
        m = [{"role": "user", "content": "how do I boil an egg?"}]
        m += [conv.say("t1", m, "put it in water", headers=h)]
        m += [{"role": "user", "content": "and then?"}]  # a plain reply: nothing under this backend
        m += [conv.say("t2", m, "wait ten minutes", headers=h)]
        m += [{"role": "user", "content": "hmm"}]
        m += [conv.say("t3", m, "hello", headers=h)]
        conv.say("t4", [*m, {"role": "user", "content": "thanks"}], "welcome", headers=h)
        t = conv.turns
        assert conv.col.feedback(t["t2"], +1, "ok").attached  # text too short to be a hint
        assert conv.col.feedback(t["t3"], -1, "Please answer in French next time.").attached
        assert conv.col.feedback(t["t4"], +1).attached
        for method, expected in [
            (
                "combine",
                {t["t2"]: (1, None), t["t3"]: (-1, "Please answer in French next time."), t["t4"]: (1, None)},
            ),
            ("rl", {t["t2"]: (1, None), t["t3"]: (-1, None), t["t4"]: (1, None)}),
        ]:
            with Store(tmp_path / f"{method}.db") as copy:
                _replay_turns(store, copy)
                scorer = Scorer(copy, JudgeConfig(method=method, backend="feedback"), engine=engine)
                assert scorer.run_until_idle() == 4
                got = {s.turn_id: (s.reward, s.hint) for s in copy.queue.take_samples(10)}
                assert got == expected, method
                assert copy.judging.votes_for(t["t1"]) == []  # a plain reply gives no vote
                scorer.close()


def _replay_turns(src: Store, dst: Store) -> None:
    """Copy a store's sessions and turns (same ids) so one conversation can be judged by several methods."""
    src_conn, dst_conn = src.db.conn(), dst.db.conn()
    for table in ("sessions", "turns"):
        rows = src_conn.execute(f"SELECT * FROM {table} ORDER BY id").fetchall()
        cols = rows[0].keys()
        dst_conn.executemany(
            f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
            [tuple(r) for r in rows],
        )


def test_openai_backend_wire_format_and_failures(tmp_path, tiny_tokenizer, engine, monkeypatch):
    monkeypatch.setenv("MY_JUDGE_KEY", "sk-test")
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        calls.append((request.headers.get("authorization"), body))
        if len(calls) % 3 == 0:
            return httpx.Response(500, json={"error": {"message": "boom"}})
        system = body["messages"][0]["content"]
        if "hindsight" in system:
            text = "<think>[HINT_START]draft[HINT_END]</think>\\boxed{1} [HINT_START]Use a numbered list of steps.[HINT_END]"
        else:
            text = "progress \\boxed{1}"
        return httpx.Response(200, json={"choices": [{"message": {"role": "assistant", "content": text}}]})

    with Store(tmp_path / "s.db") as store:
        conv = Conversation(store, tiny_tokenizer, Clock())
        h = {"X-Session-Id": "o"}
        m = [{"role": "user", "content": "steps to bake bread?"}]
        m += [conv.say("t1", m, "mix and bake", headers=h)]
        conv.say("t2", [*m, {"role": "user", "content": "as a list please"}], "ok", headers=h)
        config = JudgeConfig(
            method="combine",
            backend="openai",
            m=3,
            openai_base_url="http://judge.local/v1/",
            openai_model="judge-model",
            openai_api_key_env="MY_JUDGE_KEY",
            max_tokens=64,
        )
        client = httpx.Client(transport=httpx.MockTransport(handler))
        scorer = Scorer(store, config, engine=engine, http_client=client)
        assert scorer.run_until_idle() == 1
        assert len(calls) == 6 and all(auth == "Bearer sk-test" for auth, _ in calls)
        assert {c["model"] for _, c in calls} == {"judge-model"} and calls[0][1]["max_tokens"] == 64
        votes = store.judging.votes_for(conv.turns["t1"])
        assert sum(v.value is None for v in votes) == 2  # the two HTTP 500s
        (s,) = store.queue.take_samples(5)
        assert (s.reward, s.hint, s.has_hint) == (1.0, "Use a numbered list of steps.", True)
        scorer.close()


@pytest.mark.parametrize(
    "path,error",
    [
        ("_scorer_rules:not_a_verdict", "not a Verdict"),
        ("_scorer_rules:out_of_range", "not -1, 0 or +1"),
        ("_scorer_rules:raises", "judge exploded"),
        ("_scorer_rules:slow", "timeout"),
    ],
)
def test_judge_failures_become_none_votes(tmp_path, tiny_tokenizer, path, error):
    with Store(tmp_path / "s.db") as store:
        conv = Conversation(store, tiny_tokenizer, Clock())
        h = {"X-Session-Id": "x"}
        m = [{"role": "user", "content": "hi"}]
        m += [conv.say("t1", m, "hello", headers=h)]
        conv.say("t2", [*m, {"role": "user", "content": "thanks"}], "ok", headers=h)
        scorer = Scorer(store, JudgeConfig(method="rl", backend="callable", callable=path, timeout_s=0.3))
        assert scorer.run_until_idle() == 1
        (vote,) = store.judging.votes_for(conv.turns["t1"])
        assert vote.value is None and error in vote.error
        assert (
            store.conversations.get_turn(conv.turns["t1"]).status == "judged"
            and store.queue.count_waiting() == 0
        )
        scorer.close()


def test_config_errors_are_clear():
    with pytest.raises(ValueError, match="method"):
        JudgeConfig(method="ppo")
    with pytest.raises(ValueError, match="openai_base_url"):
        JudgeConfig(backend="openai")
    with pytest.raises(ValueError, match="cannot be imported"):
        Scorer(None, JudgeConfig(method="rl", backend="callable", callable="no_such_module:f"))
    with pytest.raises(ValueError, match="needs the engine"):
        Scorer(None, JudgeConfig(method="opd", backend="feedback"))


def test_background_worker_and_resume_after_restart(tmp_path, tiny_tokenizer, engine):
    path = tmp_path / "s.db"
    with Store(path) as store:
        turns = scripted(store, tiny_tokenizer)  # the process "dies" before anything is judged
    with Store(path) as store:
        assert store.judging.count_ready() == 6
        scorer = Scorer(
            store, JudgeConfig(method="rl", backend="callable", callable=RULES, poll_interval_s=0.05)
        )
        scorer.start()
        batch = store.queue.wait_for_samples(4, timeout=20)
        scorer.stop()
        assert {s.turn_id for s in batch} == {turns[n] for n in EXPECTED["rl"]}
        assert store.judging.count_ready() == 0
        wait_until(lambda: scorer.stats["judged"] >= 6, 60, "the last turns judged")
        assert scorer.stats["judged"] == 6
        scorer.close()


def _poisoned_conversation(store: Store, tokenizer) -> dict[str, int]:
    """p1 has a malformed stored reply (a tool call that is a bare string), so judging it always raises;
    p2, after it in the same session, is an ordinary turn."""
    conv = Conversation(store, tokenizer, Clock())
    h = {"X-Session-Id": "poison"}
    m = [{"role": "user", "content": "what is 2 + 2?"}]
    ctx = conv.col.begin(m, headers=h)
    ids = tokenizer.encode("4", add_special_tokens=False)
    broken = {"role": "assistant", "content": "4", "tool_calls": [{"function": "calc"}]}
    conv.turns["p1"] = conv.col.record_turn(
        ctx, render_prompt_ids(tokenizer, m), Completion(ids, [-0.5] * len(ids), "stop", 1), 0.7,
        response_message=broken,
    )  # fmt: skip
    m += [{"role": "assistant", "content": "4"}, {"role": "user", "content": "wrong, answer in words"}]
    m += [conv.say("p2", m, "four", headers=h)]
    conv.say("p3", [*m, {"role": "user", "content": "thanks"}], "welcome", headers=h)
    return conv.turns


def test_poison_turn_is_set_aside_after_max_attempts_while_later_turns_are_judged(tmp_path, tiny_tokenizer):
    from openclaw_trl.config import OpenClawConfig
    from openclaw_trl.export import collect_rows
    from openclaw_trl.serving.ui.panel import PanelViews
    from openclaw_trl.status import LearningStatus

    path = tmp_path / "s.db"
    with Store(path) as store:
        turns = _poisoned_conversation(store, tiny_tokenizer)
        scorer = Scorer(store, JudgeConfig(method="rl", backend="callable", callable=RULES, max_attempts=3))
        assert scorer.score_once() == 2  # the group fails, is split: p2 is judged, p1 has failed once
        (s,) = store.queue.take_samples(5)
        assert (s.turn_id, s.reward) == (turns["p2"], 1.0)
        p1 = store.conversations.get_turn(turns["p1"])
        assert (p1.status, p1.judge_attempts) == ("ready", 1)
        assert scorer.run_until_idle() == 2  # two more attempts, then it is set aside
        assert scorer.run_until_idle() == 0
        assert scorer.stats["failed"] == 1 and scorer.stats["failed_attempts"] == 3
        scorer.close()
    with Store(path) as store:  # persistent: a restart does not retry it
        p1 = store.conversations.get_turn(turns["p1"])
        assert (p1.status, p1.judge_attempts) == ("failed", 3)
        assert p1.judge_error.startswith("AttributeError") and store.judging.count_ready() == 0
        row = next(t for t in collect_rows(store)["turns"] if t["turn_id"] == turns["p1"])
        assert row["status"] == "failed" and row["judge_error"] == p1.judge_error
        status = LearningStatus(OpenClawConfig(output_dir=str(tmp_path)), None, store)()
        assert (status["turns_failed"], status["teacher_failed"]) == (1, 0)
        assert "1 answer the judge could not score" in PanelViews(store)(status)[0]


def test_turns_that_lose_their_teacher_are_counted(tmp_path, tiny_tokenizer, engine):
    with Store(tmp_path / "s.db") as store:
        turns = scripted(store, tiny_tokenizer)
        refusing = _FailingScoreEngine(engine, limit=0)  # refuses every teacher scoring
        scorer = Scorer(
            store, JudgeConfig(method="combine", backend="callable", callable=RULES), engine=refusing
        )
        scorer.run_until_idle()
        assert scorer.stats["teacher_failed"] == 2 and store.judging.count_teacher_failed() == 2  # a3 and b1
        got = {s.turn_id: (s.reward, s.has_hint) for s in store.queue.take_samples(10)}
        assert got[turns["a3"]] == (-1.0, False) and turns["b1"] not in got  # a3 keeps its RL reward only
        scorer.close()


def test_greedy_turn_is_judged_but_never_a_sample(tmp_path, tiny_tokenizer, engine):
    with Store(tmp_path / "s.db") as store:
        col = TurnCollector(store, SessionConfig(), tokenizer=tiny_tokenizer)
        m = [{"role": "user", "content": "hi"}]
        ctx = col.begin(m, headers={"X-Session-Id": "g"})
        ids = tiny_tokenizer.encode("hello", add_special_tokens=False)
        turn_id = col.record_turn(
            ctx, render_prompt_ids(tiny_tokenizer, m), Completion(ids, [0.0] * len(ids), "stop", 0), 0.0
        )
        col.begin([*m, {"role": "assistant", "content": "hello"}, {"role": "user", "content": "thanks"}],
                  headers={"X-Session-Id": "g"})  # fmt: skip
        scorer = Scorer(
            store, JudgeConfig(method="combine", backend="callable", callable=RULES), engine=engine
        )
        assert scorer.run_until_idle() == 1
        turn = store.conversations.get_turn(turn_id)
        assert turn.status == "judged" and turn.reward == 1 and "greedy" in turn.judge_error
        assert store.queue.count_waiting() == 0


class _RecordingEngine:
    """The real engine, recording the prompt length and priority of every judge and teacher call."""

    def __init__(self, engine):
        self.engine, self.tokenizer = engine, engine.tokenizer
        self.calls: list[tuple[str, int, str]] = []

    def generate(self, requests, on_token=None, priority="serve", timeout_s=None):
        self.calls += [("generate", len(r.prompt_ids), priority) for r in requests]
        return self.engine.generate(requests, on_token, priority=priority)

    def score(self, prompt_ids, completion_ids, priority="learn", **kw):
        self.calls += [("score", len(p), priority) for p in prompt_ids]
        return self.engine.score(prompt_ids, completion_ids, priority=priority, **kw)


def test_judge_and_teacher_prompts_are_bounded(tmp_path, tiny_tokenizer, engine):
    """A 20,000-character next state fits in max_prompt_tokens (cut in the middle); instructions that alone
    overflow it give counted None votes; a 5,000-character correction becomes a hint of max_hint_chars."""
    recording = _RecordingEngine(engine)
    with Store(tmp_path / "s.db") as store:
        conv = Conversation(store, tiny_tokenizer, Clock())
        h = {"X-Session-Id": "long"}
        m = [{"role": "user", "content": "summarise my notes"}]
        m += [conv.say("t1", m, "here is a summary", headers=h)]
        conv.say("t2", [*m, {"role": "user", "content": "note " * 4000}], "ok", headers=h)
        cfg = JudgeConfig(method="combine", backend="engine", max_tokens=2, max_prompt_tokens=1200)
        scorer = Scorer(store, cfg, engine=recording)
        assert scorer.run_until_idle() == 1
        judged = [c for c in recording.calls if c[0] == "generate"]
        assert len(judged) == 2 and all(1000 < n <= 1200 and p == "learn" for _, n, p in judged), judged
        assert scorer.stats["judge_prompt_too_long"] == 0
        scorer.close()

    with Store(tmp_path / "tiny.db") as store:
        conv = Conversation(store, tiny_tokenizer, Clock())
        m = [{"role": "user", "content": "hi"}]
        m += [conv.say("t1", m, "hello", headers={"X-Session-Id": "x"})]
        conv.say("t2", [*m, {"role": "user", "content": "more"}], "ok", headers={"X-Session-Id": "x"})
        scorer = Scorer(
            store, JudgeConfig(method="rl", backend="engine", m=2, max_prompt_tokens=20), engine=engine
        )
        scorer.run_until_idle()
        votes = store.judging.votes_for(conv.turns["t1"])
        assert len(votes) == 2 and all(v.value is None and "judge_prompt_too_long" in v.error for v in votes)
        assert scorer.stats["judge_prompt_too_long"] == 1
        scorer.close()

    recording.calls.clear()
    with Store(tmp_path / "hint.db") as store:
        conv = Conversation(store, tiny_tokenizer, Clock())
        m = [{"role": "user", "content": "write a poem"}]
        conv.say("t1", m, "roses are red", headers={"X-Session-Id": "p"})
        assert conv.col.feedback(conv.turns["t1"], -1, "Rhyme every line. " * 300).attached
        cfg = JudgeConfig(method="opd", backend="feedback", max_hint_chars=100)
        scorer = Scorer(store, cfg, engine=recording)
        assert scorer.run_until_idle() == 1
        (sample,) = store.queue.take_samples(5)
        assert len(sample.hint) <= 100 and sample.hint.startswith("Rhyme every line.")
        served = len(store.conversations.get_turn(conv.turns["t1"]).prompt_ids)
        added = f"\n\n{HINT_MARKER}\n{sample.hint}"  # what append_hint adds to the served prompt
        added_tokens = len(tiny_tokenizer.encode(added, add_special_tokens=False))
        ((kind, teacher_len, priority),) = recording.calls
        assert kind == "score" and priority == "learn" and teacher_len <= served + added_tokens + 2
        scorer.close()


def test_status_curves_are_numeric_even_when_metrics_arrive_as_strings():
    from openclaw_trl.serving.ui.panel import hint_frame, reward_frame

    history = [
        {"step": 1, "reward_mean": "-1"},
        {"step": 2, "reward_mean": "0.5", "hint_accept_rate": "1"},
    ]
    rewards, hints = reward_frame(history, set(), []), hint_frame(history)
    assert rewards["reward"].dropna().tolist() == [-1.0, 0.5]
    assert rewards["reward"].dtype.kind == "f" and hints["hint_accept_rate"].dtype.kind == "f"
    empty = reward_frame([], set(), [])
    assert empty["reward"].isna().all() and empty["reward"].dtype.kind == "f"  # fixes the axis type
    assert hint_frame([{"step": 1, "reward_mean": 1.0, "hint_accept_rate": 0.0}]).empty  # no hints: no chart
