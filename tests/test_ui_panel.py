"""The UI's words without a browser: the guide per model, the line offered after a 👎 (with and without a
correction window), the learning panel's summary and curves (rolled-back updates marked), and the distinct
prompts "Did it learn for me?" replays. Real SQLite stores; the browser flows are in
``tests/test_ui_demo_browser.py``."""

from __future__ import annotations

import random
import re
from collections import Counter
from types import SimpleNamespace

from openclaw_trl.compare import distinct_prompt_turns
from openclaw_trl.records import Feedback
from openclaw_trl.serving.ui.blocks import UiHandlers, correction_window_s
from openclaw_trl.serving.ui.changed import (
    StyleCounts,
    WhatChanged,
    style_of,
    taught_style,
    well_formed_count,
)
from openclaw_trl.serving.ui.charts import COLOURS, hint_chart, reward_chart
from openclaw_trl.serving.ui.chat import new_conversation, previous_exchange
from openclaw_trl.serving.ui.guide import correction_prompt, guide_for
from openclaw_trl.serving.ui.panel import (
    ROLLBACK,
    SERIES,
    UNDONE,
    FeedbackCounts,
    PanelViews,
    has_points,
    hint_frame,
    hints_markdown,
    reward_frame,
    summary_markdown,
    undone_steps,
)
from openclaw_trl.serving.ui.quality import HeldVersion, last_clean_version, plain_reason, quality_markdown
from openclaw_trl.serving.ui.versions import VersionControls, lineage_notes, version_label, versions_markdown
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
    assert "**Quality:** every new version is checked against the starting model" in guarded
    held = {"enabled": True, "held_back": [4, 7], "last": "v7 was held back: its answers became erratic."}
    metrics = {"guard/held": 1.0, "guard/kl": 0.2, "guard/entropy_gap": 1.4, "guard/implausible": 0.001}
    text = summary_markdown({"guard": held, "last_metrics": metrics}, FeedbackCounts(), 0, 0)
    assert "**Quality:** ⚠️ v7 was held back: its answers fell apart into random words." in text
    assert "**Held back before:** v4" in text


def _status(metrics: dict | None) -> dict:
    limits = {"kl": 0.5, "implausible": 0.01, "entropy_drop": 1.0, "entropy_rise": 1.0}
    return {
        "guard": {"enabled": True, "held_back": [], "last": None, "limits": limits},
        "last_metrics": metrics,
    }


def test_the_summary_says_whether_the_answers_are_still_sound():
    """Beside the style: the guard's latest signals in plain words, the versions it held back and why, and
    which version is the last clean one."""
    passed = {"guard/held": 0.0, "guard/kl": 0.12, "guard/implausible": 0.001, "guard/entropy_gap": -0.05}
    text = summary_markdown(_status(passed), FeedbackCounts(), 0, 0)
    assert "**Quality:** ✅ answers still varied and well-formed (the last check passed)." in text
    assert "**Last check:** drift 0.12 (limit 0.5), implausible words 0.1% (limit 1.0%)" in text
    assert "certainty change -0.05 (limits −1, +1)" in text and "Last clean version" not in text
    drifting = dict(passed, **{"guard/implausible": 0.009})
    text = summary_markdown(_status(drifting), FeedbackCounts(), 0, 0, clean=5)
    assert (
        "⚠️ answers are starting to drift: it puts weight on words the starting model finds implausible"
        in text
    )
    assert "**Last clean version:** v5: roll back to it if the answers broke." in text
    reasons = {  # each of the guard's verdicts, in plain words
        "its answers became repetitive (next-token entropy -1.40 nats from the starting model's, limit -1)": (
            "its answers repeated themselves"
        ),
        "its answers became erratic (next-token entropy +1.20 nats, limit +1)": "fell apart into random words",
        "its answers moved away from anything the starting model would say, even told what you asked for": (
            "moved away from anything the starting model would say"
        ),
        "its answers started to go wrong: at one point ...": "stray or wrong words",
        "its weights hold inf or NaN values": "its weights broke",
    }
    for why, words in reasons.items():
        assert words in plain_reason(why), why
    held = [HeldVersion(4, 3, "its answers became erratic (...)"), HeldVersion(7, 6, list(reasons)[0])]
    text = summary_markdown(
        _status({**passed, "guard/held": 1.0}), FeedbackCounts(), 0, 0, held=held, clean=6
    )
    assert (
        "**Quality:** ⚠️ v7 was held back: its answers repeated themselves. v6's weights serve in its place."
        in text
    )
    assert "**Held back before:** v4 (its answers fell apart into random words)." in text
    assert "**Last clean version:** v6" in text
    assert quality_markdown({"enabled": False}, {}, []) is None  # no guard, nothing to say
    unnamed = quality_markdown({"enabled": True}, {"guard/held": 1.0}, [])  # held, its row not read yet
    assert "⚠️ the last update was held back" in unnamed


