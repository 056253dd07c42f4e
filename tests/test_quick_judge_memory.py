"""The ``memory`` quick judge: candidates scored by their log-likelihood gain under the user's recent hints.

Real engine (the toy model shipped with the package, which follows the hint block), real SQLite store
holding judged turns with hints, and the config's refusals. The score is checked against a direct
computation with the engine's own ``score``.
"""

from __future__ import annotations

import random

import pytest

from openclaw_trl import judge
from openclaw_trl.chat import render_prompt_ids
from openclaw_trl.config import OpenClawConfig
from openclaw_trl.engines.base import Completion
from openclaw_trl.judging import BestOfN, QuickJudgeConfig, QuickJudgeInput, make_quick_judge
from openclaw_trl.judging.quick import MemoryQuickJudge
from openclaw_trl.records import Judgement
from openclaw_trl.store import Store
from openclaw_trl.toy import pretrain
from openclaw_trl.toy import world as toy_world
from tests.helpers import served_turn, tiny_hf_engine

BULLETS = toy_world.style_request("bullets")
FORMAL = toy_world.style_request("formal")
PROMPT = [{"role": "user", "content": toy_world.opening("apples")}]


@pytest.fixture(scope="module")
def toy_engine():
    with tiny_hf_engine(pretrain.PACKAGED_DIR) as engine:
        yield engine


def add_hint(store: Store, hint: str, private: bool = False) -> None:
    """A judged turn whose verdict carries ``hint`` (as the scorer commits one)."""
    session = store.conversations.open_session(f"s{random.random()}", private=private)
    turn_id = store.conversations.add_turn(served_turn(session))
    store.conversations.attach_next_state(turn_id, {"role": "user", "content": "No."}, "next_message")
    store.judging.save_judgement(Judgement(turn=store.conversations.get_turn(turn_id), reward=-1, hint=hint))


def candidates(engine, styles: list[str]) -> list[QuickJudgeInput]:
    """One candidate per style (an answer about apples), with its policy log-probs at temperature 1, as the
    engine would have sampled it."""
    tok = engine.tokenizer
    prompt_ids = list(render_prompt_ids(tok, PROMPT))
    texts = [toy_world.render_answer(s, "apples", random.Random(3)) for s in styles]
    ids = [tok.encode(t + "<|im_end|>", add_special_tokens=False) for t in texts]
    student = engine.score([prompt_ids] * len(ids), ids, weights="policy", temperature=1.0)
    return [
        QuickJudgeInput(PROMPT, t, "s", tuple(i), tuple(lp), 1.0)
        for t, i, lp in zip(texts, ids, student.logprobs, strict=True)
    ]


def memory_judge(engine, store, **fields) -> MemoryQuickJudge:
    config = QuickJudgeConfig(backend="memory", **fields)
    return make_quick_judge(config, engine=engine, tokenizer=engine.tokenizer, store=store)


def teacher_sum(engine, hint: str | None, item: QuickJudgeInput, weights: str = "base") -> float:
    """``log pi_T(y | x + hint)`` summed over the candidate's tokens (``hint`` None: the prompt as it is)."""
    messages = PROMPT if hint is None else judge.append_hint(PROMPT, hint)
    ids = list(render_prompt_ids(engine.tokenizer, messages))
    return sum(engine.score([ids], [list(item.completion_ids)], weights=weights).logprobs[0])


def test_no_hint_yet_gives_no_score_so_the_first_candidate_is_served(toy_engine, tmp_path):
    store = Store(tmp_path / "s.sqlite")
    add_hint(store, BULLETS, private=True)  # a private session's hint is not the judge's to read
    quick = memory_judge(toy_engine, store)
    assert quick.scores(candidates(toy_engine, ["formal", "bullets"])) == [None, None]
    picker = BestOfN(2, quick, store, explore=0.0)
    replies = [{"role": "assistant", "content": "a"}, {"role": "assistant", "content": "b"}]
    assert picker.choose(PROMPT, "s", replies).served_index == 0


def test_score_is_the_hint_conditioned_log_likelihood_gain(toy_engine, tmp_path):
    store = Store(tmp_path / "s.sqlite")
    add_hint(store, BULLETS)
    items = candidates(toy_engine, ["formal", "bullets", "casual", "numbered"])
    scores = memory_judge(toy_engine, store).scores(items)
    for item, score in zip(items, scores, strict=True):
        expected = teacher_sum(toy_engine, BULLETS, item) - teacher_sum(toy_engine, None, item)
        assert score == pytest.approx(expected, abs=1e-3)
    assert max(range(4), key=lambda i: scores[i]) == 1  # the bulleted answer is the one the user asked for


def test_each_distinct_hint_weighs_its_share_so_one_wrong_hint_is_one_vote(toy_engine, tmp_path):
    store = Store(tmp_path / "s.sqlite")
    for hint in (FORMAL, BULLETS, BULLETS, BULLETS, BULLETS):  # the oldest falls out of the last 4
        add_hint(store, hint)
    items = candidates(toy_engine, ["formal", "bullets"])
    assert memory_judge(toy_engine, store).memory.hint_shares() == {BULLETS: 1.0}
    quick = memory_judge(toy_engine, store, hints=5)
    assert quick.memory.hint_shares() == {FORMAL: 0.2, BULLETS: 0.8}
    scores = quick.scores(items)
    for item, score in zip(items, scores, strict=True):
        expected = 0.2 * teacher_sum(toy_engine, FORMAL, item) + 0.8 * teacher_sum(toy_engine, BULLETS, item)
        assert score == pytest.approx(expected - teacher_sum(toy_engine, None, item), abs=1e-3)
    assert scores[1] > scores[0]


