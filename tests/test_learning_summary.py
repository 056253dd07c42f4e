"""The learning benchmark's summary on hand-made runs: sessions until stable, the JSON summary, the goals,
the headline tables, the README update and the plot (pure functions; no model, no training)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "learning"


def _load(name: str):
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(f"learning_bench_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


results_json = _load("results_json")
headline = _load("headline")
summary = _load("summary")


def make_run(
    row="combine", seed=0, noise=0.2, rates=(0.3, 0.6, 0.95, 1.0), conversations=(0, 5, 10, 15), **extra
):
    run = {
        "row": row,
        "method": "combine",
        "backend": "callable",
        "seed": seed,
        "noise": noise,
        "rates": list(rates),
        "served_rates": list(rates),
        "conversations": list(conversations),
        "turns": [2 * c for c in conversations],
        "online_first_ok": [None] + [0.5] * (len(rates) - 1),
        "trainer_metrics": [],
        "stopped_early": False,
        "seconds": 1.0,
    }
    return run | extra


# ------------------------------------------------------------------------------- sessions until stable
@pytest.mark.parametrize(
    ("first_ok", "rates", "conversations", "expected"),
    [
        # right from conversation 10 on (served by point 2: 0.95, then 1.0): stable after 13
        ([False] * 10 + [True] * 6, (0.3, 0.6, 0.95, 1.0), (0, 5, 10, 15), 13),
        # first answers right early, but the policy serving them scores 0.6: wait for point 2's policy
        ([True] * 16, (0.3, 0.6, 0.95, 1.0), (0, 5, 10, 15), 13),
        # never three in a row
        ([True, True, False] * 6, (0.95, 0.95, 0.95, 0.95), (0, 5, 10, 15), None),
        # the streak is the very last three conversations
        ([False] * 13 + [True] * 3, (0.3, 0.6, 0.95, 1.0), (0, 5, 10, 15), 16),
        # the evaluation dips below 0.9 after reaching it: only the policy after the dip counts
        ([True] * 20, (0.3, 0.95, 0.8, 0.92), (0, 5, 10, 15), 18),
        # the last evaluation dips: never stable
        ([True] * 20, (0.3, 0.95, 0.95, 0.85), (0, 5, 10, 15), None),
        # two points taken after the same number of conversations: the later one serves
        ([True] * 8, (0.3, 0.5, 0.95), (0, 4, 4), 7),
        # the base model already stable
        ([True] * 3, (0.9,), (0,), 3),
        # first answers recorded but no evaluation point
        ([True] * 5, (), (), None),
        # empty record
        ([], (0.95,), (0,), None),
        (None, (0.95,), (0,), None),
    ],
)
def test_sessions_until_stable(first_ok, rates, conversations, expected):
    run = make_run(rates=rates, conversations=conversations, first_ok=first_ok)
    assert results_json.sessions_until_stable(run) == expected


def test_sessions_until_stable_of_an_old_run_is_unknown():
    assert results_json.sessions_until_stable(make_run()) is None  # no first_ok field at all


# ------------------------------------------------------------------------------------------ the JSON
ROWS_META = {
    "combine": {"label": "Combine", "preference": "bullets", "oracle": False},
    "combine+bo4": {"label": "Combine + best-of-4", "preference": "bullets", "oracle": True},
    "rl": {"label": "RL", "oracle": False},
}


def new_run(row, seed, noise=0.2, **extra):
    base = {
        "first_ok": [False] * 4 + [True] * 12,
        "fidelity": [1.0, 0.98, 0.97, 0.96],
        "fidelity_unseen": [1.0, 1.0, 0.9, 0.9],
        "rates_unseen": [0.25, 0.5, 0.8, 0.9],
        "distinct": [0.5, 0.45, 0.4, 0.3],
        "served_after_hint": 0.5,
        "preference": "bullets",
    }
    return make_run(row=row, seed=seed, noise=noise, **(base | extra))


def report_of(runs, base_rate=0.3):
    return {"runs": runs, "settings": {"updates": 3}, "base_rate": base_rate, "command": "bench"}


def test_summary_json_entries_are_ordered_rounded_and_tolerate_old_runs():
    runs = [
        new_run("rl", 1, noise=0.0),
        new_run("combine+bo4", 0, served_after_hint=0.8),
        new_run("combine", 1, rates=(0.3, 0.5, 0.8, 0.85), first_ok=[True] * 16),  # never 0.9
        new_run("combine", 0),
        make_run("mystery", 0),  # an old cached run of a row rows_meta does not know
    ]
    out = results_json.summary_json(report_of(runs), ROWS_META)
    assert [e["name"] for e in out["entries"]] == [
        "rl@p0",
        "combine@p0.2",
        "combine+bo4@p0.2",
        "mystery@p0.2",
    ]
    assert all(tuple(e) == results_json.ENTRY_KEYS for e in out["entries"])
    combine = out["entries"][1]
    assert combine["seeds"] == [0, 1] and combine["oracle"] is False and combine["preference"] == "bullets"
    assert combine["conversations_to_0_9"] == {"mean": 10.0, "per_seed": [10, None]}
    assert combine["seeds_reaching_0_9"] == 1
    assert combine["sessions_until_stable"] == {"mean": 13.0, "per_seed": [13, None], "recorded": 2}
    assert combine["fidelity_drop"] == {"mean": 0.04, "per_seed": [0.04, 0.04]}
    assert combine["fidelity_worst_drop"] == {"mean": 0.04, "per_seed": [0.04, 0.04]}
    assert combine["fidelity_unseen_drop"]["mean"] == 0.1 and combine["distinct_drop"]["mean"] == 0.2
    assert combine["final_score"] == 0.925 and combine["final_score_unseen"] == 0.9
    assert combine["served_before_update"] == 0.5 and combine["served_no_hint"] == 0.3
    assert combine["online_before_update"] == 0.5
    old = out["entries"][3]
    assert old["label"] == "mystery" and old["oracle"] is None and old["preference"] is None
    assert old["sessions_until_stable"] == {"mean": None, "per_seed": [None], "recorded": 0}
    assert old["fidelity_drop"]["mean"] is None and old["served_before_update"] is None
    assert out["base_rate"] == 0.3 and out["command"] == "bench" and out["target"] == 0.9


def test_summary_json_of_no_runs_and_the_writer(tmp_path):
    out = results_json.summary_json({"runs": []}, ROWS_META)
    assert out["entries"] == [] and all(g["best"] is None and g["met_by"] == [] for g in out["goals"])
    path = results_json.write_summary_json(out, tmp_path / "deep" / "learning_summary.json")
    assert json.loads(path.read_text()) == out
    with pytest.raises(ValueError):  # never NaN in the file
        results_json.write_summary_json({"x": float("nan")}, tmp_path / "nan.json")


# ------------------------------------------------------------------------------------------ the goals
LONG = [False] * 4 + [True] * 26


def test_goals_name_the_rows_that_meet_them_and_the_best_shortfall():
    runs = [
        new_run("combine", 0, conversations=(0, 10, 20, 25), first_ok=LONG),  # 0.9 after 20, stable at 23
        new_run("combine", 1, conversations=(0, 10, 20, 25), first_ok=LONG),
        new_run(
            "rl",
            0,
            conversations=(0, 10, 40, 50),
            first_ok=LONG * 2,
            fidelity=[1.0, 0.9, 0.9, 0.9],
            served_after_hint=None,
        ),
        new_run("rl", 1, rates=(0.3, 0.4, 0.5, 0.6), fidelity=[1.0, 0.9, 0.9, 0.9], served_after_hint=None),
        new_run("combine+bo4", 0, conversations=(0, 1, 2, 3), served_after_hint=0.9),  # oracle: left out
        new_run("combine", 0, noise=0.0, conversations=(0, 1, 2, 3)),  # another noise level: left out
    ]
    goals = {
        g["id"]: g for g in results_json.summary_json(report_of(runs, base_rate=0.5), ROWS_META)["goals"]
    }
    reach = goals["conversations_to_0_9"]
    assert reach["rows"] == ["combine@p0.2", "rl@p0.2"] and reach["met_by"] == ["combine@p0.2"]
    assert reach["best"] == {
        "name": "combine@p0.2",
        "label": "Combine",
        "value": 20.0,
        "threshold": 20,
        "miss": 0.0,
        "seeds_there": 2,
        "seeds": 2,
    }
    stable = goals["sessions_until_stable"]
    assert stable["met_by"] == [] and stable["best"]["value"] == 23.0 and stable["best"]["miss"] == 11.0
    fidelity = goals["fidelity_worst_drop"]  # the worst seed's worst point
    assert fidelity["met_by"] == ["combine@p0.2"] and fidelity["best"]["miss"] == -0.01
    distinct = goals["distinct_ratio"]  # no reference without the evaluation's answers per topic
    assert distinct["met_by"] == [] and distinct["best"] is None
    served = goals["served_before_update"]  # each row against its own base rate (its update-0 score, 0.3)
    assert served["met_by"] == ["combine@p0.2"] and served["best"]["value"] == 0.5
    assert served["best"]["threshold"] == 0.3 and served["best"]["miss"] == -0.2
    assert served["threshold"] == "the row's base rate"
    runs[0]["rates"][0] = runs[1]["rates"][0] = 0.5  # 0.5 is not above a base rate of 0.5
    goals = {g["id"]: g for g in results_json.summary_json(report_of(runs), ROWS_META)["goals"]}
    assert (
        goals["served_before_update"]["met_by"] == [] and goals["served_before_update"]["best"]["miss"] == 0.0
    )


def test_a_row_with_more_seeds_there_beats_a_faster_row_with_fewer():
    runs = [
        new_run("combine", 0, conversations=(0, 20, 30, 40)),
        new_run("combine", 1, conversations=(0, 20, 30, 40)),
        new_run("rl", 0, conversations=(0, 1, 2, 3)),
        new_run("rl", 1, rates=(0.3, 0.4, 0.5, 0.6)),
    ]
    out = results_json.summary_json(report_of(runs), ROWS_META)
    goal = out["goals"][0]
    assert goal["best"]["name"] == "combine@p0.2" and goal["best"]["miss"] == 10.0 and goal["met_by"] == []
    table = "\n".join(headline.goals_table(out))
    assert "| Combine: 30 (2/2 seeds) | 10 |" in table
    # the only row with a seed stable is RL, fast enough but with a seed that never got there
    assert "| none | RL: 7 (1/2 seeds) | 1 seed(s) never got there |" in table


# ------------------------------------------------------------------------------------ tables, README
def test_headline_and_readme_tables():
    runs = [
        new_run("combine+bo4", 0, served_after_hint=0.8),
        new_run("combine", 0),
        new_run("combine", 0, noise=0.0),
        make_run("rl", 0),  # old run: nothing recorded
    ]
    out = results_json.summary_json(report_of(runs), ROWS_META)
    table = headline.headline_table(out)
    assert len(table) == 2 + 4
    assert "| Combine | 0.2 | no | 10 (1/1) | 13 (1/1) | 0.040 | 0.200 | 0.50 |" in table
    assert "| RL | 0.2 | no | 10 (1/1) | - | - | - | - |" in table
    readme = headline.readme_table(out).splitlines()
    rows = [line.split(" | ")[0] for line in readme[4:]]
    assert rows == ["| Combine", "| RL", "| Combine + best-of-4 (upper bound)"]  # no oracle first
    assert headline.readme_table(out, noise=0.5).startswith("_No learning benchmark runs")


def test_update_readme_is_idempotent_and_leaves_a_readme_without_markers_alone(tmp_path, capsys):
    out = results_json.summary_json(report_of([new_run("combine", 0)]), ROWS_META)
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\nbefore\n{headline.README_START}\nold table\n{headline.README_END}\nafter\n")
    assert headline.update_readme(readme, out)
    once = readme.read_text()
    assert "old table" not in once and "| Combine | bullets | 0.30 → 1.00 | 10 (1/1) |" in once
    assert once.startswith("# x\n\nbefore\n") and once.endswith(f"{headline.README_END}\nafter\n")
    assert headline.update_readme(readme, out) and readme.read_text() == once
    for text in ("no markers here\n", f"{headline.README_END}\n{headline.README_START}\n"):
        readme.write_text(text)
        assert not headline.update_readme(readme, out) and readme.read_text() == text
        assert "markers" in capsys.readouterr().out


# ------------------------------------------------------------------------------- markdown and the plot
def test_summary_markdown_gains_the_headline_and_goals():
    runs = [new_run("combine", 0), new_run("combine", 1)]
    report = report_of(runs) | {
        "aggregate": {
            "combine@p0.2": summary.aggregate(runs) | {"row": "combine", "noise": 0.2, "seeds": [0, 1]}
        },
        "seconds": 2.0,
        "settings": {
            "batch_size": 2,
            "updates": 3,
            "learning_rate": 1e-3,
            "lora_r": 8,
            "temperature": 1.0,
            "max_conversations": 100,
            "eval_per_topic": 1,
        },
        "pretrain": {"parameters": 1, "metrics": {k: {"rate": 0.0} for k in ("bare", "hinted", "follow_up")}},
    }
    out = results_json.summary_json(report, ROWS_META)
    text = summary.summary_markdown(report, {"combine": "Combine"}, out)
    assert "## Headline" in text and "| Combine | 0.2 | no | 10 (2/2) | 13 (2/2) |" in text
    assert (
        "| worst fidelity drop of any served version ≤ 0.05 (the worst seed) | Combine | Combine: 0.040 | meets it |"
        in text
    )
    # one answer per topic: every distinct answer is distinct (reference 1.0); 0.3 at the end is far below it
    assert (
        "| distinct answers at the end ≥ 90% of sampling the preferred answers uniformly (the worst seed) | none | Combine: 0.300 | 0.600 |"
        in text
    )
    assert "## Headline" not in summary.summary_markdown(report, {"combine": "Combine"})


def test_served_curve_is_a_step_function_up_to_where_every_seed_got():
    runs = [make_run(seed=0), make_run(seed=1, rates=(0.3, 0.4, 0.5), conversations=(0, 4, 8))]
    curve = summary.served_curve(runs, list(range(12)))
    assert curve["x"] == list(range(9))  # seed 1 ended after 8 conversations
    assert curve["min"][:5] == [0.3] * 5 and curve["max"][3:6] == [0.3, 0.4, 0.6]
    assert curve["mean"][8] == pytest.approx((0.6 + 0.5) / 2)
    assert summary.served_curve(runs, []) is None
    assert summary.plot_limit(runs, ROWS_META) == 15  # the longest run; none reached 0.9 before it
    assert summary.plot_limit([make_run(conversations=(0, 50, 100, 400))], ROWS_META) == 120


def test_plot_draws_one_panel_per_noise(tmp_path):
    pytest.importorskip("matplotlib")
    runs = [new_run("combine", 0), new_run("combine+bo4", 0), new_run("combine", 0, noise=0.0)]
    path = tmp_path / "curve.png"
    summary.plot(report_of(runs), path, None, ROWS_META)
    assert path.stat().st_size > 0
    summary.plot(report_of([]), tmp_path / "none.png")
    assert not (tmp_path / "none.png").exists()


def test_distinct_reference_is_uniform_sampling_of_the_preferred_answers():
    """K preferred answers per topic, n answers sampled: E[distinct] / n = K (1 - (1 - 1/K)^n) / n (bulleted:
    K = 40 orders of 1-3 of 4 facts; brief: 16 one-fact answers in 4 styles; both: 4)."""
    assert results_json.distinct_reference("bullets", 8) == pytest.approx(40 * (1 - (39 / 40) ** 8) / 8)
    assert results_json.distinct_reference("brief", 8) == pytest.approx(16 * (1 - (15 / 16) ** 8) / 8)
    assert results_json.distinct_reference("bullets+brief", 8) == pytest.approx(4 * (1 - 0.75**8) / 8)
    assert results_json.distinct_reference("bullets", 1) == pytest.approx(1.0)
    runs = [new_run("combine", 0, distinct=[0.9, 0.9, 0.9, 0.825]), new_run("combine", 1)]
    report = report_of(runs) | {"settings": {"updates": 3, "eval_per_topic": 8}}
    entry = results_json.summary_json(report, ROWS_META)["entries"][0]
    assert entry["distinct_reference"] == round(results_json.distinct_reference("bullets", 8), 3)
    assert entry["distinct_ratio"]["per_seed"] == [
        0.9,
        round(0.3 / results_json.distinct_reference("bullets", 8), 3),
    ]
