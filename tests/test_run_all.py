"""run_all.py's exit status and its smoke plan (the smoke run itself is `make bench-smoke`, in CI).

The failing stages here are real scripts that crash or write nothing, run by the real run_all.py on a copy of
benchmarks/ in which they replace a stage script.
"""

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import run_all  # noqa: E402

SIZE_FLAGS = {"--quick", "--full", "--repeats", "--rounds", "--turns", "--steps", "--updates", "--sessions"}


def _plan(tmp_path, **kw) -> dict:
    args = argparse.Namespace(
        gpu=False, device="cuda", tiny=False, quick=False, full=False, no_vllm=False, smoke=False
    )
    for key, value in kw.items():
        setattr(args, key, value)
    return {name: (cmd, out, timeout) for name, cmd, out, timeout in run_all.plan(args, tmp_path)}


@pytest.mark.parametrize("mode", [{}, {"gpu": True, "device": "cpu", "tiny": True}], ids=["cpu", "gpu"])
def test_smoke_runs_every_stage_with_smoke_in_place_of_its_sizes(tmp_path, mode):
    real = _plan(tmp_path, quick=not mode, **mode)
    smoke = _plan(tmp_path, smoke=True, **mode)
    assert set(smoke) == set(real)
    for name, (cmd, out, timeout) in smoke.items():
        if cmd is None:
            assert real[name][0] is None and out == real[name][1]  # skipped alike, with its reason
            continue
        assert cmd.count("--smoke") == 1 and not SIZE_FLAGS & set(cmd), name
        assert cmd[cmd.index("--out") + 1] == real[name][0][real[name][0].index("--out") + 1]
        assert 0 < timeout <= run_all.SMOKE_TIMEOUT_S
        assert cmd[:2] == real[name][0][:2]  # the same interpreter and script


def test_smoke_refuses_quick_and_full():
    for flag in ("--quick", "--full"):
        with pytest.raises(SystemExit) as exc:
            run_all.main(["--smoke", flag])
        assert exc.value.code == 2


def test_cpu_plan_names_why_the_vllm_stages_are_skipped(tmp_path):
    stages = _plan(tmp_path, quick=True, no_vllm=True)
    assert stages["engine_vllm"][0] is None and stages["engine_vllm"][1] == "--no-vllm"
    assert stages["vllm_server"][0] is None


def test_exit_status_counts_failed_stages_not_skipped_ones(capsys):
    assert run_all.exit_status({"stages": {"engine": {"results": []}}, "skipped": {"qlora": "no GPU"}}) == 0
    assert run_all.exit_status({"stages": {"engine": {}, "trainer": None}, "skipped": {}}) == 1
    assert "FAILED: trainer" in capsys.readouterr().err


BROKEN = 'raise RuntimeError("this stage is broken on purpose")\n'
SILENT = "import sys\nprint('finished without writing its report')\n"
WORKING = """import json, sys
from pathlib import Path
Path(sys.argv[sys.argv.index("--out") + 1]).write_text(json.dumps({"rows": []}))
"""


def _run_all_on(tmp_path, scripts: dict[str, str], *argv: str) -> subprocess.CompletedProcess:
    """The real run_all.py on a copy of benchmarks/ where ``scripts`` replace stage scripts."""
    bench = tmp_path / "benchmarks"
    shutil.copytree(ROOT / "benchmarks", bench, ignore=shutil.ignore_patterns("results", "__pycache__"))
    for name, text in scripts.items():
        (bench / name).write_text(text)
    return subprocess.run(
        [sys.executable, str(bench / "run_all.py"), *argv, "--results-dir", str(tmp_path / "results")],
        capture_output=True,
        text=True,
        timeout=240,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": str(tmp_path)},
    )


