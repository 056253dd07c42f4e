"""What a run shows in the terminal: the served URL, one line per update, a rollback and a resume, each warning
once, no progress bar; and every logged metrics dict in ``<output_dir>/metrics.jsonl``."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import warnings
from collections import Counter
from pathlib import Path

import httpx
import pytest

from openclaw_trl.records import TrainingSample
from tests.helpers import wait_until

ROOT = Path(__file__).parent.parent
UPDATE = re.compile(
    r"^\d\d:\d\d:\d\d update (\d+) from (.+?)(?: · mean reward ([+-]\d+\.\d\d))? · now serving v(\d+)$"
)


def _sample(
    reward: float, source: str | None, hint: bool = False, group: int | None = None
) -> TrainingSample:
    meta = {"next_state_source": source} if source else {}
    return TrainingSample(
        turn_id=1,
        prompt_ids=[1],
        completion_ids=[2],
        sampling_logprobs=[-0.1],
        temperature=1.0,
        policy_version=0,
        reward=reward,
        has_hint=hint,
        group_id=group,
        meta=meta,
    )


def test_an_update_line_says_what_was_learned_from():
    from openclaw_trl.trainer.reporting import summarize_batch, update_line

    ratings = summarize_batch([_sample(1, "feedback"), _sample(-1, "feedback")])
    assert (
        update_line(3, ratings, serving=True)
        == "update 3 from 2 ratings (👍 1, 👎 1) · mean reward +0.00 · now serving v3"
    )
    mixed = summarize_batch(
        [
            _sample(1, "feedback"),
            _sample(-1, "feedback", hint=True),
            _sample(1, "request"),
            _sample(-1, "request"),
        ]
    )
    assert mixed.describe() == "1 rating (👍 1, 👎 0), 1 correction and 2 judged replies"
    assert update_line(4, mixed, serving=True, repeat=2).startswith(
        "update 4 from 1 rating (👍 1, 👎 0), 1 correction"
    )
    assert "(pass 2) · mean reward +0.00" in update_line(4, mixed, serving=True, repeat=2)
    groups = summarize_batch([_sample(0.5, "request", group=7), _sample(0.2, None, group=7)])
    assert update_line(5, groups, serving=False) == "update 5 from 2 Best-of-N candidates · version 5"
    opd = summarize_batch([_sample(0, "request", hint=True), _sample(0, None)], with_reward=False)
    assert update_line(6, opd, serving=True) == "update 6 from 1 judged reply and 1 sample · now serving v6"


@pytest.fixture
def console():
    """``configure_console`` writing to a buffer; the logging and warnings set-up is restored afterwards."""
    from transformers.utils import logging as hf_logging

    root, hf_root = logging.getLogger(), logging.getLogger("transformers")
    saved = (list(root.handlers), root.level, logging.getLogger("openclaw_trl").level, hf_root.propagate)
    buffer = io.StringIO()
    with warnings.catch_warnings():  # restores the filters and warnings.showwarning
        warnings.simplefilter("always")
        yield buffer
    root.handlers[:] = saved[0]
    root.setLevel(saved[1])
    logging.getLogger("openclaw_trl").setLevel(saved[2])
    hf_logging.set_tqdm_hook(None)
    hf_logging.enable_default_handler()
    hf_root.propagate = saved[3]


def test_library_deprecation_notices_are_hidden_only_at_the_passive_level(console, monkeypatch):
    from openclaw_trl.console import configure_console

    monkeypatch.setattr(sys, "warnoptions", [])
    library_file = "/venv/lib/python3.11/site-packages/somelib/module.py"
    configure_console("passive", stream=console)
    warnings.showwarning("old argument", FutureWarning, library_file, 10)
    warnings.showwarning("a library's own problem", UserWarning, library_file, 11)
    warnings.showwarning("our own notice", FutureWarning, "/work/openclaw_trl/x.py", 12)
    shown = console.getvalue()
    assert "old argument" not in shown
    assert "WARNING somelib: UserWarning: a library's own problem (module.py:11)" in shown
    assert "FutureWarning: our own notice" in shown
    configure_console("info", stream=console)
    warnings.showwarning("old argument", FutureWarning, library_file, 10)
    assert "WARNING somelib: FutureWarning: old argument (module.py:10)" in console.getvalue()


def test_the_console_shows_each_warning_once_and_keeps_errors(console, monkeypatch):
    from openclaw_trl.console import configure_console

    monkeypatch.setattr(sys, "warnoptions", [])
    configure_console("passive", stream=console)
    for _ in range(3):
        warnings.warn("this option is deprecated", FutureWarning, stacklevel=1)
        warnings.filterwarnings("ignore", message="unrelated")  # a library resetting the filters
    warnings.warn("another one", UserWarning, stacklevel=1)
    logging.getLogger("openclaw_trl.trainer").info("update 1 from 2 ratings")
    logging.getLogger("some_library.client").info("HTTP Request: POST http://127.0.0.1/v1/chat/completions")
    logging.getLogger("some_library.module").error("it broke")
    logging.getLogger("openclaw_trl.runtime").warning("interrupted")
    lines = console.getvalue().splitlines()
    assert sum("this option is deprecated" in line for line in lines) == 1, lines
    assert re.fullmatch(
        r"\d\d:\d\d:\d\d WARNING: FutureWarning: this option is deprecated \(test_console.py:\d+\)", lines[0]
    )
    assert re.fullmatch(r"\d\d:\d\d:\d\d WARNING: UserWarning: another one \(test_console.py:\d+\)", lines[1])
    assert re.fullmatch(r"\d\d:\d\d:\d\d update 1 from 2 ratings", lines[2]), lines
    assert not any("HTTP Request" in line for line in lines)  # third-party INFO is quiet by default
    assert re.fullmatch(r"\d\d:\d\d:\d\d ERROR some_library: it broke", lines[3]), lines
    assert re.fullmatch(r"\d\d:\d\d:\d\d WARNING: interrupted", lines[4]), lines

    configure_console("info", stream=console)  # the documented way to see more: log_level
    logging.getLogger("some_library.client").info(
        "HTTP Request: GET /v1/models"
    )  # (gradio sets httpx's own level)
    assert "HTTP Request: GET /v1/models" in console.getvalue()
    assert len(logging.getLogger().handlers) == len({id(h) for h in logging.getLogger().handlers})
    with pytest.raises(ValueError, match="log_level must be one of"):
        configure_console("loud")


def test_disable_tqdm_false_and_an_unknown_log_level_are_refused():
    from openclaw_trl.config import OpenClawConfig

    with pytest.raises(
        ValueError, match="log_level and log_level_replica must be one of passive, debug, info"
    ):
        OpenClawConfig(output_dir="/tmp/unused", report_to="none", log_level="loud")
    assert OpenClawConfig(output_dir="/tmp/unused", report_to="none", log_level="info").log_level == "info"
    assert OpenClawConfig(output_dir="/tmp/unused", report_to="none").disable_tqdm is True
    with pytest.raises(ValueError, match="disable_tqdm=False is not supported: live learning runs until"):
        OpenClawConfig(output_dir="/tmp/unused", report_to="none", disable_tqdm=False)


class App:
    """``app.py`` on the offline demo's recipe with the tiny model, its terminal read line by line."""

    def __init__(self, output_dir: Path):
        cmd = [sys.executable, "app.py", "--config", "recipes/toy_offline.yaml"]
        cmd += ["--model_name_or_path", "openclaw-trl/tiny", "--port", "0", "--output_dir", str(output_dir)]
        cmd += ["--correction_window_s", "0"]  # a bare 👎 is trained at once: updates come as the test rates
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
        env.pop("PYTHONWARNINGS", None)
        self.proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            encoding="utf-8",
        )
        self.lines: list[str] = []
        self.reader = threading.Thread(
            target=lambda: self.lines.extend(line.rstrip("\n") for line in self.proc.stdout)
        )
        self.reader.start()  # drained all along: a full pipe would block the app
        serving = self.wait_for(
            r"openclaw-trl: serving openclaw-trl/tiny at (http://127\.0\.0\.1:\d+) \(UI\) · "
        )
        self.url = re.search(r"at (http://\S+) \(UI\)", serving).group(1)
        assert f'OpenAI API at {self.url}/v1 (model "openclaw")' in serving

    def wait_for(self, pattern: str, timeout: float = 300.0) -> str:
        def last_match() -> str | None:
            found = [line for line in list(self.lines) if re.search(pattern, line)]
            assert found or self.proc.poll() is None, "\n".join(self.lines[-40:])
            return found[-1] if found else None

        return wait_until(last_match, timeout, f"a line matching {pattern!r}", interval=0.1)

    def rate(self, session: str, rating: int, text: str | None = None) -> None:
        reply = httpx.post(
            f"{self.url}/v1/chat/completions",
            json={
                "model": "openclaw",
                "session_id": session,
                "messages": [{"role": "user", "content": "Hi"}],
            },
            timeout=120,
        )
        assert reply.status_code == 200, reply.text
        body = {
            "turn_id": reply.json()["openclaw"]["turn_id"],
            "session_id": session,
            "rating": rating,
            "text": text,
        }
        signal_ = httpx.post(f"{self.url}/v1/feedback", json=body, timeout=60)
        assert signal_.status_code == 200, signal_.text

    def stop(self) -> list[str]:
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(timeout=300) == 0, "\n".join(self.lines[-40:])
        self.reader.join(timeout=30)
        return self.lines


