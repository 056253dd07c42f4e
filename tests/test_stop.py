"""Ctrl-C (SIGINT) and SIGTERM stop ``python app.py`` at any moment of its start, within seconds, without a
traceback; a normal start and stop shows no library warning, and nothing comes after the stop line."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.helpers import wait_until

ROOT = Path(__file__).resolve().parents[1]
STOP_WITHIN_S = 10.0
STOP_LINES = (
    "before training started; nothing was lost",  # a signal before training began: the process exits at once
    "stopped before the first update: nothing to save",  # one while training, before any update
)


class Start:
    """``app.py`` on the offline toy demo (a free port, its own output folder), stdout and stderr read all along."""

    def __init__(self, output_dir: Path, *extra: str):
        cmd = [sys.executable, "app.py", "--config", "recipes/toy_offline.yaml", "--port", "0"]
        cmd += ["--output_dir", str(output_dir), *extra]
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
        env.pop("PYTHONWARNINGS", None)
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
        )
        self.out: list[str] = []
        self.err: list[str] = []
        self.readers = [
            threading.Thread(target=lambda: self.out.extend(self.proc.stdout), daemon=True),
            threading.Thread(target=lambda: self.err.extend(self.proc.stderr), daemon=True),
        ]
        for reader in self.readers:
            reader.start()

    def wait_for(self, text: str) -> None:
        def found() -> bool:
            assert self.proc.poll() is None, "".join(self.err)
            return any(text in line for line in list(self.err))

        wait_until(found, 300, repr(text), interval=0.05)

    def stop(self, signum: int) -> float:
        """Send ``signum``; the seconds until the process ended."""
        sent = time.monotonic()
        self.proc.send_signal(signum)
        try:
            self.proc.wait(timeout=60)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
        for reader in self.readers:
            reader.join(timeout=10)
        return time.monotonic() - sent


def in_interpreter_start(err: str) -> bool:
    """A traceback of an interrupt that came while Python itself was starting, before app.py ran a line
    (nothing can catch it there)."""
    return "KeyboardInterrupt" in err and "app.py" not in err


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("when", [0.1, 0.3, 1.0, 3.0, "serving"])
def test_a_signal_stops_the_start_at_any_moment(tmp_path, signum, when):
    start = Start(tmp_path / "run")
    if when == "serving":
        start.wait_for("openclaw-trl: serving")
        time.sleep(0.2)
    else:
        time.sleep(max(0.0, when - (time.monotonic() - start.started)))
    took = start.stop(signum)
    err = "".join(start.err)
    assert took < STOP_WITHIN_S, (took, err)
    assert "Exception ignored" not in err, err
    assert "Traceback" not in err or in_interpreter_start(err), err
    if "Traceback" not in err:
        # -signum: ended by the signal itself, before Python had set up its own handling
        assert start.proc.returncode in (0, 128 + signum, -signum), (start.proc.returncode, err)
        last = err.rstrip().splitlines()[-1] if err.strip() else ""
        assert not err.strip() or last.endswith(STOP_LINES), err


@pytest.mark.slow
def test_a_normal_start_and_stop_shows_no_library_warning(tmp_path):
    start = Start(tmp_path / "run")
    start.wait_for(" learning: ")
    time.sleep(0.5)  # training has begun
    start.stop(signal.SIGTERM)
    err, out = "".join(start.err), "".join(start.out)
    assert start.proc.returncode == 0, err
    assert "Warning" not in err + out, err
    assert out == ""  # the JSON summary only with --json-summary
    assert err.rstrip().splitlines()[-1].endswith("stopped before the first update: nothing to save"), err
    # that another log level shows the libraries' notices: tests/test_console.py (which notices a start
    # raises depends on the installed library versions)