def test_a_broken_stage_makes_run_all_exit_non_zero(tmp_path):
    proc = _run_all_on(
        tmp_path,
        {"priority_bench.py": BROKEN, "best_of_n_bench.py": SILENT, "judge_bench.py": WORKING},
        "--smoke",
        "--no-vllm",
        "--only",
        "priority,best_of_n,judge",
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "--- priority FAILED (exit code 1)" in proc.stdout
    assert "this stage is broken on purpose" in proc.stdout  # its log tail is shown
    assert "--- best_of_n FAILED (exit code 0, but its report" in proc.stdout  # no report: not finished
    assert "--- judge done" in proc.stdout
    assert "run_all: FAILED: priority, best_of_n" in proc.stderr


def test_run_all_exits_zero_when_every_stage_that_could_run_finished(tmp_path):
    proc = _run_all_on(
        tmp_path, {"judge_bench.py": WORKING}, "--smoke", "--no-vllm", "--only", "judge,engine_vllm"
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "=== engine_vllm: skipped, --no-vllm" in proc.stdout  # skipped with a reason: not a failure
    assert "--- judge done" in proc.stdout


def test_timeout_factor_must_be_positive():
    with pytest.raises(SystemExit) as exc:
        run_all.main(["--timeout-factor", "0"])
    assert exc.value.code == 2


HANGING = """import subprocess, sys, time
from pathlib import Path
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
Path(__file__).with_name("child.pid").write_text(str(child.pid))
time.sleep(120)
"""


def test_a_stage_past_its_timeout_fails_and_its_children_end_with_it(tmp_path):
    proc = _run_all_on(
        tmp_path,
        {"judge_bench.py": HANGING},
        *("--smoke", "--no-vllm", "--only", "judge", "--timeout-factor", "0.02"),
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "--- judge FAILED (timed out after 6s)" in proc.stdout  # 300 s x 0.02
    child = int((tmp_path / "benchmarks" / "child.pid").read_text())
    assert not Path(f"/proc/{child}").exists() or "zombie" in Path(f"/proc/{child}/status").read_text()


# ------------------------------------------------------------------------------------ the multi_user stage
def test_multi_user_stage_smoke_runs_and_is_summarized(tmp_path):
    out = tmp_path / "multi_user.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "multi_user_bench.py"), "--smoke", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=400,
        env={
            "PATH": "/usr/bin:/bin",
            "PYTHONPATH": str(ROOT),
            "HOME": str(tmp_path),
            "OPENCLAW_BENCH_MODELS": str(tmp_path / "models"),
            "HF_HUB_OFFLINE": "1",
        },
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())
    (result,) = report["results"]
    updates, serving = result["updates"], result["serving"]
    k = updates["batches_per_phase"]
    for order in updates["shared_orders"]:  # every user trained its k batches in each shared phase
        assert sorted(order) == sorted(f"u{i}" for i in range(updates["users"]) for _ in range(k))
    assert len(updates["alone_update_s"]) == len(updates["shared_update_s"]) == updates["rounds"] * k
    assert serving["cases"]["4 users / 2 slots"]["refills"] == serving["turns"]  # LRU round-robin: every turn
    assert serving["cases"]["4 users / 4 slots"]["refills"] == 0  # all resident after the warm-up
    memory = updates["memory"]
    assert 2 <= memory["adam_bytes"] / memory["lora_param_bytes"] < 2.01  # AdamW: two moments (+ its steps)
    assert memory["engine_cpu_copy_bytes"] == memory["engine_slot_bytes"] == memory["lora_param_bytes"]
    rows = [r for r in run_all.summarize({"multi_user": report}, check_targets=False)]
    assert len(rows) == 4 and all(r["model"] == "tiny" for r in rows)
    assert [r["result"] for r in rows] == ["not checked", "not checked", "not checked", "info"]


def test_multi_user_bench_refuses_bad_sizes_and_models():
    import multi_user_bench

    for argv in (
        ["--users", "1"],
        ["--rounds", "0"],
        ["--turns", "-3"],
        ["--models", "gpt9"],
        ["--models", ","],
    ):
        with pytest.raises(SystemExit) as exc:
            multi_user_bench.main(argv)
        assert exc.value.code == 2, argv


def test_multi_user_fairness_and_p95():
    import _multi_user_train as mt
    import multi_user_bench

    fed = {"a": 2, "b": 2}
    assert mt.max_streak(["a", "b", "a", "b"], fed) == 1
    assert mt.max_streak(["a", "a", "b", "b"], fed) == 2  # a ran twice while b waited
    assert mt.max_streak(["a", "b", "b", "a"], fed) == 2
    assert mt.max_streak(["a", "a"], {"a": 2}) == 0  # nobody else was waiting: no unfairness
    assert mt.max_streak([], fed) == 0
    assert multi_user_bench.p95([1.0]) == 1.0
    assert multi_user_bench.p95([float(x) for x in range(101)]) == 95.0
