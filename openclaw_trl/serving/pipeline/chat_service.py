"""``ChatService``: one chat turn from request body to stored turn, shared by the API and the UI.

The pipeline has three steps, each a module with one job, and each step hands its result to the next by
return value:

1. ``prepare`` (``prepare``, on a worker thread): a ``TurnRequest`` (``turn``; each protocol builds it from its
   own wire body) rendered to prompt ids, the context's room checked, the turn opened with the collector ->
   ``PreparedChat`` (frozen);
2. ``generate`` (``generation``, on a generation thread of ``executor``): the engine samples the reply (with
   Best-of-N, ``n`` candidates quick-judged) -> ``Generation`` (the completion, its text, the candidates);
3. ``finish`` (``recording``, on a worker thread): parse the reply, add the requested log-probs and store the
   turn through the collector before the reply leaves -> ``TurnResult``; a failure or a client that left
   before it aborts the turn with the collector instead (``abort``).

``complete`` runs 2-3 for a whole reply, ``stream`` runs them for a streamed one (``streaming.TurnStream``).
The protocols' routes (``serving.protocols``) and the Gradio UI (``serving.ui``) only adapt it; per-turn signals (👍/👎,
corrections, undo) go to the collector directly.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from openclaw_trl.serving.pipeline.generation import ChatGenerator, Generation
from openclaw_trl.serving.pipeline.prepare import ChatPreparer, PreparedChat, context_limit
from openclaw_trl.serving.pipeline.recording import TurnRecorder, TurnResult
from openclaw_trl.serving.pipeline.streaming import StreamDecoder, TurnStream
from openclaw_trl.serving.pipeline.turn import TurnRequest
from openclaw_trl.serving.settings import ServerSettings


class ChatService:
    """The in-process chat API: what ``/v1/chat/completions``, ``/v1/responses`` and the Gradio UI call.

    ``best_of_n``: a ``judging.BestOfN`` (its ``n`` candidates per trainable turn), or None for one sample.
    ``status()``: the trainer's live view (see ``status``).
    """

    def __init__(
        self,
        engine,
        collector,
        store,
        settings: ServerSettings,
        status: Callable[[], dict] | None = None,
        best_of_n=None,
    ):
        self.engine, self.collector, self.store, self.settings = engine, collector, store, settings
        self._status = status
        self.best_of_n = best_of_n
        self.tokenizer = engine.tokenizer
        self.context_limit = context_limit(engine, settings.max_context_len)
        self.preparer = ChatPreparer(
            self.tokenizer, collector, store, settings, self.context_limit, best_of_n
        )
        self.generator = ChatGenerator(engine, self.tokenizer, best_of_n)
        self.recorder = TurnRecorder(engine, collector, self.generator, best_of_n)
        self.executor = ThreadPoolExecutor(settings.generation_threads, thread_name_prefix="openclaw-gen")

    # -- the pipeline --------------------------------------------------------------------------------

    def prepare(self, turn: TurnRequest) -> PreparedChat:
        """Blocking: step 1 (``ChatPreparer.prepare``); raises ``ApiError`` (4xx)."""
        return self.preparer.prepare(turn)

    def generate(self, prep: PreparedChat, on_token: Callable[[int], None] | None = None) -> Generation:
        """Blocking: step 2 (``ChatGenerator.generate``)."""
        return self.generator.generate(prep, on_token)

    def finish(
        self,
        prep: PreparedChat,
        generation: Generation,
        streamed: dict | None = None,
        on_recorded: Callable[[TurnResult], Any] | None = None,
    ) -> TurnResult:
        """Blocking: step 3 (``TurnRecorder.finish``)."""
        return self.recorder.finish(prep, generation, streamed, on_recorded)

    def abort(self, prep: PreparedChat) -> None:
        """Generation failed or the client left before the turn was stored (honours ``session_done``)."""
        self.recorder.abort(prep)

    async def complete(
        self, prep: PreparedChat, on_recorded: Callable[[TurnResult], Any] | None = None
    ) -> TurnResult:
        """The whole turn, awaited: generated in ``executor`` (the engine batches concurrent callers), then
        parsed and stored; a failure, or the caller going away, aborts it with the collector."""
        loop = asyncio.get_running_loop()
        try:
            generation = await loop.run_in_executor(self.executor, self.generate, prep, None)
            return await asyncio.to_thread(self.finish, prep, generation, None, on_recorded)
        except BaseException:
            await asyncio.to_thread(self.abort, prep)
            raise

    def stream(
        self, prep: PreparedChat, on_recorded: Callable[[TurnResult], Any] | None = None
    ) -> TurnStream:
        """The turn streamed to the event loop (the API's SSE streams and the UI): see ``TurnStream``."""
        return TurnStream(self, prep, on_recorded)

    def stream_parser(self, prep: PreparedChat) -> StreamDecoder:
        return self.generator.stream_parser(prep)

    # -- status and shutdown -------------------------------------------------------------------------

    def status(self) -> dict:
        """The live view of ``/v1/status`` and the learning panel: the trainer's (``status``), completed with
        ``policy_version``, ``memory`` (the engine's budgets, when it reports them), ``samples_waiting`` and
        ``correction_window`` (the 👎s waiting for a correction: ``openclaw_trl.sessions.correction_window_view``)."""
        out = dict(self._status() if self._status else {})
        out.setdefault("policy_version", getattr(self.engine, "policy_version", 0))
        if callable(getattr(self.engine, "memory", None)):  # each memory budget: bytes held / budget
            out.setdefault("memory", self.engine.memory())
        if "samples_waiting" not in out and hasattr(self.store.queue, "count_waiting"):
            out["samples_waiting"] = self.store.queue.count_waiting()
        if "correction_window" not in out and hasattr(self.store.holds, "open_correction_windows"):
            from openclaw_trl.sessions import correction_window_view

            window = self.collector.config.correction_window_s
            out["correction_window"] = correction_window_view(self.store, window)
        return out

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)
