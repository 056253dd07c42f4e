"""The offline toy demo: the cache of toy models pre-trained with other settings than the packaged one,
``openclaw-trl/toy`` in a recipe, and ``app.py`` falling back to the demo when the default model cannot be
fetched (the packaged model itself: ``test_toy_package.py``)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from dataclasses import asdict
from pathlib import Path

import httpx
import pytest

from openclaw_trl.errors import UserError
from openclaw_trl.toy.world import OFF_TOPIC_ANSWER
from tests.helpers import wait_until

ROOT = Path(__file__).parent.parent

FALLBACK_LINE = (
    "Qwen/Qwen3-0.6B cannot be fetched (offline?): starting the offline toy demo instead "
    "(recipes/toy_offline.yaml)"
)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENCLAW_TRL_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_cache_root_follows_the_environment(tmp_path, monkeypatch):
    from openclaw_trl.toy.pretrain import PretrainSettings, cache_root, toy_model_dir

    monkeypatch.delenv("OPENCLAW_TRL_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "xdg" / "openclaw-trl"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_root() == Path.home() / ".cache" / "openclaw-trl"
    monkeypatch.setenv("OPENCLAW_TRL_CACHE", str(tmp_path / "mine"))
    assert cache_root() == tmp_path / "mine"
    assert toy_model_dir().parent == tmp_path / "mine"
    assert toy_model_dir(PretrainSettings(seed=1)) != toy_model_dir(PretrainSettings(seed=0))
    assert toy_model_dir() == toy_model_dir(PretrainSettings())  # the name is a hash of the settings


def test_toy_model_is_cached_and_a_killed_pretraining_is_never_used(cache, one_thread, monkeypatch):
    from openclaw_trl.toy import pretrain

    settings = pretrain.TINY
    out = pretrain.toy_model_dir(settings)
    real_train = pretrain.train

    def killed(*args, **kwargs):
        real_train(*args, **kwargs)
        raise KeyboardInterrupt  # as if the process died after training, before the directory was complete

    monkeypatch.setattr(pretrain, "train", killed)
    with pytest.raises(KeyboardInterrupt):
        pretrain.toy_model(settings, log=lambda *_: None)
    assert not out.exists() and list(cache.iterdir()) == []  # nothing half-written is left to be used
    (cache / f".{out.name}.pretrain-leftover").mkdir()  # what a SIGKILL leaves beside the final name
    monkeypatch.setattr(pretrain, "train", real_train)

    assert pretrain.toy_model(settings, log=lambda *_: None) == out
    meta = json.loads((out / pretrain.META_FILE).read_text())
    assert meta["settings"] == asdict(settings) and (out / "model.safetensors").exists()
    assert (out / ".gitignore").read_text() == "*\n"  # a cache inside a checkout is never committed
    stamp = (out / "model.safetensors").stat().st_mtime_ns
    lines = []
    assert pretrain.toy_model(settings, log=lines.append) == out
    assert lines == [] and (out / "model.safetensors").stat().st_mtime_ns == stamp  # reused, not retrained


def test_pretraining_is_deterministic_for_a_seed(tmp_path, one_thread):
    from safetensors.torch import load_file

    from openclaw_trl.toy import pretrain

    a = pretrain.pretrain(tmp_path / "a", pretrain.TINY, log=lambda *_: None)
    b = pretrain.pretrain(tmp_path / "b", pretrain.TINY, log=lambda *_: None)
    wa, wb = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    assert wa.keys() == wb.keys() and all((wa[k] == wb[k]).all() for k in wa)


def test_recipe_id_resolves_to_the_packaged_toy_model(toy_demo_model, tmp_path):
    from openclaw_trl.runtime import load_recipe, resolve_model_path

    config, model_args, _ = load_recipe(
        ["--config", "recipes/toy_offline.yaml", "--output_dir", str(tmp_path / "run")]
    )
    assert model_args.model_name_or_path == "openclaw-trl/toy"
    assert config.judge_backend == "feedback" and config.source == "live"
    assert Path(resolve_model_path(model_args, config)) == toy_demo_model


def _offline_env(tmp_path) -> dict:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path / "empty-hub-cache")}
    env.pop("PYTHONWARNINGS", None)
    return env


def test_app_with_a_chosen_recipe_that_cannot_load_fails_with_one_line(tmp_path):
    cmd = [sys.executable, "app.py", "--config", "recipes/combine_qwen3_0.6b_lora.yaml"]
    out = subprocess.run(
        cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, env=_offline_env(tmp_path)
    )
    assert out.returncode != 0
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith("openclaw-trl train: error: Qwen/Qwen3-0.6B cannot be fetched"), out.stderr[
        -2000:
    ]
    assert "Traceback" not in out.stderr and "toy demo" not in out.stderr


@pytest.mark.slow
def test_app_without_a_recipe_falls_back_to_the_toy_demo_offline(toy_demo_model, tmp_path):
    cmd = [sys.executable, "app.py", "--port", "0", "--output_dir", str(tmp_path / "run")]
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=_offline_env(tmp_path),
    )
    lines: list[str] = []
    reader = threading.Thread(
        target=lambda: lines.extend(line.rstrip("\n") for line in proc.stderr), daemon=True
    )
    reader.start()  # drained all along: a full pipe would block the server
    try:

        def served_url() -> str | None:
            assert proc.poll() is None, "\n".join(lines[-30:])
            found = [
                m.group(1) for line in list(lines) if (m := re.search(r"OpenAI API at (http://\S+)/v1", line))
            ]
            return found[0] if found else None

        url = wait_until(served_url, 300, "the server's address", interval=0.2)
        assert FALLBACK_LINE in lines and not any("Traceback" in line for line in lines)
        assert not any("pre-training" in line for line in lines)  # the cached model is reused
        reply = httpx.post(
            url + "/v1/chat/completions",
            json={"model": "openclaw", "messages": [{"role": "user", "content": "Tell me about apples."}]},
            timeout=120,
        )
        assert reply.status_code == 200, reply.text
        assert "apple" in reply.json()["choices"][0]["message"]["content"].lower()  # the toy model, not noise
        reply = httpx.post(
            url + "/v1/chat/completions",
            json={"model": "openclaw", "messages": [{"role": "user", "content": "Hi! What can you do?"}]},
            timeout=120,
        )
        assert reply.json()["choices"][0]["message"]["content"] == OFF_TOPIC_ANSWER  # it says what it knows
    finally:
        proc.kill()
        proc.wait(timeout=60)


def test_model_probe_asks_the_hub_once(tmp_path, monkeypatch):
    from huggingface_hub import HfApi, constants

    from openclaw_trl.commands import train as app

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub-cache"))
    calls = []

    def unreachable(self, name, timeout=None):
        calls.append((name, timeout))
        raise httpx.ConnectError("Name or service not known")

    monkeypatch.setattr(HfApi, "model_info", unreachable)
    problem = app.model_problem("Qwen/Qwen3-0.6B")
    assert problem == "Qwen/Qwen3-0.6B cannot be fetched (ConnectError: Name or service not known)"
    assert calls == [("Qwen/Qwen3-0.6B", app.PROBE_TIMEOUT_S)]
    assert app.choose_recipe(["--port", "0"]) == ["--config", "recipes/toy_offline.yaml", "--port", "0"]
    with pytest.raises(UserError, match="^Qwen/Qwen3-0.6B cannot be fetched"):
        app.choose_recipe(["--config", "recipes/combine_qwen3_0.6b_lora.yaml"])
    with pytest.raises(UserError, match="^org/missing cannot be fetched"):
        app.choose_recipe(["--model_name_or_path", "org/missing"])  # a chosen model: no fallback

    monkeypatch.setattr(HfApi, "model_info", lambda self, name, timeout=None: object())
    assert app.choose_recipe([]) == ["--config", "recipes/combine_qwen3_0.6b_lora.yaml"]
    assert app.model_problem(str(tmp_path)) is None  # a local directory
    assert app.model_problem("openclaw-trl/toy") is None and app.model_problem("openclaw-trl/tiny") is None
