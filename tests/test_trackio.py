"""``report_to: trackio``: a tiny two-update run logs its metrics to a local Trackio database, with every
network route closed (no Hub), and they read back through Trackio's own API."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
DEAD_PROXY = "http://127.0.0.1:9"  # nothing listens there: any request that leaves the machine fails
READ_BACK = """
import json, sys
from trackio.sqlite_storage import SQLiteStorage
project, run = sys.argv[1:3]
print(json.dumps({"runs": SQLiteStorage.get_runs(project), "logs": SQLiteStorage.get_logs(project, run)}))
"""


@pytest.mark.slow
def test_report_to_trackio_logs_metrics_locally_offline(tmp_path):
    pytest.importorskip("trackio", reason="trackio is in the dev extra: pip install trackio")
    env = {
        **os.environ,
        "TRACKIO_DIR": str(tmp_path / "trackio"),
        "HF_HUB_OFFLINE": "1",
        "GRADIO_ANALYTICS_ENABLED": "False",
        "HTTP_PROXY": DEAD_PROXY,
        "HTTPS_PROXY": DEAD_PROXY,
        "NO_PROXY": "127.0.0.1,localhost",  # the simulated user talks to our own server
    }
    cmd = [
        sys.executable, "app.py", "--config", "recipes/tiny_simulated.yaml", "--max_steps", "2",
        "--output_dir", str(tmp_path / "tiny-run"), "--report_to", "trackio",
    ]  # fmt: skip
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert (tmp_path / "trackio" / "openclaw-trl.db").exists()  # project openclaw-trl, in $TRACKIO_DIR
    read = subprocess.run(
        [sys.executable, "-c", READ_BACK, "openclaw-trl", "tiny-run"], env=env, capture_output=True, text=True
    )
    assert read.returncode == 0, read.stderr[-2000:]
    found = json.loads(read.stdout.strip().splitlines()[-1])
    assert found["runs"] == ["tiny-run"]  # run_name defaults to the output_dir's name
    updates = [log for log in found["logs"] if "train/loss" in log]
    assert [log["train/global_step"] for log in updates] == [1, 2]
    assert [log["train/policy_version"] for log in updates] == [1.0, 2.0]
    assert all("train/reward" in log and "train/opd/hint_accept_rate" in log for log in updates)


def test_trackio_is_refused_when_not_installed(tmp_path, monkeypatch):
    from openclaw_trl.config import OpenClawConfig

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "trackio" else real(name, *a)
    )
    with pytest.raises(ValueError, match="pip install trackio"):
        OpenClawConfig(output_dir=str(tmp_path / "run"), report_to="trackio")


def test_tracker_project_and_run_name_defaults(tmp_path):
    from openclaw_trl.config import OpenClawConfig

    config = OpenClawConfig(output_dir=str(tmp_path / "my-run"), report_to="none")
    assert (config.project, config.run_name) == ("openclaw-trl", "my-run")
    named = OpenClawConfig(output_dir=str(tmp_path / "x"), report_to="none", run_name="mine", project="p")
    assert (named.project, named.run_name) == ("p", "mine")
