"""SIGTERM while a checkpoint is being written (its hidden staging folder exists, or a checkpoint folder without
its last file ``trainer_state.json``):
the run still ends with a whole checkpoint of its last update, and the restart serves that version.

The real ``app.py`` on ``recipes/tiny_simulated.yaml`` in a subprocess, every update checkpointed and published;
the test watches the run folder and sends SIGTERM the moment it sees a checkpoint being written (or, if
the writes are too quick to catch, at the next update: then it tests an ordinary stop).
"""

from __future__ import annotations

import json
import signal
import time

import pytest

from tests.test_resume import _app, _query, _wait_for


def _being_written(run) -> bool:
    partial = any(p.is_dir() and not (p / "trainer_state.json").exists() for p in run.glob("checkpoint-*"))
    return partial or any(run.glob(".checkpoint-*.partial"))


@pytest.mark.slow
def test_sigterm_during_a_checkpoint_leaves_a_whole_one_and_the_restart_serves_it(tmp_path):
    run = tmp_path / "run"
    proc = _app(run, "--max_steps", "1000", "--adapter_history", "3")
    _wait_for(proc, lambda: (run / "checkpoint-1" / "trainer_state.json").exists())
    deadline, caught = time.monotonic() + 120, False
    while time.monotonic() < deadline and proc.poll() is None:
        if _being_written(run):
            caught = True
            break
        time.sleep(0.001)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    stopped_at = json.loads(out.strip().splitlines()[-1])["policy_version"]
    assert not _being_written(run), "a half-written checkpoint was left behind"
    assert (run / f"checkpoint-{stopped_at}" / "trainer_state.json").exists()
    kept = sorted(int(p.name.split("-")[1]) for p in run.glob("checkpoint-*"))
    assert len(kept) <= 3 + 1 and kept[-1] == stopped_at, (kept, caught)  # + checkpoint-0 is never pruned

    last_turn = _query(run / "openclaw.sqlite", "SELECT MAX(id) FROM turns")[0][0]
    again = _app(run, "--max_steps", str(stopped_at + 1))
    out, err = again.communicate(timeout=600)
    assert again.returncode == 0, err[-3000:]
    first_line = next(line for line in err.splitlines() if " run " in line)
    assert f"from checkpoint-{stopped_at}: policy version {stopped_at}," in first_line, (first_line, caught)
    sql = f"SELECT MIN(policy_version) FROM turns WHERE id > {last_turn}"
    assert _query(run / "openclaw.sqlite", sql)[0][0] >= stopped_at  # served from its first request
