"""judge.py, table-driven: verdict parsing, voting, hint selection and injection (no model)."""

import subprocess
import sys

import pytest

from openclaw_trl.judge import (
    HINT_MARKER,
    append_hint,
    build_hint_messages,
    build_prm_messages,
    majority_vote,
    parse_hint_vote,
    parse_prm_score,
    select_hint,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The user moved on. \\boxed{1}", 1),
        ("\\boxed{-1}", -1),
        ("\\boxed{0}", 0),
        ("\\boxed{+1}", 1),
        ("first \\boxed{1} then I changed my mind \\boxed{-1}", -1),  # several boxes: the last wins
        ("\\boxed{10}", None),
        ("\\boxed{ 1}", None),
        ("\\boxed{1.0}", None),
        ("\\boxed{2}", None),
        ("\\boxed{-2}", None),
        ("score: 1", None),  # no box
        ("", None),
        (None, None),
        ("\\boxed{1", None),  # unterminated
        ("<think>draft: \\boxed{1}</think>\nFinal: \\boxed{-1}", -1),
        ("<think>looks good \\boxed{1}</think>\nI cannot decide.", None),  # reasoning never leaks
        ("<think>a</think><think>b \\boxed{1}</think> \\boxed{0}", 0),
        ("<think>cut off while drafting \\boxed{1}", None),  # unterminated think: drafts only, no vote
        ("\\boxed{-1} <think>second thoughts \\boxed{1}", None),  # a think opened after the verdict
        ("<think>a</think>\\boxed{1} <think>again \\boxed{-1}", None),  # the last think never closed
        ("Réponse correcte ✓ — \\boxed{1} 谢谢", 1),  # unicode around the box
        ("\\boxed{-1} and \\boxed{x}", -1),
    ],
)
def test_parse_prm_score(text, expected):
    assert parse_prm_score(text) == expected


@pytest.mark.parametrize(
    ("votes", "expected"),
    [
        ([1, -1, None], 0),
        ([1, None, None], 1),
        ([1, 1, -1], 1),
        ([0, 0, 1], 0),
        ([1, -1, 0], 0),
        ([-1, -1, 1], -1),
        ([None, None], 0),
        ([], 0),
        ([-1], -1),
        ([1, 1, -1, -1, 0], 0),
    ],
)
def test_majority_vote(votes, expected):
    assert majority_vote(votes) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("\\boxed{1}\n[HINT_START]Use plain prose, no lists.[HINT_END]", (1, "Use plain prose, no lists.")),
        ("\\boxed{-1}", (-1, "")),
        ("\\boxed{0} [HINT_START]x[HINT_END]", (None, "x")),  # 0 is not a hint decision
        ("[HINT_START]  padded hint text  [HINT_END] \\boxed{1}", (1, "padded hint text")),
        ("\\boxed{1} [HINT_START]first[HINT_END] [HINT_START]second one[HINT_END]", (1, "second one")),
        ("\\boxed{1} [HINT_START]never closed", (1, "")),  # unterminated hint block
        ("\\boxed{1} [HINT_START]multi\nline\nhint[HINT_END]", (1, "multi\nline\nhint")),
        ("<think>\\boxed{1} [HINT_START]draft hint in thinking[HINT_END]</think>\\boxed{-1}", (-1, "")),
        ("<think>\\boxed{1} [HINT_START]a draft hint, cut off[HINT_END]", (None, "")),  # unterminated think
        (
            "\\boxed{1}[HINT_START]Écris en français, s'il te plaît 🙂[HINT_END]",
            (1, "Écris en français, s'il te plaît 🙂"),
        ),
        ("", (None, "")),
        (None, (None, "")),
        ("\\boxed{10} [HINT_START]hint[HINT_END]", (None, "hint")),
    ],
)
def test_parse_hint_vote(text, expected):
    assert parse_hint_vote(text) == expected


@pytest.mark.parametrize(
    ("votes", "expected"),
    [
        ([(1, "short"), (1, "this is long enough")], "this is long enough"),
        ([(1, "exactly10c"), (-1, "a much longer but rejected hint")], None),  # 10 chars is not > 10
        ([(1, "  twelve chars  ")], "twelve chars"),  # judged on the stripped hint (12 > 10)
        ([(1, "hint number one"), (1, "hint number two")], "hint number one"),  # tie: first
        ([(None, "a valid looking hint"), (-1, "another valid looking hint")], None),
        ([], None),
        (
            [(1, "a b c d e f g"), (1, "longest hint of them all"), (1, "mid length hint")],
            "longest hint of them all",
        ),
    ],
)
def test_select_hint(votes, expected):
    assert select_hint(votes) == expected


