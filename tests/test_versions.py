"""Adapter versions: the history, the rollback acceptance test, pause / resume, bad input on the version routes.

The pause test runs ``app.py`` on the simulated recipe in a subprocess (stopped with SIGTERM while paused,
then restarted). The rollback test runs the live stack in-process (``recipes/tiny_offline.yaml``: HF engine, tiny model, real
SQLite, real HTTP on 127.0.0.1, the real ``openai`` client) with the trainer in a thread, and feeds it samples
sampled by the engine itself.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import openai
import pytest
import torch

from openclaw_trl.engines.base import GenerationRequest, SamplingParams
from openclaw_trl.records import TrainingSample
from tests.helpers import wait_until

RECIPE = "recipes/tiny_offline.yaml"


class LiveRun:
    """``runtime.run`` of a live recipe in a thread, its server on a free port."""

    def __init__(self, output_dir, *extra: str):
        from openclaw_trl.runtime import build_runtime, load_recipe

        argv = ["--config", RECIPE, "--output_dir", str(output_dir), "--port", "0", "--learning_rate", "1e-2"]
        config, model_args, recipe = load_recipe([*argv, *extra])
        self.runtime = build_runtime(config, model_args, recipe)
        self.result: dict | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        wait_until(
            lambda: self.runtime.server is not None and self.runtime.server.server.started, 300, "the server"
        )
        self.url = self.runtime.server.url
        learning = self.runtime.user.learning
        wait_until(lambda: learning.trainer_state in ("waiting for samples", "paused"), 300, "the trainer")
        self.client = openai.OpenAI(base_url=f"{self.url}/v1", api_key="unused", max_retries=0)

    def _run(self):
        from openclaw_trl.runtime import run

        try:
            self.result = run(self.runtime)[None]
        except BaseException as err:  # reported by join()
            self.error = err

    @property
    def version(self) -> int:
        return self.runtime.engine.policy_version

    def add_samples(self, n: int, seed: int) -> None:
        """``n`` samples sampled by the served policy (so their log-probs are genuine)."""
        engine, store = self.runtime.engine, self.runtime.user.store
        gen = torch.Generator().manual_seed(seed)
        for i in range(n):
            prompt = torch.randint(10, 1500, (10 + i,), generator=gen).tolist()
            sampling = SamplingParams(temperature=1.0, max_new_tokens=6, seed=seed * 100 + i)
            (c,) = engine.generate([GenerationRequest(prompt, sampling)])
            store.queue.add_sample(
                TrainingSample(
                    turn_id=seed * 100 + i,
                    prompt_ids=prompt,
                    completion_ids=c.token_ids,
                    sampling_logprobs=c.logprobs,
                    temperature=1.0,
                    policy_version=c.policy_version,
                    reward=1.0 if i % 2 == 0 else -1.0,
                )
            )

    def train_until(self, version: int, seed: int, last: bool = False) -> None:
        """Feed the samples of the updates up to ``version``; wait until the trainer is back between updates
        (its checkpoint recorded), or, for the ``last`` update of the run, until the run has ended."""
        self.add_samples(2 * (version - self.version), seed)
        if last:
            self.join()
        learning = self.runtime.user.learning
        ready = lambda: self.version == version and learning.trainer_state == "waiting for samples"  # noqa: E731
        wait_until(lambda: last or ready(), 300, f"policy version {version}")

    def call(self, method: str, path: str, body: dict | None = None):
        """The version routes through the real ``openai`` client (its generic ``get`` / ``post``)."""
        if method == "get":
            return self.client.get(path, cast_to=object)
        return self.client.post(path, body=body, cast_to=object)

    def join(self) -> dict:
        self.thread.join(timeout=300)
        assert not self.thread.is_alive(), "the run did not end"
        if self.error is not None:
            raise self.error
        return self.result


def _reply(run: LiveRun, text: str):
    """A trainable chat turn through the openai client, with its log-probs (sampled at the recipe's T)."""
    return run.client.chat.completions.create(
        model="openclaw",
        messages=[{"role": "user", "content": text}],
        max_tokens=8,
        logprobs=True,
        top_logprobs=5,
        extra_headers={"X-Session-Id": "s-" + text.replace(" ", "-")},
    )


def _fresh_logprobs(model_path: str, checkpoint, prompt_ids, completion_ids, temperature: float):
    """Per-token log-probs of a completion under a fresh load of ``checkpoint``'s adapter on the base model."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    model = PeftModel.from_pretrained(base, str(checkpoint)).eval()
    ids = torch.tensor([list(prompt_ids) + list(completion_ids)])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt_ids) - 1 : -1] / temperature
    logps = torch.log_softmax(logits.float(), -1)
    return logps.gather(-1, torch.tensor(completion_ids)[:, None]).squeeze(-1), logps


def _optimizer_state(path) -> dict:
    return torch.load(path / "optimizer.pt", weights_only=True)["state"]


def _same_optimizer_state(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        torch.equal(torch.as_tensor(a[k][name]), torch.as_tensor(b[k][name])) for k in a for name in a[k]
    )


@pytest.mark.slow
def test_rollback_serves_and_trains_from_the_restored_version_and_survives_a_restart(tmp_path):
    out = tmp_path / "run"
    run = LiveRun(out, "--max_steps", "5")
    assert (out / "checkpoint-0" / "optimizer.pt").exists()  # the initial adapter is version 0
    run.train_until(3, seed=1)
    listed = run.call("get", "/adapters")
    assert [v["version"] for v in listed["data"]] == [3, 2, 1, 0]
    assert listed["serving"] == 3 and listed["data"][0]["serving"] and listed["paused"] is False
    v1 = listed["data"][2]
    assert v1["samples"] == 2 and v1["restorable"] and v1["restored_from"] is None
    assert v1["metrics"]["policy_version"] == 1 and "reward" in v1["metrics"] and v1["created"] > 0

    answer = run.call("post", "/adapters/rollback", {"version": 1})
    # Published as the next policy version (monotonic), the samples of updates 2 and 3 marked, not re-queued.
    assert answer == {
        "ok": True,
        "policy_version": 4,
        "restored_from": 1,
        "samples_rolled_back": 4,
        "samples_waiting": 0,
    }
    assert run.version == 4
    reasons = [
        s.dropped_reason for s in run.runtime.user.store.queries.iter_samples() if s.consumed_step in (2, 3)
    ]
    assert len(reasons) == 4 and all(r == "rolled_back: version 1 restored as version 4" for r in reasons)

    # The next reply is produced by version 1's weights: its log-probs are those of a fresh load of checkpoint-1.
    reply = _reply(run, "hello after the rollback")
    assert reply.system_fingerprint == "openclaw-v4"
    turn = run.runtime.user.store.conversations.get_turn(reply.model_extra["openclaw"]["turn_id"])
    assert turn.policy_version == 4
    args = (run.runtime.model_path, turn.prompt_ids, turn.completion_ids, turn.temperature)
    fresh, fresh_all = _fresh_logprobs(args[0], out / "checkpoint-1", *args[1:])
    served = torch.tensor(turn.sampling_logprobs)
    assert torch.allclose(served, fresh, atol=1e-4), (served, fresh)
    for position, entry in enumerate(reply.choices[0].logprobs.content):  # the policy's top-5 agree as well
        top = sorted((t.logprob for t in entry.top_logprobs), reverse=True)
        assert torch.allclose(torch.tensor(top), fresh_all[position].topk(5).values, atol=1e-4)
    three, _ = _fresh_logprobs(args[0], out / "checkpoint-3", *args[1:])
    assert (three - served).abs().max() > 1e-2  # version 3 would have answered differently

    # Training continues from version 1: the optimizer state is checkpoint-1's, and the next update builds on it.
    trainer = run.runtime.user.trainer
    in_memory = {
        k: {n: t.cpu() for n, t in v.items()} for k, v in trainer.optimizer.state_dict()["state"].items()
    }
    assert _same_optimizer_state(in_memory, _optimizer_state(out / "checkpoint-1"))
    assert _same_optimizer_state(
        _optimizer_state(out / "checkpoint-4"), _optimizer_state(out / "checkpoint-1")
    )
    run.train_until(5, seed=2, last=True)
    steps = {int(s["step"]) for s in _optimizer_state(out / "checkpoint-5").values()}
    assert steps == {2}  # one optimizer step after checkpoint-1's, not four

    # A restart continues from the rolled-back branch and lists the same history.
    again = LiveRun(out, "--max_steps", "6")
    assert again.version == 5
    listed = again.call("get", "/adapters")
    assert [(v["version"], v["restored_from"]) for v in listed["data"]] == [
        (5, None),
        (4, 1),
        (3, None),
        (2, None),
        (1, None),
        (0, None),
    ]
    assert listed["data"][0]["serving"] and all(v["restorable"] for v in listed["data"])
    assert (
        again.runtime.user.store.queue.count_waiting() == 0
    )  # the rolled-back samples stay out of the queue
    reply = _reply(again, "hello after the restart")
    turn = again.runtime.user.store.conversations.get_turn(reply.model_extra["openclaw"]["turn_id"])
    fresh, _ = _fresh_logprobs(
        again.runtime.model_path, out / "checkpoint-5", turn.prompt_ids, turn.completion_ids, 1.0
    )
    assert reply.system_fingerprint == "openclaw-v5"
    assert torch.allclose(torch.tensor(turn.sampling_logprobs), fresh, atol=1e-4)
    again.train_until(6, seed=3, last=True)
    assert {int(s["step"]) for s in _optimizer_state(out / "checkpoint-6").values()} == {3}


@pytest.mark.slow
def test_version_routes_refuse_bad_input_with_json_errors(tmp_path):
    run = LiveRun(tmp_path / "run", "--max_steps", "2")
    run.train_until(1, seed=1)
    bad = [
        ({"version": 7}, 404, "version_not_found"),
        ({"version": 1}, 400, "version_not_restorable"),  # the one serving
        ({"version": "1"}, 400, "invalid_value"),
        ({"version": True}, 400, "invalid_value"),
        ({"version": -1}, 400, "invalid_value"),
        ({"version": 1, "extra": 1}, 400, "invalid_value"),
        ({}, 400, "invalid_value"),
        ([1], 400, "invalid_json"),
    ]
    for body, status, code in bad:
        response = httpx.post(f"{run.url}/v1/adapters/rollback", json=body)
        assert (response.status_code, response.json()["error"]["code"]) == (status, code), body
    response = httpx.post(f"{run.url}/v1/adapters/rollback", content=b"{not json")
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_json"
    huge = b'{"version": 0, "pad": "' + b"x" * (4 * 1024 * 1024) + b'"}'
    assert httpx.post(f"{run.url}/v1/adapters/rollback", content=huge).status_code == 413
    for body in ({"paused": "yes"}, {"paused": 1}, {}, {"paused": True, "x": 1}):
        response = httpx.post(f"{run.url}/v1/learning", json=body)
        assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_value", body
    # A version whose checkpoint is gone is listed as not restorable and refused.
    shutil.rmtree(tmp_path / "run" / "checkpoint-0")
    assert [v["restorable"] for v in run.call("get", "/adapters")["data"]] == [True, False]
    with pytest.raises(openai.BadRequestError, match="cannot be restored"):
        run.call("post", "/adapters/rollback", {"version": 0})
    run.train_until(2, seed=2, last=True)


def test_serve_only_app_answers_409_on_the_version_routes(tmp_path, tiny_model_dir):
    from _server_helpers import running_stack

    from openclaw_trl.engines.hf import HFEngine

    engine = HFEngine(tiny_model_dir)
    try:
        with running_stack(engine, tmp_path / "db.sqlite") as stack:
            for method, path, body in (
                ("GET", "/v1/adapters", None),
                ("POST", "/v1/adapters/rollback", {"version": 0}),
                ("POST", "/v1/learning", {"paused": True}),
            ):
                response = httpx.request(method, f"{stack.url}{path}", json=body)
                assert response.status_code == 409, path
                assert response.json()["error"]["code"] == "learning_unavailable"
    finally:
        engine.close()


class AppProcess:
    """``app.py`` on the simulated recipe in a subprocess (a simulated user keeps chatting), stopped by SIGTERM."""

    def __init__(self, output_dir, *extra: str):
        root = Path(__file__).parent.parent
        cmd = [
            sys.executable,
            "app.py",
            "--config",
            "recipes/tiny_simulated.yaml",
            "--output_dir",
            str(output_dir),
        ]
        env = {"HF_HUB_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False", "PYTHONPATH": str(root)}
        self.proc = subprocess.Popen(
            [*cmd, "--max_steps", "1000", *extra],
            cwd=root,
            env={**os.environ, **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        threading.Thread(target=lambda: self.lines.extend(self.proc.stderr), daemon=True).start()
        wait_until(lambda: self._url() or self.proc.poll() is not None, 300, "the server")
        assert self.proc.poll() is None, "".join(self.lines)[-3000:]
        self.client = openai.OpenAI(base_url=f"{self._url()}/v1", api_key="unused", max_retries=0)

    def _url(self) -> str | None:
        found = [
            m.group(1)
            for line in list(self.lines)
            if (m := re.search(r"OpenAI API at (http://\S+)/v1", line))
        ]
        return found[0] if found else None

    def status(self) -> dict:
        return self.client.get("/status", cast_to=object)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(timeout=300) == 0, "".join(self.lines)[-3000:]


@pytest.mark.slow
def test_pause_stops_updates_serving_goes_on_and_a_restart_stays_paused(tmp_path):
    app = AppProcess(tmp_path / "run")
    assert app.client.post("/learning", body={"paused": True}, cast_to=object) == {"ok": True, "paused": True}
    batch = app.status()["batch_size"]

    def paused_with_samples(n):
        status = app.status()
        return status["trainer_state"] == "paused" and status["samples_waiting"] >= n

    wait_until(
        lambda: paused_with_samples(batch), 300, "the trainer to wait, paused, with a batch of samples queued"
    )
    version = app.status()["policy_version"]
    # The simulated user keeps talking (serving and judging go on); the trainer stays paused, one batch or two.
    wait_until(lambda: paused_with_samples(2 * batch), 300, "more samples")
    status = app.status()
    assert status["learning_paused"] and status["policy_version"] == version
    reply = app.client.chat.completions.create(
        model="openclaw", messages=[{"role": "user", "content": "still there?"}], max_tokens=4
    )
    assert reply.system_fingerprint == f"openclaw-v{version}"
    app.stop()  # SIGTERM while paused: a clean stop

    again = AppProcess(tmp_path / "run")
    assert again.client.get("/learning", cast_to=object) == {"paused": True}  # persisted in the store
    wait_until(
        lambda: again.status()["trainer_state"] == "paused", 300, "the restarted trainer to wait, paused"
    )
    assert again.status()["policy_version"] == version
    assert again.client.post("/learning", body={"paused": False}, cast_to=object)["paused"] is False
    wait_until(lambda: again.status()["policy_version"] > version, 300, "an update after resuming")
    assert not again.status()["learning_paused"]
    again.stop()


@pytest.mark.slow
def test_compare_command_answers_recent_prompts_with_two_versions(tmp_path, capsys):
    from openclaw_trl.cli import main

    run = LiveRun(tmp_path / "run", "--max_steps", "2")
    for text, private in (("tell me about apples", False), ("a secret question", True), ("and pears", False)):
        run.client.chat.completions.create(
            model="openclaw",
            messages=[{"role": "user", "content": text}],
            max_tokens=4,
            extra_headers={"X-Session-Id": text.replace(" ", "-"), "X-Session-Private": str(private).lower()},
        )
    run.train_until(2, seed=1, last=True)
    capsys.readouterr()  # the run's own log lines
    store = str(tmp_path / "run" / "openclaw.sqlite")
    common = ["compare", "--store", store, "--max-new-tokens", "6", "--prompts", "3"]

    assert main([*common, "--versions", "0", "2", "--json"]) == 0
    pairs = json.loads(capsys.readouterr().out)
    assert [p["prompt"] for p in pairs] == [
        "and pears",
        "tell me about apples",
    ]  # newest first, no private one
    assert all(set(p) == {"turn_id", "prompt", "v0 (base model)", "v2"} for p in pairs)
    # Same seed, same weights: the same replies (so a difference between two versions is the weights').
    assert main([*common, "--versions", "1", "1", "--json"]) == 0
    assert all(p["v1"] for p in json.loads(capsys.readouterr().out))
    assert main([*common, "--versions", "2", "0"]) == 0
    table = capsys.readouterr().out
    assert "v2" in table and "v0 (base model)" in table and "turn " in table and "and pears" in table

    assert main([*common, "--versions", "0", "9"]) == 2
    assert "no adapter for version 9" in capsys.readouterr().err
    assert main(["compare", "--store", store, "--versions", "0", "1", "--prompts", "0"]) == 2
    assert "--prompts must be between 1 and 50" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"save_steps": 5}, "each update is checkpointed"),
        ({"save_strategy": "no"}, "save_strategy is 'no'"),
        ({"save_strategy": "epoch"}, "save_strategy is 'epoch'"),
        ({"save_total_limit": 3}, "save_total_limit is 3"),
        ({"save_only_model": True}, "save_only_model"),
        ({"adapter_history": -1}, "adapter_history must be an integer >= 0"),
    ],
)
def test_adapter_history_refuses_contradictory_checkpoint_settings(tmp_path, fields, message):
    from openclaw_trl.config import OpenClawConfig

    with pytest.raises(ValueError, match=message):
        OpenClawConfig(output_dir=str(tmp_path), report_to="none", **fields)


def test_adapter_history_sets_the_checkpoint_schedule_and_zero_leaves_it_alone(tmp_path):
    from openclaw_trl.config import OpenClawConfig

    config = OpenClawConfig(output_dir=str(tmp_path), report_to="none", adapter_history=4)
    assert (config.save_steps, config.save_total_limit) == (1, 4)
    assert OpenClawConfig(output_dir=str(tmp_path), report_to="none", save_total_limit=4, adapter_history=4)
    off = OpenClawConfig(output_dir=str(tmp_path), report_to="none", adapter_history=0, save_steps=25)
    assert (off.save_steps, off.save_total_limit) == (25, None)


def test_store_keeps_versions_pause_and_rolled_back_samples_across_reopening(tmp_path):
    from openclaw_trl.store import AdapterVersion, Store

    with Store(tmp_path / "s.sqlite") as store:
        ids = []
        for step in (1, 2, 3):
            sample = TrainingSample(
                turn_id=step,
                prompt_ids=[1],
                completion_ids=[2],
                sampling_logprobs=[-1.0],
                temperature=1.0,
                policy_version=0,
                reward=1.0,
            )
            ids.append(store.queue.add_sample(sample))
            store.queue.mark_consumed([ids[-1]], step)
            store.versions.record_adapter_version(AdapterVersion(step, 1.0 + step, 1, {"reward": 0.5}))
        store.versions.record_adapter_version(AdapterVersion(4, 5.0, 0, restored_from=1))
        assert store.versions.mark_rolled_back([2, 3], "version 1 restored as version 4") == 2
        store.versions.set_learning_paused(True)
    with Store(tmp_path / "s.sqlite") as store:
        assert store.versions.learning_paused()
        assert [(v.version, v.restored_from) for v in store.versions.adapter_versions()] == [
            (4, 1),
            (3, None),
            (2, None),
            (1, None),
        ]
        assert [v.version for v in store.versions.adapter_versions(up_to=2, limit=1)] == [2]
        assert store.versions.adapter_versions()[1].metrics == {"reward": 0.5}
        assert store.versions.count_rolled_back() == 2 and store.versions.count_consumed_at(2) == 1
        assert (
            store.queue.requeue_after(1) == 2 and store.queue.count_waiting() == 0
        )  # a resume never re-trains them
        store.versions.set_learning_paused(False)
        assert not store.versions.learning_paused()