def _version(version, restored_from=None, metrics=None, restorable=True, serving=False):
    return SimpleNamespace(
        version=version,
        created=0.0,
        samples=2,
        metrics=metrics or {},
        restored_from=restored_from,
        restorable=restorable,
        serving=serving,
    )


def test_the_versions_say_what_they_are_and_the_last_clean_one_is_offered_first(tmp_path):
    """v1-v3 trained, v4 held back (v3's weights), v5 trained and serving (its check drifting); v2's
    checkpoint is gone."""
    ok = {"reward": 0.5, "guard/held": 0.0, "guard/kl": 0.1, "guard/implausible": 0.001}
    with Store(tmp_path / "s.db") as store:
        store.lineage.record_published(0, None, 0, "initial")
        store.lineage.record_published(1, 0, 1, "update")
        store.lineage.record_published(2, 1, 1, "update")
        store.lineage.record_published(3, 2, 1, "update")
        store.lineage.record_published(4, 3, 0, "held: its answers became repetitive (entropy -1.3)")
        store.lineage.record_published(5, 4, 1, "update")
        versions = [
            _version(5, metrics={**ok, "guard/implausible": 0.0095}, serving=True),  # drifting
            _version(4, restored_from=3),
            _version(3, metrics=ok),
            _version(2, metrics=ok, restorable=False),
            _version(1, metrics=ok),
            _version(0),
        ]
        notes = lineage_notes(store, versions)
        labels = [version_label(v, notes) for v in versions]
        assert labels == [
            "v5: update 5",
            "v4: held back (v3's weights)",
            "v3: update 3",
            "v2: update 2",
            "v1: update 1",
            "v0: initial",
        ]
        assert last_clean_version(versions, {4}) == 3
        assert (
            last_clean_version(versions, {4}, path={5, 4, 1, 0}) == 1
        )  # v3 undone by a rollback: not offered
        assert version_label(_version(6, restored_from=0), {6: "rollback"}) == "v6: rollback to v0"
        assert version_label(_version(6, restored_from=5), {6: "resume"}) == "v6: resumed from v5"
        table = versions_markdown(versions, False, None, 0, notes, clean=3)
        assert (
            "| v3: update 3 |" in table
            and "✅ **last clean**" in table.split("v3: update 3")[1].split("\n")[0]
        )
        assert "⚠️ its answers repeated themselves" in table and "(update " not in table
        learning = SimpleNamespace(
            versions=lambda: versions, paused=False, trainer_state="waiting for samples", serving_version=5
        )
        service = SimpleNamespace(store=store, status=lambda: _status(None))
        on = SimpleNamespace(learning=learning, service=service)
        _, choices, _ = VersionControls(lambda request: on)._listing(on)
        assert choices["choices"][0] == ("v3: update 3 · last clean", 3)  # offered first, and chosen
        assert choices["value"] == 3
        assert ("v5: update 5", 5) not in choices["choices"]  # the serving one is no choice


def test_the_charts_draw_lines_with_a_legend_whole_ticks_and_one_colour_per_meaning():
    history = [{"step": s, "reward_mean": r} for s, r in ((1, -1.0), (2, 0.5), (3, 1.0), (5, 1.0))]
    svg = reward_chart(reward_frame(history, {3}, [(4, 2)]))
    assert svg.count("<polyline") == 1 and "<circle" in svg  # the kept updates joined by a line
    for name in SERIES:
        assert f">{name}</text>" in svg  # the legend
    assert set(COLOURS) >= set(SERIES) and len(set(COLOURS.values())) == len(COLOURS)
    ticks = re.findall(r'text-anchor="middle" font-size="9" fill="currentColor">([^<]+)</text>', svg)
    assert [t for t in ticks if t != "update"] == ["1", "2", "3", "4", "5"]  # whole updates only
    for cy in map(float, re.findall(r'<circle cx="[0-9.]+" cy="([0-9.]+)" r="4" fill="#\w+"><title>', svg)):
        assert 26 + 4 <= cy <= 210 - 52 - 4  # every point whole inside the plot (+1 and -1 too)
    one = reward_chart(reward_frame(history[:1], set(), []))
    assert "<circle" in one and "<polyline" not in one  # a single update is a point
    assert reward_chart(reward_frame([], set(), [])) == ""
    hints = hint_chart(
        hint_frame([{"step": 1, "hint_accept_rate": 0.5}, {"step": 2, "hint_accept_rate": 1.0}])
    )
    assert COLOURS["hints accepted"] in hints and "<polyline" in hints