def test_unscorable_candidates_and_failures_give_no_score(toy_engine, tmp_path):
    store = Store(tmp_path / "s.sqlite")
    add_hint(store, BULLETS)
    good = candidates(toy_engine, ["bullets"])[0]
    empty = QuickJudgeInput(PROMPT, "", "s")
    greedy = QuickJudgeInput(PROMPT, good.response, "s", good.completion_ids, good.logprobs, 0.0)
    no_logprobs = QuickJudgeInput(PROMPT, good.response, "s", good.completion_ids, (), 1.0)
    scores = memory_judge(toy_engine, store).scores([empty, greedy, no_logprobs, good])
    assert scores[:3] == [None, None, None] and scores[3] is not None
    # a hinted prompt longer than max_prompt_tokens is not scored (a long agent prompt cannot hold the engine)
    assert memory_judge(toy_engine, store, max_prompt_tokens=8).scores([good]) == [None]

    class Failing:
        tokenizer = toy_engine.tokenizer

        def __init__(self, error):
            self.error = error

        def score(self, *args, **kwargs):
            raise self.error

    for error in (TimeoutError("late"), RuntimeError("engine down")):
        quick = memory_judge(Failing(error), store)
        assert quick.scores([good]) == [None]


def test_best_of_n_passes_the_sampled_candidates_to_the_memory_judge(toy_engine, tmp_path):
    store = Store(tmp_path / "s.sqlite")
    add_hint(store, BULLETS)
    items = candidates(toy_engine, ["formal", "bullets", "casual"])
    completions = [Completion(list(i.completion_ids), list(i.logprobs), "stop", 0) for i in items]
    replies = [{"role": "assistant", "content": i.response} for i in items]
    choice = BestOfN(3, memory_judge(toy_engine, store), store, explore=0.0).choose(
        PROMPT, "s", replies, completions, 1.0, None
    )
    assert choice.served_index == 1 and all(s is not None for s in choice.scores)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"method": "rl", "best_of_n": 4, "quick_judge_backend": "memory"}, "method rl extracts none"),
        ({"best_of_n": 4, "quick_judge_hints": 2}, "only applies to quick_judge_backend=memory"),
        ({"quick_judge_hints": 2}, "only apply to Best-of-N groups"),
        ({"best_of_n": 4, "quick_judge_backend": "memory", "quick_judge_hints": 0}, "from 1 to 16"),
        ({"best_of_n": 4, "quick_judge_backend": "memory", "quick_judge_hints": 17}, "from 1 to 16"),
        ({"best_of_n": 4, "quick_judge_backend": "memory", "quick_judge_hints": True}, "from 1 to 16"),
    ],
)
def test_config_refuses_what_the_memory_judge_cannot_do(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        OpenClawConfig(output_dir=str(tmp_path), **overrides)


def test_config_builds_the_memory_judge_with_the_teacher_weights(tmp_path):
    config = OpenClawConfig(
        output_dir=str(tmp_path),
        best_of_n=4,
        quick_judge_backend="memory",
        quick_judge_hints=6,
        teacher="policy",
    )
    quick = config.quick_judge_config()
    assert (quick.backend, quick.hints, quick.teacher) == ("memory", 6, "policy")
    with pytest.raises(ValueError, match="needs the serving engine, its tokenizer and the store"):
        make_quick_judge(quick)


def test_the_score_measures_the_hints_not_the_distance_between_policy_and_teacher(tmp_path):
    """Both terms under the teacher's weights: with ``teacher: base`` an adapter that moved the policy far from
    the base (a random LoRA here) leaves every score and the ranking as they were at version 0; with
    ``teacher: policy`` both terms move together with the adapter."""
    from tests.engine_contract import lora_config, random_adapter

    store = Store(tmp_path / "s.sqlite")
    add_hint(store, BULLETS)
    with tiny_hf_engine(pretrain.PACKAGED_DIR, lora_config=lora_config()) as engine:
        items = candidates(engine, ["formal", "bullets", "casual", "numbered"])
        before = memory_judge(engine, store).scores(items)
        engine.publish_adapter(random_adapter(pretrain.PACKAGED_DIR, lora_config(), seed=5, std=0.3), 1)
        moved = [teacher_sum(engine, None, it, "policy") - teacher_sum(engine, None, it) for it in items]
        assert max(abs(m) for m in moved) > 1.0  # the policy is far from the base on these candidates
        after = memory_judge(engine, store).scores(items)
        assert after == pytest.approx(before, abs=1e-4)
        assert max(range(4), key=lambda i: after[i]) == 1
        live = memory_judge(engine, store, teacher="policy").scores(items)
        for item, score in zip(items, live, strict=True):
            expected = teacher_sum(engine, BULLETS, item, "policy") - teacher_sum(
                engine, None, item, "policy"
            )
            assert score == pytest.approx(expected, abs=1e-3)
