"""The simulated-user evaluation: rating parser, problem data, and the loop against our real server.

The tiny random model plays both sides in the end-to-end test (the score is meaningless; what is tested is
that sessions, turns, next states, ratings and the CLI are wired). A scripted persona LLM (an httpx mock
transport) checks the parts a random model cannot exercise: the rating, the sentinel, the closing request.
"""

from __future__ import annotations

import json

import httpx
import pytest

from tests._server_helpers import running_stack, turns
from tests.helpers import tiny_hf_engine


@pytest.mark.parametrize(
    "text, expected",
    [
        ("RATING: 0.8", 0.8),
        ("It is fine.\nRating: **0.25**", 0.25),
        ("<think>maybe RATING: 0.1</think>\nRATING: 0.9", 0.9),
        ("rating = 7/10", 0.7),
        ("I'd say 8 out of 10.", 0.8),
        ("Satisfaction: 65%", 0.65),
        ("RATING: 85%", 0.85),
        ("Pretty good overall.\n0.6", 0.6),
        ("score 7", 0.7),
        ("RATING: 1", 1.0),
        ("RATING: 0", 0.0),
        ("no idea", None),
        ("", None),
        (None, None),
        ("RATING: 250", None),
        ("RATING: 12/5", None),
    ],
)
def test_parse_rating(text, expected):
    from openclaw_trl.eval import parse_rating

    value = parse_rating(text)
    assert value == pytest.approx(expected) if expected is not None else value is None


def test_packaged_problems_and_reference_format(tmp_path):
    from openclaw_trl.eval import load_problems

    problems = load_problems(100)
    assert len(problems) == 100 and problems[0]["answer"] == "36"
    assert all(p["question"] and p["answer"] for p in problems)
    assert load_problems(2, offset=98) == problems[98:]
    with pytest.raises(ValueError, match="asked for 101"):
        load_problems(101)
    ref = tmp_path / "gsm8k.json"
    ref.write_text(json.dumps([{"question": "1+1?", "ground_truth_answer": 2}]))
    assert load_problems(1, path=ref) == [{"question": "1+1?", "answer": "2"}]


def test_persona_opening_and_settings():
    from openclaw_trl.eval import PERSONAS, EvalSettings

    problem = {"question": "What is 2+3?", "answer": "5"}
    assert "What is 2+3?" in PERSONAS["student"].opening(problem)
    teacher = PERSONAS["teacher"].opening(problem, "2+3=6")
    assert "Correct answer: 5" in teacher and "2+3=6" in teacher
    with pytest.raises(ValueError, match="persona"):
        EvalSettings(persona="parent")


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    with tiny_hf_engine(tiny_model_dir, max_batch_size=16) as engine:
        yield engine


def scripted_persona(script: list[str]):
    """A persona LLM that answers rating calls with a rating and conversation calls from ``script``."""
    calls: list[dict] = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        calls.append(body)
        prompt = body["messages"][-1]["content"]
        if "RATING:" in prompt:
            text = "<think>hmm</think>Looks AI-written.\nRATING: 0.25"
        elif "submission" in prompt and body["messages"][0]["role"] == "user":
            text = "2 + 3 = 6, so the answer is 6."
        else:
            text = script.pop(0) if script else "ok thanks\nHOMEWORK_DONE"
        return httpx.Response(200, json={"choices": [{"message": {"role": "assistant", "content": text}}]})

    return httpx.Client(transport=httpx.MockTransport(handler)), calls


@pytest.mark.parametrize("persona", ["student", "teacher"])
def test_conversation_against_our_server(engine, tmp_path, persona):
    from openclaw_trl.eval import EvalSettings, OpenAIClient, evaluate, load_problems

    sentinel = "HOMEWORK_DONE" if persona == "student" else "GRADING_DONE"
    client, calls = scripted_persona(["no bold please, keep the steps", f"great, thanks\n{sentinel}"])
    with running_stack(engine, tmp_path / "s.sqlite") as stack:
        server = OpenAIClient(stack.url + "/v1", "openclaw")
        user_llm = OpenAIClient("http://persona.test/v1", "persona", http=client)
        settings = EvalSettings(persona=persona, max_turns=4, server_max_tokens=6)
        result = evaluate(server, user_llm, load_problems(1, offset=3), settings, offset=3)
        problem = result.problems[0]
        assert problem.error is None and problem.finished and problem.replies == 2
        assert problem.score == pytest.approx(0.25) and result.mean_score == pytest.approx(0.25)
        assert problem.session.startswith(f"{persona}-3-") and problem.policy_versions == [0, 0]
        rows = turns(stack.store)
        assert len(rows) == 3 and len({r.session_id for r in rows}) == 1
        first, second, closing = rows
        # the persona's words are the next states; the closing request ends the session
        assert first.next_state["content"] == "no bold please, keep the steps"
        assert second.next_state["content"] == "great, thanks"
        assert len(closing.completion_ids) == 1
        session = stack.store.conversations.get_session(first.session_id)
        assert session.end_reason == "done"
    # the persona saw the assistant's replies as "user" messages, its own as "assistant" ones
    conversation_calls = [c for c in calls if c["messages"][0]["role"] == "system"]
    assert conversation_calls[0]["messages"][2]["content"].startswith("The assistant replied:")
    assert conversation_calls[0]["messages"][1]["role"] == "assistant"


def test_cli_with_the_tiny_model_as_both_sides(engine, tmp_path, capsys):
    """``openclaw-trl eval`` end to end: one server plays the assistant and (anonymously) the persona."""
    from openclaw_trl.cli import main

    with running_stack(engine, tmp_path / "s.sqlite", default_max_tokens=6) as stack:
        url = stack.url + "/v1"
        out = tmp_path / "eval.json"
        code = main(
            [
                "eval",
                *("--persona", "student", "--problems", "2", "--server", url, "--max-turns", "1"),
                *("--user-llm-base-url", url, "--user-llm-model", "openclaw", "--user-llm-api-key-env", ""),
                *("--user-llm-max-tokens", "6", "--server-max-tokens", "6", "--output", str(out)),
            ]
        )
        assert code == 0
        report = json.loads(out.read_text())
        assert report["summary"]["problems"] == 2 and report["summary"]["errors"] == 0
        sessions = {r.session_id for r in turns(stack.store) if r.turn_type == "main"}
        keys = {stack.store.conversations.get_session(s).key for s in sessions}
        assert {k for k in keys if k} == {p["session"] for p in report["problems"]}
    printed = capsys.readouterr().out
    assert "student: mean rating of the first answer" in printed and printed.count("problem ") == 2
