"""The learning benchmark's closed loop, shortened: the toy model shipped with the package, one seed, two
updates of two samples, through the real server, collector, scorer and trainer.

It asserts that the pipeline produced updates (policy version advanced, samples consumed, the metric was
computed at every update), never a learning threshold: that is what ``benchmarks/learning/run.py`` measures.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "learning"


def _load(name: str):
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(f"learning_bench_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One torch thread, as the benchmark uses: on a shared 2-core machine it is several times faster."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def toy_model(toy_demo_model):
    return toy_demo_model  # the benchmark's default model (pretrain.toy_model()): nothing is pre-trained


def test_toy_world_chats_render_and_match_the_user():
    from openclaw_trl.toy import world

    user = world.make_user("bullets")
    for style in world.STYLES:
        answer = world.render_answer(style.name, "apples", __import__("random").Random(0))
        assert style.matches(answer) and sum(s.matches(answer) for s in world.STYLES) == 1
        assert user.satisfied_by(answer) == (style.name == "bullets")
    chats = world.training_chats(200, seed=1)
    assert chats == world.training_chats(200, seed=1)
    hinted = [c for c in chats if "[user's hint / instruction]\n" in c[0]["content"]]
    assert hinted and all(c[-1]["role"] == "assistant" for c in chats)
    off_topic = [c for c in chats if any(m["content"] == world.OFF_TOPIC_ANSWER for m in c)]
    assert off_topic and not any(s.matches(world.OFF_TOPIC_ANSWER) for s in world.STYLES)  # no style's hit


@pytest.mark.parametrize(
    ("row", "noise"),
    [
        ("combine", 0.0),
        ("combine+feedback", 0.0),
        ("combine+baseline", 0.5),
        ("combine+bo4+memory-both", 0.2),
    ],
)
def test_closed_loop_produces_updates(toy_model, tmp_path, row, noise):
    run = _load("run")
    settings = run.BenchSettings(
        updates=2, batch_size=2, eval_per_topic=1, max_tokens=12, sample_timeout_s=120
    )
    result = run.run_one(toy_model, row, 0, settings, tmp_path / "run", noise=noise)
    spec = run.ROWS[row]
    updates = 2 * spec.update_factor
    assert result.policy_version == updates
    assert result.samples_used == 2 * updates
    assert (result.preference, result.oracle, result.label) == (spec.preference, False, spec.label)
    curves = (result.rates, result.rates_unseen, result.fidelity, result.fidelity_unseen, result.distinct)
    assert all(len(c) == updates + 1 and all(0.0 <= x <= 1.0 for x in c) for c in curves)
    # the user may finish one conversation after the last evaluation: first_ok counts every conversation
    assert len(result.first_ok) >= result.conversations[-1] >= 1 and result.turns[-1] >= 2
    if spec.best_of == 1:
        assert result.served_rates == result.rates  # one candidate per turn: served = evaluated
        assert result.served_after_hint is None
    else:
        assert len(result.served_rates) == updates + 1
        assert result.served_after_hint is None or 0.0 <= result.served_after_hint <= 1.0
    assert len(result.trainer_metrics) == updates and all("reward" in m for m in result.trainer_metrics)
    if row == "combine+baseline":
        assert all("rl/baseline_mean" in m for m in result.trainer_metrics)
    cache = run.RunCache(tmp_path / "cache", toy_model, run.row_key(settings))
    cache.put(result)
    assert cache.get(row, noise, 0) == dataclasses.asdict(result)
    assert (
        run.RunCache(tmp_path / "cache", toy_model, run.row_key(run.BenchSettings())).get(row, noise, 0)
        is None
    )
    report = run.build_report(cache.runs(list(run.ROWS)), settings, ["combine+bo4: not in this checkout"])
    report |= {
        "quick": True,
        "pretrain": {"parameters": 1, "metrics": {k: {"rate": 0.0} for k in ("bare", "hinted", "follow_up")}},
    }
    summary = run.summary_markdown(report, run.LABELS)
    assert f"| {run.LABELS[row]} | 1 |" in summary and f"## Judge noise p = {noise:g}" in summary
    assert "Not run: combine+bo4" in summary
    run.plot(report, tmp_path / "curve.png", run.LABELS)
    assert (tmp_path / "curve.png").stat().st_size > 0


def test_the_plan_runs_p0_first_and_skips_what_cannot_run():
    run = _load("run")
    runs, skipped = run.plan(["combine+feedback", "combine+bo4+memory", "rl"], [0.0, 0.2], [3, 4])
    expected = [("combine+feedback", 0.0, 3)] + [
        (row, noise, seed) for noise in (0.0, 0.2) for seed in (3, 4) for row in ("combine+bo4+memory", "rl")
    ]
    expected.sort(key=lambda r: (r[1], r[2]))
    assert runs == expected
    assert skipped == ["combine+feedback at p > 0: the feedback backend has no rule judge to add noise to"]


def test_a_lockstep_run_is_a_function_of_its_seed(toy_model, tmp_path):
    """Two lockstep runs of one seed (seeded requests, turns judged in step, each batch taken once the user
    paused) give the same curves and the same updates; a live run is made under another cache key."""
    run = _load("run")
    settings = run.BenchSettings(
        updates=3, batch_size=2, eval_per_topic=1, max_tokens=12, sample_timeout_s=120
    )
    first, second = (
        run.run_one(toy_model, "combine+bo4+memory", 1, settings, tmp_path / f"run{i}", noise=0.2)
        for i in (1, 2)
    )
    for name in ("rates", "fidelity", "distinct", "served_rates", "conversations", "turns", "first_ok"):
        assert getattr(first, name) == getattr(second, name), name
    losses = [[m["loss"] for m in r.trainer_metrics] for r in (first, second)]
    assert losses[0] == losses[1] and len(losses[0]) == 6
    live = dataclasses.replace(settings, schedule="live")
    assert run.row_key(live)("combine") != run.row_key(settings)("combine")