def test_the_same_hint_is_listed_once_with_its_count():
    hints = ["Use a bulleted list."] * 5 + ["Be brief.", "Use a bulleted list."]
    text = hints_markdown(hints)
    assert text.splitlines() == ["- Use a bulleted list. ×6", "- Be brief."]
    assert hints_markdown(["<b>x</b>"]) == "- &lt;b&gt;x&lt;/b&gt;"


def test_what_changed_says_how_many_sampled_answers_are_well_formed():
    prompt = "Tell me about apples."
    good = world.render_answer("bullets", "apples", random.Random(0))
    broken = "- Apples. Apples.\n- Apples. Apples."
    assert well_formed_count(prompt, [good, broken, good]) == 2
    assert well_formed_count("Hi!", [good]) is None  # no toy topic: not checked
    changed = WhatChanged(service=None)
    changed._base[prompt] = StyleCounts(prompt, Counter(bullets=3, casual=7), 10, well_formed=9)
    changed._by_version = {8: [StyleCounts(prompt, Counter(bullets=10), 10, well_formed=3)]}
    line = changed.markdown(8)
    assert "bulleted in 10 of 10 samples" in line
    assert "⚠️ Only 3 of 10 well-formed (before learning: 9): the others repeat or garble their facts" in line
    changed._by_version[8] = [StyleCounts(prompt, Counter(bullets=10), 10, well_formed=9)]
    assert changed.markdown(8).endswith("✅ 9 of 10 well-formed (before learning: 9).")


def test_the_last_answer_stays_in_sight_after_a_new_conversation(tmp_path):
    ended = []
    on = SimpleNamespace(sessions=SimpleNamespace(end_session=ended.append))
    handlers = UiHandlers.per_request(lambda request: on, guide_for(TOY_MODEL_ID))
    conv = dict(new_conversation(), session_id="ui-1")
    conv["messages"] = [
        {"role": "user", "content": "Tell me about apples."},
        {"role": "assistant", "content": "- Apples grow on trees."},
    ]
    chat, fresh, private, notice, prompt, previous = handlers.on_new(conv)
    assert ended == ["ui-1"] and chat == [] and fresh["messages"] == [] and notice == "New conversation."
    assert "**Previous conversation, last exchange**" in previous
    assert "> Tell me about apples." in previous and "> - Apples grow on trees." in previous
    assert previous_exchange([]) == ""


def test_the_learning_panel_is_no_taller_than_the_chat_column():
    import gradio as gr

    from openclaw_trl.serving.ui.layout import PAGE_CSS, PANEL_MAX_HEIGHT, layout

    with gr.Blocks() as demo:
        c = layout(guide_for(TOY_MODEL_ID))
    ids = {block.elem_id for block in demo.blocks.values()}
    assert {"chat-column", "learning-panel", "previous-conversation", "curves", "hints-box"} <= ids
    assert f"#learning-panel {{ max-height: {PANEL_MAX_HEIGHT}px; overflow-y: auto;" in PAGE_CSS
    assert c.chatbot.height >= 520 and PANEL_MAX_HEIGHT <= c.chatbot.height + 400
    assert all(isinstance(view, gr.HTML) for view in c.panel[2:4])  # the charts: inline SVG


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
        rolled = _version(3, restored_from=1)
        panel = PanelViews(store, SimpleNamespace(versions=lambda: [_version(4), rolled]))
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


def test_the_status_names_the_bounds_the_guard_holds_versions_to(tmp_path):
    from openclaw_trl.config import OpenClawConfig
    from openclaw_trl.status import guard_status

    config = SimpleNamespace(
        guard=True,
        guard_max_kl=0.4,
        guard_max_implausible=0.02,
        guard_max_entropy_drop=1.5,
        guard_max_entropy_rise=2.0,
    )
    with Store(tmp_path / "s.db") as store:
        store.lineage.record_published(3, 2, 0, "held: its answers became repetitive (entropy -1.3)")
        guard = guard_status(config, store)
        assert guard["limits"] == {"kl": 0.4, "implausible": 0.02, "entropy_drop": 1.5, "entropy_rise": 2.0}
        assert guard["held_back"] == [3]
        held = [HeldVersion.of(v) for v in store.lineage.held_back()]
        assert held == [HeldVersion(3, 2, "its answers became repetitive (entropy -1.3)")]
    assert {
        "guard_max_kl",
        "guard_max_implausible",
        "guard_max_entropy_drop",
        "guard_max_entropy_rise",
    } <= set(OpenClawConfig.__dataclass_fields__)
