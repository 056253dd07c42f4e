"""Continue by default: a killed or stopped run resumes from its latest checkpoint; a fresh start keeps the old run.

The restart tests run the real ``app.py`` on ``recipes/tiny_simulated.yaml`` in a subprocess and read the
run's SQLite store and checkpoints afterwards.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from openclaw_trl.config import OpenClawConfig
from openclaw_trl.records import TrainingSample
from openclaw_trl.resume import checkpoint_to_resume, start_point
from openclaw_trl.store import Store
from tests.helpers import wait_until

ROOT = Path(__file__).parent.parent
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False", "PYTHONPATH": str(ROOT)}


def _app(output_dir: Path, *extra: str) -> subprocess.Popen:
    cmd = [
        sys.executable,
        "app.py",
        "--config",
        "recipes/tiny_simulated.yaml",
        "--output_dir",
        str(output_dir),
        "--json-summary",
    ]
    return subprocess.Popen(
        [*cmd, *extra], cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _wait_for(proc: subprocess.Popen, ready, timeout: float = 300.0) -> None:
    def still_running_and_ready():
        if proc.poll() is not None:
            raise AssertionError(f"the run ended before it was stopped: {proc.stderr.read()[-3000:]}")
        return ready()

    try:
        wait_until(still_running_and_ready, timeout, "the run", interval=0.2)
    except AssertionError:
        proc.kill()
        raise


def _query(store: Path, sql: str) -> list[tuple]:
    with sqlite3.connect(store) as conn:
        return conn.execute(sql).fetchall()


@pytest.mark.slow
def test_sigkill_then_rerun_continues_from_the_latest_checkpoint(tmp_path):
    run = tmp_path / "run"
    args = ("--max_steps", "8")  # every update is checkpointed (adapter_history)
    first = _app(run, *args)
    _wait_for(first, lambda: (run / "checkpoint-4" / "trainer_state.json").exists())
    first.send_signal(signal.SIGKILL)
    first.wait()
    store = run / "openclaw.sqlite"
    last_turn_before = _query(store, "SELECT MAX(id) FROM turns")[0][0]

    second = _app(run, *args)
    out, err = second.communicate(timeout=600)
    assert second.returncode == 0, err[-3000:]
    first_line = next(line for line in err.splitlines() if " run " in line)  # the first log line
    assert f"resuming run {run} from checkpoint-" in first_line, first_line
    resumed = int(first_line.split("policy version ")[1].split(",")[0])
    assert resumed >= 4 and "optimizer and scheduler restored" in first_line
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["policy_version"] == 8
    # The rerun served the resumed adapter from its first request: its turns carry that version or later.
    versions = _query(store, f"SELECT MIN(policy_version) FROM turns WHERE id > {last_turn_before}")[0][0]
    assert versions >= resumed
    # Each update step consumed exactly one batch, steps 1..8, and no sample twice.
    per_step = Counter(step for (step,) in _query(store, "SELECT consumed_step FROM samples"))
    per_step.pop(None, None)
    assert per_step == {step: 4 for step in range(1, 9)}
    state = json.loads((run / "checkpoint-8" / "trainer_state.json").read_text())
    assert (
        state["global_step"] == 8 and state["log_history"][0]["step"] == 1
    )  # history continued, not restarted
    # Totals across both processes, in the run info and so in the model card.
    info = json.loads((run / "openclaw_run.json").read_text())
    assert info["num_updates"] == 8 and info["samples_used"] == 32 and info["turns_used"] == 32
    from openclaw_trl.hub import build_model_card

    card = str(build_model_card(kind="adapter", repo_id="me/x", base_model="tiny", run_info=info))
    assert "- **Optimizer updates:** 8" in card and "- **Training samples used:** 32" in card


@pytest.mark.slow
def test_sigterm_saves_a_checkpoint_with_optimizer_state(tmp_path):
    run = tmp_path / "run"
    proc = _app(run, "--max_steps", "1000", "--adapter_history", "0", "--save_steps", "1000")
    store = run / "openclaw.sqlite"

    def trained_twice():
        try:
            return (_query(store, "SELECT MAX(consumed_step) FROM samples")[0][0] or 0) >= 2
        except sqlite3.Error:
            return False

    _wait_for(proc, trained_twice)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    step = json.loads(out.strip().splitlines()[-1])["policy_version"]
    checkpoint = run / f"checkpoint-{step}"
    assert step >= 2 and "stopping after update" in err
    for name in (
        "adapter_model.safetensors",
        "optimizer.pt",
        "scheduler.pt",
        "rng_state.pth",
        "trainer_state.json",
    ):
        assert (checkpoint / name).exists(), name
    assert json.loads((checkpoint / "trainer_state.json").read_text())["global_step"] == step
    # The store agrees: nothing consumed after the checkpoint's step.
    assert _query(store, "SELECT MAX(consumed_step) FROM samples")[0][0] == step

    # A deliberate fresh start on the same output_dir keeps the stopped run, whole, in previous-<time>/.
    fresh = _app(run, "--max_steps", "1", "--fresh_start", "true")
    out, err = fresh.communicate(timeout=300)
    assert fresh.returncode == 0, err[-3000:]
    assert f"new run in {run} (older data moved to {run}/previous-" in err
    (previous,) = run.glob("previous-*")
    assert (previous / checkpoint.name / "optimizer.pt").exists() and (previous / "openclaw.sqlite").exists()
    assert json.loads(out.strip().splitlines()[-1])["policy_version"] == 1
    assert _query(store, "SELECT DISTINCT consumed_step FROM samples WHERE consumed_step IS NOT NULL") == [
        (1,)
    ]


def _sample(turn_id: int) -> TrainingSample:
    return TrainingSample(
        turn_id=turn_id,
        prompt_ids=[1, 2],
        completion_ids=[3],
        sampling_logprobs=[-1.0],
        temperature=1.0,
        policy_version=0,
        reward=1.0,
        has_hint=False,
    )


def _checkpoint(run: Path, step: int, complete: bool = True) -> Path:
    path = run / f"checkpoint-{step}"
    path.mkdir(parents=True)
    (path / "optimizer.pt").write_bytes(b"")
    if complete:
        (path / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    return path


def _consumed(store: Store) -> dict[int, int | None]:
    return {s.turn_id: s.consumed_step for s in store.queries.iter_samples(include_private=True)}


def test_start_point_requeues_later_steps_and_moves_incomplete_checkpoints(tmp_path):
    run = tmp_path / "run"
    _checkpoint(run, 2), _checkpoint(run, 4), _checkpoint(run, 6, complete=False)
    store = Store(run / "openclaw.sqlite")
    ids = [store.queue.add_sample(_sample(t)) for t in range(6)]
    for step, pair in enumerate([ids[0:2], ids[2:4], ids[4:6]], start=3):
        store.queue.mark_consumed(pair, step)
    config = OpenClawConfig(output_dir=str(run), report_to="none")

    start = start_point(config, store)

    assert (start.checkpoint, start.step, start.optimizer, start.requeued) == (
        str(run / "checkpoint-4"),
        4,
        True,
        2,
    )
    assert _consumed(store) == {0: 3, 1: 3, 2: 4, 3: 4, 4: None, 5: None}
    # the half-written checkpoint-6 would be mixed up with the new checkpoint-6: it is moved, not deleted
    assert not (run / "checkpoint-6").exists() and (Path(start.moved_to) / "checkpoint-6").is_dir()
    assert start.describe() == (
        f"resuming run {run} from checkpoint-4: policy version 4, optimizer and scheduler restored, "
        f"2 samples re-queued (older data moved to {start.moved_to})"
    )


def test_explicit_resume_from_checkpoint_wins_and_is_checked(tmp_path):
    run = tmp_path / "run"
    older = _checkpoint(run, 2)
    _checkpoint(run, 4)
    assert checkpoint_to_resume(OpenClawConfig(output_dir=str(run), report_to="none")) == str(
        run / "checkpoint-4"
    )
    explicit = OpenClawConfig(output_dir=str(run), report_to="none", resume_from_checkpoint=str(older))
    assert checkpoint_to_resume(explicit) == str(older)
    missing = OpenClawConfig(output_dir=str(run), report_to="none", resume_from_checkpoint=str(run / "nope"))
    with pytest.raises(ValueError, match="not a checkpoint folder"):
        checkpoint_to_resume(missing)
    with pytest.raises(ValueError, match="set only one"):
        OpenClawConfig(
            output_dir=str(run), report_to="none", fresh_start=True, resume_from_checkpoint=str(older)
        )


def test_fresh_start_moves_the_old_run_and_store_aside(tmp_path):
    from openclaw_trl.runtime import prepare_start

    run, outside = tmp_path / "run", tmp_path / "elsewhere" / "store.sqlite"
    _checkpoint(run, 4)
    (run / "openclaw_run.json").write_text("{}")
    old = Store(outside)
    old.queue.mark_consumed([old.queue.add_sample(_sample(1))], 4)
    old.close()
    config = OpenClawConfig(output_dir=str(run), report_to="none", fresh_start=True, store_path=str(outside))

    store, start = prepare_start(config)

    assert (start.checkpoint, start.step, start.requeued) == (None, 0, 0)
    moved = Path(start.moved_to)
    assert moved.parent == run and moved.name.startswith("previous-")
    assert sorted(p.name for p in run.iterdir()) == [moved.name]
    assert {"checkpoint-4", "openclaw_run.json", "store.sqlite"} <= {p.name for p in moved.iterdir()}
    assert store.queries.counts()["samples"] == 0  # a new, empty store
    assert start.describe() == f"new run in {run} (older data moved to {moved})"
    with Store(moved / "store.sqlite") as kept:
        assert _consumed(kept) == {1: 4}
