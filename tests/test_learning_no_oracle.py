"""No judge of a no-oracle learning-benchmark row can read the simulated user's hidden preference.

The preference lives in the simulated user only. A run hands the runtime three things: the recipe
(``OpenClawConfig``), the model and a judge function. For every row not marked ``oracle`` these are the
same whatever the user wants, its judges are ones whose inputs are the conversation (``JudgeInput``:
the turn and the user's next message; ``QuickJudgeInput``: the conversation and one candidate) and what
the store holds (the memory quick judge's hints), and none is an arbitrary callable that could look
elsewhere. The rows that do read it (the proxy quick judge) are marked ``oracle`` and labelled upper bounds.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path

import pytest

from openclaw_trl.judging import JudgeInput, QuickJudgeInput

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "learning"
RULE_JUDGE = "openclaw_trl.simulation:rule_judge"
CONVERSATION_ONLY_QUICK = {"memory", "engine"}


@pytest.fixture(scope="module")
def run():
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location("learning_bench_run_no_oracle", BENCH / "run.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def no_oracle_rows(run):
    return [row for row in run.ROWS.values() if not row.oracle]


def built(run, row, preference: str, noise: float, tmp_path):
    """What a run of ``row`` hands the runtime when the user wants ``preference``."""
    row = dataclasses.replace(row, preference=preference)
    settings = run.row_settings(row, run.BenchSettings())
    config, model_args = run.build_config(row, 0, settings, tmp_path / "out", tmp_path / "model")
    judge = run.judge_for(row, noise, 0) if row.backend == "callable" or not noise else None
    return config, model_args, judge


@pytest.mark.parametrize("noise", [0.0, 0.2])
def test_what_a_no_oracle_row_hands_the_runtime_does_not_depend_on_the_preference(run, tmp_path, noise):
    rows = no_oracle_rows(run)
    assert {"combine", "combine+bo4+memory", "combine+bo4+engine"} <= {r.name for r in rows}
    for row in rows:
        seen = [built(run, row, p, noise, tmp_path) for p in ("bullets", "formal", "brief", "casual+brief")]
        assert all(s == seen[0] for s in seen), f"{row.name}: its recipe or judge depends on the preference"


def test_no_oracle_rows_use_only_judges_that_read_the_conversation_and_the_store(run, tmp_path):
    for row in no_oracle_rows(run):
        config, _, judge = built(run, row, "bullets", 0.2, tmp_path)
        if row.backend == "callable":
            assert config.judge_callable == RULE_JUDGE
            assert judge is None or type(judge).__name__ == "NoisyRuleJudge"
        else:
            assert config.judge_backend == "feedback" and config.judge_callable is None
        if row.best_of > 1:
            assert config.quick_judge_backend in CONVERSATION_ONLY_QUICK, row.name
        assert config.quick_judge_callable is None, f"{row.name}: a callable quick judge could read anything"
    # what those judges are called with: the conversation, the next state and the candidate, nothing else
    assert {f.name for f in dataclasses.fields(JudgeInput)} == {
        "turn_id", "session_id", "prompt_messages", "tools", "response_text", "next_state", "next_state_source",
    }  # fmt: skip
    assert {f.name for f in dataclasses.fields(QuickJudgeInput)} == {
        "messages", "response", "session_id", "completion_ids", "logprobs", "temperature", "tools",
    }  # fmt: skip


def test_the_rows_that_read_the_preference_are_marked_and_labelled_upper_bounds(run, tmp_path):
    oracle = [row for row in run.ROWS.values() if row.oracle]
    assert [row.name for row in oracle] == ["combine+bo4+proxy"]
    for row in oracle:
        assert "upper bound" in row.label
        config, _, _ = built(run, row, "bullets", 0.0, tmp_path)
        assert config.quick_judge_backend == "callable" and "proxy" in config.quick_judge_callable
    proxy_rows = [
        r.name for r in run.ROWS.values() if "proxy" in str(dict(r.fields).get("quick_judge_callable", ""))
    ]
    assert proxy_rows == [row.name for row in oracle]
