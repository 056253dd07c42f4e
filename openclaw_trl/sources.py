"""The recorded and simulated sample sources (the live one is the server itself).

Both take the runtime's components (``config``, ``tokenizer``, ``engine``, ``collector``, ``scorer``,
``store``, ``stop_event``, ``threads``) and put turns through the same collector and scorer as live chat:

* ``replay``: recorded conversations (``replay_path``, JSONL) are recorded and all judged before training
  starts, so a replay run is reproducible (:func:`replay_and_judge`).
* ``simulated``: a simulated user (``simulated_user``, ``package.module:Class``) talks to the running server
  over HTTP in a background thread (:func:`start_simulation`).

A source that crashes makes the trainer's wait for samples raise its error, so the run ends with it.
"""

from __future__ import annotations

import importlib
import json
import logging
import threading
from pathlib import Path

logger = logging.getLogger(__name__)


def start_simulation(runtime, server_url: str) -> threading.Thread:
    """Simulated conversations against the server at ``server_url`` until training stops (or
    ``simulated_sessions`` are done), in a background thread added to ``runtime.threads``."""
    from openclaw_trl.simulation import run_conversations

    module, _, name = runtime.config.simulated_user.partition(":")
    user = getattr(importlib.import_module(module), name)()
    limit = runtime.config.simulated_sessions

    def loop():
        done, round_ = 0, 0
        while not runtime.stop_event.is_set() and (limit == 0 or done < limit):
            n = 4 if limit == 0 else min(4, limit - done)
            logs = run_conversations(
                server_url,
                user,
                n,
                seed=runtime.config.seed + round_,
                model=runtime.config.served_model_name,
                max_tokens=min(64, runtime.config.max_completion_length or 64),
                should_stop=runtime.stop_event.is_set,
            )
            done += len(logs)
            round_ += 1

    thread = threading.Thread(
        target=_guard(loop, "simulation", runtime), name="openclaw-simulation", daemon=True
    )
    thread.start()
    runtime.threads.append(thread)
    return thread


def replay_conversations(runtime, path: str | Path) -> int:
    """Feed recorded conversations through the collector (and so the scorer); returns turns recorded.

    Each JSONL row is ``{"session_id": str, "messages": [...]}``. Every assistant message is a turn: its
    prompt is the messages before it, rendered with the chat template; its completion ids are the template
    text of the message after that prompt (text data has no sampled ids), and its "sampling" log-probs are
    scored by the current policy, so the trainer treats it as on-policy data of that version. A message
    whose rendering does not extend the prompt rendering is skipped (its ids after the prompt would not be
    the ids of the message alone).
    """
    from openclaw_trl.chat import render_prompt_ids
    from openclaw_trl.engines.base import Completion

    tok, engine, collector = runtime.tokenizer, runtime.engine, runtime.collector
    temperature = runtime.config.temperature
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
            prompt_ids = render_prompt_ids(tok, prompt_msgs, row.get("tools"))
            full = tok.apply_chat_template(prompt_msgs + [message], tools=row.get("tools"), tokenize=False)
            prompt_text = tok.apply_chat_template(
                prompt_msgs, tools=row.get("tools"), tokenize=False, add_generation_prompt=True
            )
            if not full.startswith(prompt_text):
                logger.warning("replay %s: assistant message %d does not extend its prompt; skipped", key, i)
                collector.abort(ctx)
                continue
            completion_ids = tok(full[len(prompt_text) :].rstrip("\n"), add_special_tokens=False)["input_ids"]
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


def replay_and_judge(runtime) -> None:
    """Finite, recorded data: judge all of it before training, so a replay run is reproducible. A replay
    that fails (unreadable file, a bad row) raises :class:`SampleSourceError` with the cause."""
    from openclaw_trl.store import SampleSourceError

    path = runtime.config.replay_path
    try:
        n = replay_conversations(runtime, path)
    except Exception as exc:
        raise SampleSourceError(f"the replay source crashed: {type(exc).__name__}: {exc}") from exc
    judged = runtime.scorer.run_until_idle()
    logger.info("replayed %d turns from %s, judged %d", n, path, judged)


def _guard(fn, name: str, runtime):
    """``fn`` for a source thread: if it crashes, the trainer's wait for samples raises its error (the run
    then ends with it) instead of waiting forever."""

    def run():
        try:
            fn()
        except Exception as exc:
            logger.exception("%s thread failed", name)
            runtime.store.queue.fail_waiters(f"the {name} source crashed: {type(exc).__name__}: {exc}")

    return run
