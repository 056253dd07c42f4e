"""The UI's words without a browser: the guide per model, the line offered after a 👎 (with and without a
correction window), the learning panel's summary and curves (rolled-back updates marked), and the distinct
prompts "Did it learn for me?" replays. Real SQLite stores; the browser flows are in
``tests/test_ui_demo_browser.py``."""

from __future__ import annotations

import random
from collections import Counter
from types import SimpleNamespace

from openclaw_trl.compare import distinct_prompt_turns
from openclaw_trl.records import Feedback
from openclaw_trl.serving.ui.blocks import UiHandlers, correction_window_s
from openclaw_trl.serving.ui.guide import correction_prompt, guide_for
from openclaw_trl.serving.ui.panel import (
    ROLLBACK,
    SERIES,
    UNDONE,
    FeedbackCounts,
    PanelViews,
    StyleCounts,
    WhatChanged,
    has_points,
    reward_frame,
    style_of,
    summary_markdown,
    taught_style,
    undone_steps,
)
from openclaw_trl.store import Store
from openclaw_trl.toy import TOY_MODEL_ID, world
from tests.helpers import served_turn


def test_the_toy_guide_says_what_it_knows_and_what_to_type():
    guide = guide_for(TOY_MODEL_ID, batch_size=2)
    assert guide.toy and guide.examples[:2] == ("Tell me about apples.", "Tell me about music.")
    assert all(topic in guide.header for topic in world.TOPICS)
    assert "every 2 ratings" in guide.header and "bulleted" in guide.header and "numbered" in guide.header
    assert "openclaw-trl" not in guide.title
    other = guide_for("Qwen/Qwen3-0.6B")
    assert not other.toy and "Qwen/Qwen3-0.6B" in other.title and other.examples
    assert "it learns from you" in guide_for(None).title


def test_the_correction_prompt_quotes_the_window_only_when_the_server_has_one():
    assert "within 30 s" in correction_prompt(7, 30.0) and "turn 7" in correction_prompt(7, 30.0)
    assert "before the next update trains on it" in correction_prompt(7, None)
    settings = SimpleNamespace()
    service = SimpleNamespace(collector=SimpleNamespace(config=SimpleNamespace()), settings=settings)
    assert correction_window_s(service) is None  # today's session config has no window
    service.collector.config.correction_window_s = 20
    assert correction_window_s(service) == 20.0
    service.collector.config.correction_window_s = 0  # 0: no window
    assert correction_window_s(service) is None
    # what a 👎's result reports wins over the configured window: a value or a method
    handlers = SimpleNamespace(window_s=60.0)
    assert UiHandlers._seconds_left(handlers, SimpleNamespace(correction_seconds_left=lambda: 42.0)) == 42.0
    assert UiHandlers._seconds_left(handlers, SimpleNamespace(correction_seconds_left=None)) == 60.0
    assert UiHandlers._seconds_left(handlers, SimpleNamespace()) == 60.0


def _turn(store: Store, session: int, text: str, answer: str = "- a.") -> int:
    messages = [{"role": "user", "content": text}]
    ids = [ord(c) % 200 for c in text]
    reply = {"role": "assistant", "content": answer}
    return store.conversations.add_turn(
        served_turn(
            session,
            prompt_messages=messages,
            prompt_ids=ids,
            completion_ids=[1, 2],
            sampling_logprobs=[-0.1, -0.2],
            completion_text=answer,
            response_message=reply,
        )
    )


def test_did_it_learn_shows_each_recent_prompt_once(tmp_path):
    with Store(tmp_path / "s.db") as store:
        for i in range(30):  # one question asked again and again, in new conversations
            _turn(store, store.conversations.open_session(f"s{i}"), "Tell me about apples.")
        _turn(store, store.conversations.open_session("m"), "Tell me about music.")
        _turn(store, store.conversations.open_session("w"), "Tell me about the weather.")
        for i in range(30, 60):
            _turn(store, store.conversations.open_session(f"s{i}"), "Tell me about apples.")
        prompts = [t.prompt_messages[-1]["content"] for t in distinct_prompt_turns(store, 3)]
        assert prompts == ["Tell me about apples.", "Tell me about the weather.", "Tell me about music."]