def test_append_hint_targets_last_user_message_and_does_not_mutate():
    messages = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "reply"},
        {"role": "user", "content": "second"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "1"}]},
        {"role": "tool", "content": "result"},
    ]
    snapshot = [dict(m) for m in messages]
    out = append_hint(messages, "  be concise  ")
    assert messages == snapshot
    assert out[3]["content"] == f"second\n\n{HINT_MARKER}\nbe concise"
    assert [m["content"] for i, m in enumerate(out) if i != 3] == [
        m["content"] for i, m in enumerate(messages) if i != 3
    ]
    assert out[4]["tool_calls"] == [{"id": "1"}]


def test_append_hint_flattens_parts_and_falls_back():
    parts = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "look"},
                {"type": "image_url"},
                {"type": "text", "text": "here"},
            ],
        }
    ]
    assert append_hint(parts, "h")[0]["content"] == f"look here\n\n{HINT_MARKER}\nh"
    no_user = [{"role": "system", "content": "s"}, {"role": "tool", "content": "t"}]
    out = append_hint(no_user, "h")
    assert out[0]["content"] == "s" and out[1]["content"] == f"t\n\n{HINT_MARKER}\nh"
    assert append_hint([], " h ") == [{"role": "user", "content": f"{HINT_MARKER}\nh"}]


def test_judge_messages_carry_response_and_next_state():
    for build in (build_prm_messages, build_hint_messages):
        msgs = build("RESPONSE-TEXT", "NEXT-STATE-TEXT", "tool")
        assert [m["role"] for m in msgs] == ["system", "user"]
        assert "RESPONSE-TEXT" in msgs[1]["content"] and "NEXT-STATE-TEXT" in msgs[1]["content"]
        assert "role: tool" in msgs[1]["content"]
    prm_system = build_prm_messages("a", "b")[0]["content"]
    assert all(s in prm_system for s in ("\\boxed{1}", "\\boxed{0}", "\\boxed{-1}"))
    hint_system = build_hint_messages("a", "b")[0]["content"]
    assert "[HINT_START]" in hint_system and "[HINT_END]" in hint_system
    assert "role: user" in build_hint_messages("a", "b", "")[1]["content"]


def test_imports_are_light():
    code = (
        "import sys; import openclaw_trl.judge;"
        "heavy = [m for m in ('torch', 'trl', 'vllm', 'gradio', 'transformers') if m in sys.modules];"
        "assert not heavy, heavy;"
        "import openclaw_trl.losses;"
        "assert 'torch' in sys.modules; bad = [m for m in ('trl', 'vllm', 'gradio') if m in sys.modules];"
        "assert not bad, bad; print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize(
    ("text", "opens_think", "expected"),
    [
        ("draft \\boxed{1}", True, None),  # the prompt opened <think>: still thinking when cut off
        ("draft \\boxed{1}</think>final \\boxed{-1}", True, -1),
        ("draft \\boxed{1}", False, 1),
    ],
)
def test_engine_judge_whose_prompt_opens_think(text, opens_think, expected):
    from openclaw_trl.judging.voters import _llm_vote

    vote = _llm_vote("prm", "engine", text, opens_think=opens_think)
    assert vote.value == expected and vote.raw_text == text  # the raw text is stored as generated


def _chars(messages) -> int:
    return sum(len(m["content"]) for m in messages)


def test_fit_judge_messages_cuts_the_next_state_then_the_response():
    from openclaw_trl.judge import build_hint_messages, build_prm_messages, fit_judge_messages

    response, next_state = "R" * 300, "HEAD" + "n" * 5000 + "TAIL"
    fixed = _chars(build_prm_messages("", "", "user"))
    assert fit_judge_messages("prm", "ok", "fine", "user", _chars, 10**6) == build_prm_messages("ok", "fine")
    fitted = fit_judge_messages("prm", response, next_state, "user", _chars, fixed + 1000)
    user = fitted[1]["content"]
    assert _chars(fitted) <= fixed + 1000 and _chars(fitted) >= fixed + 990  # cut as little as needed
    assert response in user and "HEAD" in user and "TAIL" in user and "characters cut …]" in user
    fixed = _chars(build_hint_messages("", "", "user"))
    fitted = fit_judge_messages("hint", response, next_state, "user", _chars, fixed + 200)
    assert "R" * 300 not in fitted[1]["content"] and _chars(fitted) <= fixed + 200  # the response is cut too
    assert fit_judge_messages("prm", response, next_state, "user", _chars, fixed // 2) is None


def test_cap_hint():
    from openclaw_trl.judge import cap_hint

    assert cap_hint("x" * 50 + "  ", 60) == "x" * 50
    assert cap_hint("abcdef", 3) == "abc"
    assert cap_hint(None, 3) is None
