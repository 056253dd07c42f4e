"""run_all.py's exit status and its smoke plan (the smoke run itself is `make bench-smoke`, in CI).

The failing stages here are real scripts that crash or write nothing, run by the real run_all.py on a copy of
benchmarks/ in which they replace a stage script.
"""

import argparse
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