@pytest.mark.slow
def test_the_terminal_of_a_live_run_reads_as_sentences(tmp_path):
    run = tmp_path / "run"
    app = App(run)
    learning = app.wait_for(r" learning: ")
    assert (
        f"learning: one update every 2 👍/👎 ratings or corrections · metrics in {run}/metrics.jsonl"
        in learning
    )
    app.rate("a", 1)
    app.rate("b", -1)
    app.wait_for(r" update 1 ")
    app.rate("c", 1)
    app.rate("d", 1)
    app.wait_for(r" update 2 ")
    app.rate("e", -1, "Please answer as a bulleted list.")
    app.rate("f", 1)
    app.wait_for(r" update 3 ")
    rolled = httpx.post(f"{app.url}/v1/adapters/rollback", json={"version": 1}, timeout=120)
    assert rolled.status_code == 200, rolled.text
    app.wait_for(r" rollback to v1 ")
    assert httpx.post(f"{app.url}/v1/learning", json={"paused": True}, timeout=60).status_code == 200
    app.wait_for(r" learning paused: serving and collecting go on, no update until it is resumed$")
    lines = app.stop()
    text = "\n".join(lines)

    first = [line for line in lines if re.match(r"\d\d:\d\d:\d\d ", line)]
    assert first[0].endswith(f"new run in {run}"), text
    updates = [m.groups() for line in lines if (m := UPDATE.match(line))]
    assert updates == [
        ("1", "2 ratings (👍 1, 👎 1)", "+0.00", "1"),
        ("2", "2 ratings (👍 2, 👎 0)", "+1.00", "2"),
        ("3", "1 rating (👍 1, 👎 0) and 1 correction", "+0.00", "3"),
    ], text
    assert re.search(
        r"\d\d:\d\d:\d\d rollback to v1 · now serving its weights as v4 · 4 samples of the undone", text
    )
    assert re.search(
        rf"\d\d:\d\d:\d\d stopped at v4, kept in {run}/checkpoint-4: the same command continues", text
    )
    for noise in ("it/s", "1000000000", "{'loss'", "Loading weights", "Traceback"):
        assert noise not in text, (noise, text)
    shown = Counter(line.split("Warning: ", 1)[1] for line in lines if "Warning: " in line)
    assert all(n == 1 for n in shown.values()), shown

    logged = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [entry["step"] for entry in logged] == [1, 2, 3]
    for key in ("loss", "grad_norm", "learning_rate", "reward", "policy_version", "samples/wait_s", "time"):
        assert all(key in entry for entry in logged), key
    assert [entry["reward"] for entry in logged] == [0.0, 1.0, 0.0]

    again = App(run)  # a restart continues the run, the terminal says so, the metrics file grows
    assert any(
        re.search(rf" resuming run {run} from checkpoint-4: policy version 4", line) for line in again.lines
    )
    again.wait_for(
        r" learning is paused \(kept from the last run\): resume it in the UI or POST /v1/learning$"
    )
    assert httpx.post(f"{again.url}/v1/learning", json={"paused": False}, timeout=60).status_code == 200
    again.wait_for(r" learning resumed$")
    again.rate("g", -1)
    again.rate("h", -1)
    assert UPDATE.match(again.wait_for(r" update 5 ")).groups() == (
        "5",
        "2 ratings (👍 0, 👎 2)",
        "-1.00",
        "5",
    )
    again.stop()
    logged = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [entry["step"] for entry in logged] == [1, 2, 3, 5]
