"""Helpers for the server tests: the real stack (HF engine + store + collector) on a free local port.

``ScriptedEngine`` wraps the real engine so a test can make the tiny random model "say" a given text (a tool
call, a ``<think>`` block): the ids are the tokenizer's, streamed token by token through ``on_token``, and
their log-probs are the real policy's (``score``), so everything downstream sees a genuine completion.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

from openclaw_trl.engines.base import Completion
from openclaw_trl.records import Turn


class ScriptedEngine:
    """The real engine, except that ``script(prompt_ids)`` may dictate the completion text."""

    def __init__(self, engine, script: Callable[[list[int]], str | None] | None = None):
        self.engine = engine
        self.script = script
        self.tokenizer = engine.tokenizer
        self.generations_ended = 0  # calls of generate that returned or raised (a test waits on it)

    @property
    def policy_version(self) -> int:
        return self.engine.policy_version

    def generate(self, requests, on_token=None, priority="serve", timeout_s=None):
        try:
            return self._generate(requests, on_token, priority, timeout_s)
        finally:
            self.generations_ended += 1

    def _generate(self, requests, on_token, priority, timeout_s):
        text = self.script(requests[0].prompt_ids) if self.script and len(requests) == 1 else None
        if text is None:
            return self.engine.generate(requests, on_token=on_token, priority=priority, timeout_s=timeout_s)
        req = requests[0]
        ids = self.tokenizer.encode(text + "<|im_end|>", add_special_tokens=False)
        scores = self.engine.score(
            [req.prompt_ids], [ids], weights="policy", temperature=1.0, priority="serve"
        )
        lps = scores.logprobs[0]
        for tid in ids:
            if on_token:
                on_token(0, tid)
        return [Completion(list(ids), list(lps), "stop", self.engine.policy_version)]

    def score(self, *args, **kwargs):
        return self.engine.score(*args, **kwargs)

    def publish_adapter(self, adapter, version: int) -> None:
        self.engine.publish_adapter(adapter, version)

    def close(self) -> None:
        pass


@contextlib.contextmanager
def scripted_hf_engine(model_dir, max_batch_size: int = 16):
    """A real ``HFEngine`` on ``model_dir`` wrapped in a ``ScriptedEngine``; closed on exit."""
    from openclaw_trl.engines.hf import HFEngine

    eng = HFEngine(model_dir, max_batch_size=max_batch_size)
    try:
        yield ScriptedEngine(eng)
    finally:
        eng.close()


@dataclass
class Stack:
    engine: object
    store: object
    collector: object
    app: object
    server: object

    @property
    def url(self) -> str:
        return self.server.url


@contextlib.contextmanager
def running_stack(engine, db_path, ui: bool = False, sessions=None, **settings):
    """Store + collector + app around ``engine``, served by uvicorn on 127.0.0.1 (a free port);
    ``sessions``: the collector's ``SessionConfig`` (default: its defaults)."""
    from openclaw_trl.serving.app import ServerThread, create_app
    from openclaw_trl.serving.settings import ServerSettings
    from openclaw_trl.sessions import TurnCollector
    from openclaw_trl.store import Store

    store = Store(db_path)
    collector = TurnCollector(store, sessions)
    settings.setdefault("default_max_tokens", 8)
    app = create_app(engine, collector, store, ServerSettings(ui=ui, **settings))
    server = ServerThread(app).start()
    try:
        yield Stack(engine, store, collector, app, server)
    finally:
        server.stop()
        store.close()


def turns(store) -> list[Turn]:
    return list(store.queries.iter_turns(include_private=True))