def test_the_summary_speaks_in_words():
    feedback = FeedbackCounts.of(
        [
            Feedback(1, 1, 1, None, 0.0, True, "rating"),
            Feedback(2, 2, -1, None, 0.0, True, "rating"),
            Feedback(3, 2, -1, "say it with bullets", 0.0, True, "correction"),
            Feedback(4, 3, -1, None, 0.0, True, "reject"),
        ]
    )
    assert feedback.words() == "1 👍, 1 👎, 1 correction, 1 retry"
    status = {
        "policy_version": 3,
        "samples_waiting": 1,
        "batch_size": 2,
        "history": [{"step": 1, "reward_mean": 0.5}] * 3,
    }
    text = summary_markdown(status, feedback, trained=6, undone=1)
    assert "**Serving v3** after 3 updates, 1 of them undone by a rollback." in text
    assert "**Learned from** 6 answers" in text and "1 of the 2 answers it needs" in text
    assert "average reward +0.50" in text and "loss" not in text and "grad_norm" not in text
    waiting = {"correction_window": {"window_s": 60.0, "waiting": 1, "seconds_left": 41.6, "turns": []}}
    assert "**Waiting for a correction:** 1 rating 👎 (the first for another 42 s)" in summary_markdown(
        waiting, feedback, trained=0, undone=0
    )
    fresh = summary_markdown({"policy_version": 0}, FeedbackCounts(), trained=0, undone=0)
    assert "no update yet" in fresh
    paused = summary_markdown({"learning_paused": True, "samples_waiting": 3}, FeedbackCounts(), 0, 0)
    assert "paused" in paused and "3 answers wait" in paused
    guarded = summary_markdown(
        {"guard": {"enabled": True, "held_back": [], "last": None}}, FeedbackCounts(), 0, 0
    )
    assert "**Quality check:** every new version is compared with the starting model" in guarded
    held = {"enabled": True, "held_back": [4, 7], "last": "v7 was held back: its answers became erratic."}
    text = summary_markdown({"guard": held}, FeedbackCounts(), 0, 0)
    assert (
        "**Quality check:** v7 was held back: its answers became erratic. (2 versions held back so far.)"
        in text
    )


def test_rolled_back_updates_are_marked_on_the_reward_curve(tmp_path):
    """v1, v2 trained; a rollback to v1 publishes v3 (= v1); v4 trains on: update 2 is undone."""
    with Store(tmp_path / "s.db") as store:
        store.lineage.record_published(0, None, 0, "initial")
        store.lineage.record_published(1, 0, 1, "update")
        store.lineage.record_published(2, 1, 1, "update")
        store.lineage.record_published(3, 1, 0, "rollback")
        store.lineage.record_published(4, 3, 1, "update")
        history = [{"step": s, "reward_mean": r} for s, r in ((1, -0.5), (2, 0.5), (4, 1.0))]
        assert undone_steps(store, 4, [1, 2, 4]) == {2}
        frame = reward_frame(history, {2}, [(3, 1)])
        assert list(frame["series"][:3]) == list(SERIES) and frame["step"][:3].isna().all()  # fixed colours
        rows = list(zip(frame["step"][3:], frame["reward"][3:], frame["series"][3:], strict=True))
        assert rows == [(1, -0.5, "update"), (2, 0.5, UNDONE), (4, 1.0, "update"), (3, -0.5, ROLLBACK)]
        assert has_points(frame) and not has_points(reward_frame([], set(), []))
        rolled = SimpleNamespace(version=3, restored_from=1)
        panel = PanelViews(
            store, SimpleNamespace(versions=lambda: [SimpleNamespace(version=4, restored_from=None), rolled])
        )
        store.conversations.add_feedback(
            _turn(store, store.conversations.open_session("a"), "hi"), 1, None, True, "rating"
        )
        summary, hints, rewards, _ = panel({"policy_version": 4, "history": history})
        assert "after 3 updates, 1 of them undone by a rollback" in summary and "1 👍" in summary
        assert "**Last rollback:** v3 serves v1's weights again." in summary
        assert "No hints learned yet" in hints and UNDONE in set(rewards["series"])


def test_what_changed_reports_the_style_that_grew():
    assert [style_of(world.render_answer(s, "apples", random.Random(0))) for s in world.STYLE_NAMES] == list(
        world.STYLE_NAMES
    )
    assert style_of("Apples are nice.") == "other"
    changed = WhatChanged(service=None)
    prompt = "Tell me about apples."
    changed._base[prompt] = StyleCounts(prompt, Counter(bullets=2, casual=5, formal=3), 10)
    changed._by_version = {1: [StyleCounts(prompt, Counter(bullets=5, casual=4, formal=1), 10)]}
    changed._by_version[2] = [StyleCounts(prompt, Counter(bullets=8, casual=2), 10)]
    assert changed.markdown(2) == (
        "v2: answers to *Tell me about apples.* are now bulleted in 8 of 10 samples (v1: 5, before learning: 2 of 10)."
    )
    assert "After the first update" in changed.markdown(0)
    changed._taught = "casual"  # the person's feedback teaches the casual style: its count is reported
    assert "are now casual in 2 of 10 samples (v1: 4, before learning: 5 of 10)" in changed.markdown(2)


def test_the_taught_style_comes_from_ratings_and_corrections(tmp_path):
    rng = random.Random(0)
    with Store(tmp_path / "s.db") as store:
        session = store.conversations.open_session("a")

        def answered(style: str) -> int:
            return _turn(store, session, "Tell me about apples.", world.render_answer(style, "apples", rng))

        assert taught_style(store) is None
        store.conversations.add_feedback(answered("casual"), 1, None, True, "rating")
        assert taught_style(store) == "casual"
        store.conversations.add_feedback(answered("formal"), -1, None, True, "rating")
        request = world.style_request("bullets")
        store.conversations.add_feedback(
            answered("formal"), -1, f"No, not like that. {request}", True, "correction"
        )
        store.conversations.add_feedback(answered("numbered"), -1, "- Apples grow on trees.", True, "edit")
        store.conversations.add_feedback(answered("numbered"), -1, None, True, "reject")
        assert taught_style(store) == "bullets"  # bullets 4 (a request, an edit), casual 1
