"""The command line's one user-error handler: a clean one-line message and exit code 2, no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _app(*argv: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [
            sys.executable,
            "app.py",
            "--config",
            "recipes/tiny_simulated.yaml",
            "--output_dir",
            str(tmp_path),
            *argv,
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_unloadable_model_is_one_line_and_exit_2(tmp_path):
    result = _app("--model_name_or_path", "nobody/no-such-model-xyz", tmp_path=tmp_path)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    (line,) = [x for x in result.stderr.splitlines() if "error:" in x]
    assert line.startswith("openclaw-trl train: error: nobody/no-such-model-xyz cannot be fetched")
    assert "toy_offline.yaml" in line


def test_invalid_recipe_value_is_one_line_and_exit_2(tmp_path):
    result = _app("--batch_size", "3", "--per_device_train_batch_size", "2", tmp_path=tmp_path)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert "openclaw-trl train: error: invalid recipe: batch_size (3) must be divisible" in result.stderr


def test_serve_option_mistakes_are_user_errors(capsys):
    from openclaw_trl.cli import main

    assert main(["serve"]) == 2
    assert "openclaw-trl serve: error: give exactly one of --config RECIPE" in capsys.readouterr().err
    assert main(["serve", "--model-dir", "tiny", "--share"]) == 2
    assert "--share exposes the API publicly: set --api-key-env" in capsys.readouterr().err


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # uvicorn's thread exits
def test_a_taken_port_is_a_one_line_error_naming_the_fix():
    import socket

    from fastapi import FastAPI

    from openclaw_trl.errors import UserError
    from openclaw_trl.serving.app import ServerThread

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(UserError, match=rf"port {port} on 127.0.0.1 is in use .*--port N"):
            ServerThread(FastAPI(), port=port).start()


def test_compare_latest_is_the_newest_version_kept(tmp_path, capsys):
    """``--versions 0 latest`` stays true however many updates were made (only the last adapter_history
    checkpoints are kept, so a fixed version number stops existing)."""
    from openclaw_trl.cli import main
    from openclaw_trl.commands.compare import _latest
    from openclaw_trl.store import Store

    run = tmp_path / "run"
    Store(run / "openclaw.sqlite").close()
    store = str(run / "openclaw.sqlite")
    assert main(["compare", "--store", store, "--versions", "0", "latest"]) == 2
    assert "no checkpoint-<v> with an adapter in" in capsys.readouterr().err
    for version in (11, 12, 3):
        (run / f"checkpoint-{version}").mkdir()
        (run / f"checkpoint-{version}" / "adapter_config.json").write_text('{"base_model_name_or_path": "b"}')
    (run / "checkpoint-13").mkdir()  # cut short: no adapter
    assert _latest(run) == 12
    assert main(["compare", "--store", store, "--versions", "0", "latest"]) == 2  # resolved, then: no prompts
    assert "holds no prompts" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["compare", "--store", store, "--versions", "0", "newest"])
    assert "a version number or latest, not 'newest'" in capsys.readouterr().err
