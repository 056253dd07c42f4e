"""The recorded and simulated sample sources (the live one is the server itself).

Each receives only what it uses and puts turns through the same collector and scorer as live chat:

* ``replay``: recorded conversations (``replay_path``, JSONL) are recorded and all judged before training
  starts, so a replay run is reproducible (:func:`replay_and_judge`: the tokenizer, the engine that scores
  them, the collector and the scorer).
* ``simulated``: a simulated user (``simulated_user``, ``package.module:Class``) talks to the running server
  over HTTP in a background thread (:func:`start_simulation`: a ``Simulation`` record, the server's URL, the
  event that stops it and what to call when it crashes). The thread is returned to the caller, who owns it
  (it sets the event and joins the thread when the run ends).

A source that crashes makes the trainer's wait for samples raise its error, so the run ends with it.
"""

from __future__ import annotations

import importlib
import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Simulation:
    """What the simulated source needs from the recipe.

    ``user``: the simulated user's class (``package.module:Class``); ``sessions``: conversations to hold
    (0: until training stops); ``seed``: the seed of the first round of 4 conversations (each round adds
    1); ``model``: the model name sent to the server; ``max_tokens``: the replies' length; ``api_key``: the
    bearer key of its requests (on a server with users, the key that makes it that user).
    """

    user: str
    sessions: int
    seed: int
    model: str
    max_tokens: int
    api_key: str | None = None  # the bearer key its requests carry (a user's key on a server with users)

    @classmethod
    def from_config(cls, config, api_key: str | None = None) -> Simulation:
        """The fields of an ``OpenClawConfig`` (replies of at most 64 tokens, or ``max_completion_length``),
        its requests carrying ``api_key``."""
        return cls(
            user=config.simulated_user,
            sessions=config.simulated_sessions,
            seed=config.seed,
            model=config.served_model_name,
            max_tokens=min(64, config.max_completion_length or 64),
            api_key=api_key,
        )


def start_simulation(
    simulation: Simulation, server_url: str, stop: threading.Event, fail: Callable[[str], object]
) -> threading.Thread:
    """Simulated conversations against the server at ``server_url`` until ``stop`` is set (or
    ``simulation.sessions`` are done), in a background thread, started and returned. If it crashes,
    ``fail(message)`` is called (the store's ``fail_waiters``: the trainer's wait for samples raises it)."""
    from openclaw_trl.simulation import run_conversations

    module, _, name = simulation.user.partition(":")
    user = getattr(importlib.import_module(module), name)()
    limit = simulation.sessions

    def loop():
        done, round_ = 0, 0
        while not stop.is_set() and (limit == 0 or done < limit):
            n = 4 if limit == 0 else min(4, limit - done)
            logs = run_conversations(
                server_url,
                user,
                n,
                seed=simulation.seed + round_,
                model=simulation.model,
                max_tokens=simulation.max_tokens,
                api_key=simulation.api_key,
                should_stop=stop.is_set,
            )
            done += len(logs)
            round_ += 1

    thread = threading.Thread(
        target=_guard(loop, "simulation", fail), name="openclaw-simulation", daemon=True
    )
    thread.start()
    return thread


def replay_conversations(path: str | Path, tokenizer, engine, collector, temperature: float) -> int:
    """Feed recorded conversations through the collector (and so the scorer); returns turns recorded.

    Each JSONL row is ``{"session_id": str, "messages": [...]}``. Every assistant message is a turn: its
    prompt is the messages before it, rendered with the chat template; its completion ids are the template
    text of the message after that prompt (text data has no sampled ids), and its "sampling" log-probs are
    scored by ``engine``'s current policy at ``temperature``, so the trainer treats it as on-policy data of that version. A message
    whose rendering does not extend the prompt rendering is skipped (its ids after the prompt would not be
    the ids of the message alone).
    """
    from openclaw_trl.chat import render_prompt_ids
    from openclaw_trl.engines.base import Completion

    recorded = 0
    for line_no, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        row = json.loads(line)
        messages, key = row["messages"], str(row.get("session_id") or f"replay-{line_no}")
        for i, message in enumerate(messages):
            if message.get("role") != "assistant" or i == 0:
                continue
            prompt_msgs = messages[:i]
            ctx = collector.begin(prompt_msgs, tools=row.get("tools"), session_key=key, turn_type="main")
            prompt_ids = render_prompt_ids(tokenizer, prompt_msgs, row.get("tools"))
            full = tokenizer.apply_chat_template(
                prompt_msgs + [message], tools=row.get("tools"), tokenize=False
            )
            prompt_text = tokenizer.apply_chat_template(
                prompt_msgs, tools=row.get("tools"), tokenize=False, add_generation_prompt=True
            )
            if not full.startswith(prompt_text):
                logger.warning("replay %s: assistant message %d does not extend its prompt; skipped", key, i)
                collector.abort(ctx)
                continue
            completion_ids = tokenizer(full[len(prompt_text) :].rstrip("\n"), add_special_tokens=False)[
                "input_ids"
            ]
            scores = engine.score([prompt_ids], [completion_ids], weights="policy", temperature=temperature)
            completion = Completion(completion_ids, scores.logprobs[0], "stop", engine.policy_version)
            collector.record_turn(ctx, prompt_ids, completion, temperature, response_message=dict(message))
            recorded += 1
        if messages and messages[-1].get("role") in ("user", "tool"):
            collector.abort(
                collector.begin(messages, tools=row.get("tools"), session_key=key, session_done=True)
            )
        else:
            collector.end_session(key)
    return recorded


def replay_and_judge(path: str | Path, tokenizer, engine, collector, scorer, temperature: float) -> None:
    """Finite, recorded data: record the conversations of ``path`` (:func:`replay_conversations`) and judge
    all of them with ``scorer`` before training, so a replay run is reproducible. A replay that fails
    (unreadable file, a bad row) raises :class:`SampleSourceError` with the cause."""
    from openclaw_trl.store import SampleSourceError

    try:
        n = replay_conversations(path, tokenizer, engine, collector, temperature)
    except Exception as exc:
        raise SampleSourceError(f"the replay source crashed: {type(exc).__name__}: {exc}") from exc
    judged = scorer.run_until_idle()
    logger.info("replayed %d turns from %s, judged %d", n, path, judged)


def _guard(fn, name: str, fail: Callable[[str], object]):
    """``fn`` for a source thread: if it crashes, ``fail`` gets its error (the trainer's wait for samples
    raises it and the run ends with it, instead of waiting forever)."""

    def run():
        try:
            fn()
        except Exception as exc:
            logger.exception("%s thread failed", name)
            fail(f"the {name} source crashed: {type(exc).__name__}: {exc}")

    return run
