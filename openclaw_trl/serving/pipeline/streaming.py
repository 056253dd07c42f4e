"""Streamed turns: ``TurnStream`` (one turn's deltas as they are sampled), ``StreamDecoder`` (token ids ->
deltas) and ``StopTrimmer`` (the ``stop`` text is not returned).

A delta is a dict of the internal chat format's assistant fields: ``content`` / ``reasoning_content`` text, or
``tool_calls`` entries with their ``index`` (the chat-completions protocol sends them as its chunks' deltas,
the Responses protocol turns them into its events). Every protocol's stream and the UI stream through
``TurnStream``; the non-streaming reply trims its decoded content with the same ``StopTrimmer``, so every path
returns the same text for the same tokens.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any


class TurnStream:
    """One turn streamed to the event loop: ``async with service.stream(prep) as turn`` starts generating,
    ``async for delta in turn`` yields the OpenAI deltas as tokens are sampled, then ``turn.result`` is the
    stored ``TurnResult``.

    Tokens cross from the engine thread (``service.executor``) to the event loop through a queue; the
    ``Generation`` comes back as the result of that thread's future, and the ``TurnResult`` as the result of
    the thread that stores it. The turn is stored (``service.finish``, with ``on_recorded``) when the deltas
    end, before the caller sends its final chunk; a turn left before that (an error, the client went away)
    stores nothing and is aborted with the collector when the ``async with`` block exits: the client never
    saw the reply its next message would judge.
    """

    def __init__(self, service, prep, on_recorded=None):
        self.service, self.prep, self.on_recorded = service, prep, on_recorded
        self.result = None  # the TurnResult, once the turn is stored (set on the event loop)

    async def __aenter__(self) -> TurnStream:
        loop = asyncio.get_running_loop()
        self._tokens: asyncio.Queue = asyncio.Queue()

        def on_token(token_id: int) -> None:
            try:
                loop.call_soon_threadsafe(self._tokens.put_nowait, token_id)
            except RuntimeError:  # the event loop is closed (shutdown): nobody is listening any more
                pass

        self._future = loop.run_in_executor(self.service.executor, self.service.generate, self.prep, on_token)
        self._future.add_done_callback(lambda _f: self._tokens.put_nowait(None))
        return self

    async def __aexit__(self, *exc) -> None:
        if self.result is None:  # failed, or the caller went away: no turn to store
            self.service.abort(self.prep)

    async def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        decoder = self.service.stream_parser(self.prep)
        while (tid := await self._tokens.get()) is not None:
            for delta in decoder.feed(tid):
                yield delta
        generation = await self._future
        for delta in decoder.finish():
            yield delta
        loop = asyncio.get_running_loop()
        self.result = await loop.run_in_executor(
            None, self.service.finish, self.prep, generation, decoder.message(), self.on_recorded
        )


class StopTrimmer:
    """OpenAI semantics for ``stop``: the stop text is not returned (the engine keeps it in the ids).

    While streaming, content that could still be the start of a stop string is held back.
    """

    def __init__(self, stops: list[str]):
        self.stops = stops
        self.hold = max((len(s) for s in stops), default=1) - 1
        self.buf = ""
        self.stopped = False

    def feed(self, text: str, final: bool = False) -> str:
        if self.stopped:
            return ""
        self.buf += text
        cut = min((i for i in (self.buf.find(s) for s in self.stops) if i >= 0), default=-1)
        if cut >= 0:
            out, self.buf, self.stopped = self.buf[:cut], "", True
            return out
        if final or not self.hold:
            out, self.buf = self.buf, ""
            return out
        out, self.buf = self.buf[: -self.hold], self.buf[-self.hold :]
        return out


class StreamDecoder:
    """Token ids -> deltas (``content`` / ``reasoning_content`` / ``tool_calls`` with ``index``).

    Wraps ``openclaw_trl.chat``'s incremental decoder + parser, applies the ``stop`` trimming to content
    and accumulates what was streamed: the stored message is exactly what the client saw (tool-call ids
    included, so the client's echo of them matches the stored turn).
    """

    def __init__(self, tokenizer, stops: list[str], start_in_reasoning: bool = False):
        from openclaw_trl.chat import IncrementalDecoder, StreamParser, tokenizer_end_tokens

        self.text = IncrementalDecoder(tokenizer)
        self.parser = StreamParser(
            start_in_reasoning=start_in_reasoning, end_tokens=tokenizer_end_tokens(tokenizer)
        )
        self.trim = StopTrimmer(stops) if stops else None
        self.content, self.reasoning, self.tool_calls = [], [], []

    def _post(self, deltas: list[dict], final: bool = False) -> list[dict]:
        out = []
        for d in deltas:
            if self.trim is not None and d.get("content") is not None:
                d = {k: v for k, v in d.items() if k != "content"} | {"content": self.trim.feed(d["content"])}
                if not d["content"]:
                    del d["content"]
            if d:
                out.append(d)
        if final and self.trim is not None and (rest := self.trim.feed("", final=True)):
            out.append({"content": rest})
        for d in out:
            self.content.append(d.get("content") or "")
            self.reasoning.append(d.get("reasoning_content") or "")
            self.tool_calls.extend(
                {k: v for k, v in c.items() if k != "index"} for c in d.get("tool_calls") or []
            )
        return out

    def feed(self, token_id: int) -> list[dict]:
        return self._post(self.parser.feed(self.text.push(token_id)))

    def finish(self) -> list[dict]:
        # text still held back by the decoder (e.g. an incomplete UTF-8 sequence) goes out before the end
        return self._post(self.parser.feed(self.text.flush()) + self.parser.finish(), final=True)

    def message(self) -> dict:
        """The assistant message the stream spelled out (``decode_completion``'s shape)."""
        content, reasoning = "".join(self.content), "".join(self.reasoning)
        return {
            "content": content if content or not self.tool_calls else None,
            "reasoning_content": reasoning or None,
            "tool_calls": list(self.tool_calls),
        }
