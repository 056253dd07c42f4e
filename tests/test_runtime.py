"""The wiring end to end: accelerate launch of the simulated recipe, and the replay source."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent


@pytest.mark.slow
def test_accelerate_launch_tiny_simulated(tmp_path):
    accelerate = shutil.which("accelerate", path=str(Path(sys.executable).parent)) or "accelerate"
    cmd = [
        accelerate, "launch", "--cpu", "--num_processes", "1", "--num_machines", "1", "--mixed_precision", "no",
        "--dynamo_backend", "no", "app.py", "--config", "recipes/tiny_simulated.yaml",
        "--max_steps", "2", "--output_dir", str(tmp_path / "run"), "--json-summary",
    ]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False"}
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["policy_version"] == 2
    assert summary["metrics"]["policy_version"] == 2 and "reward" in summary["metrics"]
    run = tmp_path / "run"
    assert (run / "adapter_model.safetensors").exists() and (run / "adapter_config.json").exists()
    info = json.loads((run / "openclaw_run.json").read_text())
    assert info["num_updates"] == 2 and info["samples_used"] == 8 and info["method"] == "combine"
    assert "judge_callable: openclaw_trl.simulation:rule_judge" in info["recipe_yaml"]


def _conversation(i: int, satisfied: bool) -> dict:
    reply = "- apples are red\n- apples are sweet" if satisfied else "Apples are a fruit."
    messages = [
        {"role": "user", "content": "Tell me about apples."},
        {"role": "assistant", "content": reply},
        {"role": "user", "content": "Thanks, that's what I wanted. Next question." if satisfied else
         "No, not like that. Please answer as a short bulleted list, each line starting with '- '."},
    ]  # fmt: skip
    if not satisfied:
        messages += [
            {"role": "assistant", "content": "- apples grow on trees"},
            {"role": "user", "content": "Thanks!"},
        ]
    return {"session_id": f"rec-{i}", "messages": messages}


def test_replay_source_trains_on_recorded_conversations(tmp_path):
    from openclaw_trl.runtime import build_runtime, load_recipe, run

    replay = tmp_path / "replay.jsonl"
    rows = [_conversation(i, satisfied=i % 2 == 0) for i in range(4)]
    replay.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    argv = ["--config", "recipes/tiny_simulated.yaml", "--source", "replay", "--replay_path", str(replay)]
    argv += [
        "--output_dir",
        str(tmp_path / "run"),
        "--max_steps",
        "1",
        "--batch_size",
        "4",
        "--save_strategy",
        "no",
        "--adapter_history",
        "0",
    ]
    config, model_args, recipe = load_recipe(argv)
    parsed = (dict(vars(config)), dict(vars(model_args)))
    runtime = build_runtime(config, model_args, recipe)
    runtime.user.trainer.sample_timeout = 120
    metrics = run(runtime)[None]  # the run's only user's
    assert (vars(config), vars(model_args)) == parsed  # the recipe as parsed: nothing is written back to it
    assert runtime.config is config and runtime.user.name is None and len(runtime.users) == 1
    # 6 recorded assistant turns, each followed by the user's reaction: 3 thanks (+1), 2 change requests (-1,
    # with the request as hint) and one that only says "Thanks!" after a fix (+1).
    turns = list(runtime.user.store.queries.iter_turns(include_private=True))
    assert len(turns) == 6 and all(t.next_state for t in turns)
    assert metrics["policy_version"] == 1 and metrics["rl/nonzero_reward_rate"] == 1.0
    samples = list(runtime.user.store.queries.iter_samples(include_private=True))
    assert len(samples) == 6 and sum(s.consumed_step == 1 for s in samples) == 4
    assert sorted(s.reward for s in samples) == [-1, -1, 1, 1, 1, 1]
    assert sum(bool(s.has_hint) for s in samples) == 2
    # the status the server shows holds what the trainer logged (pushed to it, never read from the trainer)
    status = runtime.user.status()
    assert status["last_metrics"] == metrics and [h["step"] for h in status["history"]] == [1]
    assert status["history"][0]["reward_mean"] == metrics["reward"] and status["policy_version"] == 1


def test_share_refuses_an_anonymous_public_endpoint(tmp_path):
    from openclaw_trl.config import OpenClawConfig
    from openclaw_trl.runtime import Runtime, run

    config = OpenClawConfig(output_dir=str(tmp_path), source="live")
    runtime = Runtime(config, "unused", "unused", tokenizer=None)  # refused before any component is used
    with pytest.raises(ValueError, match="api_key_env"):
        run(runtime, share=True)


class CrashingUser:
    """A simulated user whose first message raises: the simulation source thread crashes."""

    max_turns = 1

    def opening(self, rng):
        raise RuntimeError("the simulated user broke")


def test_a_crashed_source_ends_the_run_with_its_error(tmp_path, capsys):
    from openclaw_trl.commands.train import run_argv

    argv = ["--config", "recipes/tiny_simulated.yaml", "--simulated_user", f"{__name__}:CrashingUser"]
    argv += [
        "--output_dir",
        str(tmp_path / "run"),
        "--max_steps",
        "1",
        "--save_strategy",
        "no",
        "--adapter_history",
        "0",
    ]
    assert run_argv(argv) == 1  # instead of the trainer waiting forever for samples
    err = capsys.readouterr().err
    assert "the simulation source crashed: RuntimeError: the simulated user broke" in err


def test_a_failing_replay_ends_the_run_with_its_error(tmp_path, capsys):
    from openclaw_trl.commands.train import run_argv

    replay = tmp_path / "replay.jsonl"
    replay.write_text(json.dumps(_conversation(0, satisfied=True)) + "\n{not json\n")
    argv = ["--config", "recipes/tiny_simulated.yaml", "--source", "replay", "--replay_path", str(replay)]
    argv += [
        "--output_dir",
        str(tmp_path / "run"),
        "--max_steps",
        "1",
        "--save_strategy",
        "no",
        "--adapter_history",
        "0",
    ]
    assert run_argv(argv) == 1
    assert "the replay source crashed: JSONDecodeError" in capsys.readouterr().err
