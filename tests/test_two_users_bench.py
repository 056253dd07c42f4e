"""The two-user learning benchmark (``benchmarks/learning/two_users.py``), shortened: ``--smoke`` runs two users
of ``recipes/toy_two_users.yaml`` on the tiny toy model, one update of two samples each, through the real
multi-user run (one server, each user's key, one training thread per user), and writes its report. It checks
the report's shape and the acceptance rule, never a learning threshold (that is what the full run measures).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "learning"


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location("learning_bench_two_users", BENCH / "two_users.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def one_thread():
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_smoke_runs_both_users_and_writes_the_report(bench, tmp_path, one_thread, monkeypatch):
    monkeypatch.delenv("ALICE_KEY", raising=False)  # the benchmark makes up keys when none are set
    monkeypatch.setenv("BOB_KEY", "bob-key-from-the-environment")
    assert bench.main(["--smoke", "--out", str(tmp_path), "--work-dir", str(tmp_path / "work")]) == 0
    report = json.loads((tmp_path / "two_users_smoke.json").read_text())
    assert report["smoke"] and report["rule"] == {"own_min": 0.9, "leak_tolerance": 0.15}
    (run,) = report["runs"]
    assert sorted(run["update_order"]) == ["alice", "bob"]
    assert {n: u["preference"] for n, u in run["users"].items()} == {"alice": "bullets", "bob": "brief"}
    assert {n: u["other_preference"] for n, u in run["users"].items()} == {"alice": "brief", "bob": "bullets"}
    for name, user in run["users"].items():
        assert user["versions"] == [0, 1] and user["policy_version"] == 1
        assert len(user["own_rates"]) == len(user["other_rates"]) == len(user["fidelity"]) == 2
        assert all(0.0 <= r <= 1.0 for r in user["own_rates"] + user["other_rates"])
        assert user["samples_used"] >= 2  # (a batch can fill before its first conversation ends)
        for which in ("last", "kept"):
            assert set(run["final"][which][name]) >= {"bullets", "brief", "fidelity"}
        assert run["acceptance_kept"][name]["pass"] in (True, False)
    assert set(run["final"]["base"]) == {"bullets", "brief", "fidelity"}
    assert run["seconds"] > 0 and "update order" in (tmp_path / "two_users_smoke.md").read_text()
    # each user's turns went to their own store under their own folder
    for name in ("alice", "bob"):
        assert (tmp_path / "work" / "seed0" / "users" / name / "openclaw.sqlite").exists()


def test_acceptance_rule(bench):
    prefs = {"alice": "bullets", "bob": "brief"}
    base = {"bullets": 0.36, "brief": 0.38}
    good = {"alice": {"bullets": 0.95, "brief": 0.30}, "bob": {"brief": 0.9, "bullets": 0.50}}
    verdict = bench.acceptance(good, base, prefs)
    assert verdict["pass"] and verdict["alice"]["other_shift"] == pytest.approx(-0.08)
    leak = {"alice": {"bullets": 0.95, "brief": 0.60}, "bob": {"brief": 0.95, "bullets": 0.36}}
    verdict = bench.acceptance(leak, base, prefs)
    assert not verdict["pass"] and not verdict["alice"]["no_leak"] and verdict["bob"]["pass"]
    weak = {"alice": {"bullets": 0.89, "brief": 0.38}, "bob": {"brief": 0.95, "bullets": 0.20}}
    verdict = bench.acceptance(weak, base, prefs)
    assert not verdict["alice"]["own_ok"] and not verdict["bob"]["no_leak"]  # a fall counts too


def test_the_version_kept_is_the_best_then_the_most_faithful_then_the_earliest(bench):
    run = bench.RunResult(row="alice", method="combine", backend="callable", seed=0)
    run.rates, run.fidelity = [0.3, 0.9, 1.0, 1.0, 1.0], [0.9, 0.9, 0.5, 0.8, 0.8]
    assert bench.kept_index(bench.UserCurve(run, "brief")) == 3


def test_bad_arguments_are_refused(bench, capsys):
    with pytest.raises(SystemExit):
        bench.main(["--updates", "0"])
    assert "at least 1" in capsys.readouterr().err


def test_append_keeps_other_seeds_and_refuses_other_settings(bench, tmp_path):
    report = {"settings": {"updates": 48}, "model": "m", "smoke": False, "rule": {"own_min": 0.9}}
    path = tmp_path / "two_users.json"
    assert bench.earlier_runs(path, report, [0]) == ([], [])  # nothing there yet
    path.write_text(json.dumps(report | {"runs": [{"seed": 0}, {"seed": 1}], "commands": ["first"]}))
    assert bench.earlier_runs(path, report, [1]) == ([{"seed": 0}], ["first"])  # a seed run again replaces
    with pytest.raises(ValueError, match="another settings"):
        bench.earlier_runs(path, report | {"settings": {"updates": 32}}, [2])
