"""The last step of a chat turn: the generated reply parsed, its log-probs computed and the turn stored
(``TurnRecorder.finish`` -> ``TurnResult``), before the reply leaves.

The turn, its Best-of-N group and what the caller's ``on_recorded`` writes (e.g. a Responses id) are one store
transaction: all of it is stored, or nothing when any part fails.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from openclaw_trl.serving.pipeline.generation import ChatGenerator, Generation, as_message
from openclaw_trl.serving.pipeline.prepare import PreparedChat
from openclaw_trl.serving.pipeline.results import ChoiceLogprobs, OpenClawMeta, TokenLogprob, TopLogprob

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TurnResult:
    """What one generated turn became: parsed message, stored turn id, policy version.

    ``recorded``: what the caller's ``on_recorded`` returned inside the turn's transaction (the Responses
    route's final response object), handed back with the result."""

    generation: Generation
    message: dict  # {"role": "assistant", "content", "reasoning_content"?, "tool_calls"?}
    finish_reason: str
    turn_id: int | str | None
    policy_version: int
    logprobs: ChoiceLogprobs | None = None
    best_of_n: dict | None = None  # Best-of-N: n, served_index, scores, group_id (``openclaw.best_of_n``)
    recorded: Any = None


def openclaw_meta(prep: PreparedChat, result: TurnResult) -> OpenClawMeta:
    """The ``openclaw`` object of a reply (``OpenClawMeta``)."""
    return OpenClawMeta(
        turn_id=result.turn_id,
        session_id=prep.ctx.session_key,
        turn_type=prep.ctx.turn_type,
        next_state_of=prep.ctx.next_state_of,
        policy_version=result.policy_version,
        temperature=prep.sampling.temperature,
        best_of_n=result.best_of_n,
    )


class TurnRecorder:
    """Parses a ``Generation``, adds the requested log-probs and commits the turn through the collector."""

    def __init__(self, engine, collector, generator: ChatGenerator, best_of_n=None):
        self.engine, self.collector, self.generator, self.best_of_n = engine, collector, generator, best_of_n
        self.tokenizer = generator.tokenizer

    def finish(
        self,
        prep: PreparedChat,
        generation: Generation,
        streamed: dict | None = None,
        on_recorded: Callable[[TurnResult], Any] | None = None,
    ) -> TurnResult:
        """Blocking: parse the completion, compute requested logprobs and store the turn (before replying).

        ``streamed``: the message a stream already sent (``StreamDecoder.message()``), stored as sent.
        ``on_recorded(result)``: more rows that belong to the turn, written in its transaction; what it returns
        is ``TurnResult.recorded``.
        """
        completion = generation.completion
        parsed = (
            self.generator.decoded_message(prep, completion) if streamed is None else as_message(streamed)
        )
        finish = generation.finish_reason
        if parsed.get("tool_calls") and finish == "stop":
            finish = "tool_calls"
        logprobs = self._logprobs(prep, completion) if prep.logprobs else None
        result = TurnResult(generation, parsed, finish, None, generation.policy_version, logprobs)
        done: list[TurnResult] = []

        def with_the_turn(turn_id: int) -> None:  # in the turn's store transaction, on this thread
            best_of_n = None if generation.group is None else self._record_group(prep, generation, turn_id)
            stored = dataclasses.replace(result, turn_id=turn_id, best_of_n=best_of_n)
            recorded = on_recorded(stored) if on_recorded is not None else None
            done.append(dataclasses.replace(stored, recorded=recorded))

        self.record(prep, generation, parsed, with_the_turn)
        return done[0]

    def _record_group(self, prep: PreparedChat, generation: Generation, turn_id: int) -> dict:
        """Store the Best-of-N group of the turn being recorded (in its transaction); what the reply reports
        about it."""
        group = generation.group
        group_id = self.best_of_n.record(
            turn_id,
            prep.prompt_ids,
            prep.sampling.temperature,
            group.completions,
            group.texts,
            group.choice,
        )
        return group.choice.summary(group_id)

    def record(
        self,
        prep: PreparedChat,
        generation: Generation,
        message: dict,
        also: Callable[[int], Any] | None = None,
    ) -> int:
        """Commit the turn through the collector (before the reply goes out); returns its id. ``also(turn_id)``
        writes in the same transaction (``TurnCollector.record_turn``).

        The stored temperature is the sampling temperature: 0 for a greedy turn (never trained on; its
        log-probs are at T = 1, see ``engines/base.py``), else the one the sampling log-probs are at, which
        is what the trainer compares with its own to reuse or recompute them.
        ``message`` is the assistant message exactly as the client received it.
        """
        return self.collector.record_turn(
            prep.ctx,
            prep.prompt_ids,
            generation.completion,
            prep.sampling.temperature,
            completion_text=generation.text,
            response_message=message,
            also=also,
        )

    def abort(self, prep: PreparedChat) -> None:
        """Generation failed or the client left before the turn was stored (honours ``session_done``)."""
        try:
            self.collector.abort(prep.ctx)
        except Exception:  # bookkeeping of a failed request must not mask the original error
            logger.exception("collector.abort failed")

    def _logprobs(self, prep: PreparedChat, completion) -> ChoiceLogprobs:
        """OpenAI ``choices[].logprobs``: the sampling log-probs, plus the policy's top-K when asked."""
        ids = completion.token_ids
        top_ids = top_lps = None
        if prep.top_logprobs and ids:
            scores = self.engine.score(
                [prep.prompt_ids],
                [ids],
                weights="policy",
                top_k=prep.top_logprobs,
                temperature=prep.sampling.logprob_temperature,
                priority="serve",
            )
            top_ids, top_lps = scores.topk_ids[0], scores.topk_logprobs[0]
        content = []
        for t, (tid, lp) in enumerate(zip(ids, completion.logprobs, strict=False)):
            top = []
            if top_ids is not None:
                top = [self._entry(TopLogprob, i, v) for i, v in zip(top_ids[t], top_lps[t], strict=False)]
            content.append(self._entry(TokenLogprob, tid, lp, top_logprobs=top))
        return ChoiceLogprobs(content=content)

    def _entry(self, kind, token_id, logprob, **more):
        token = self.tokenizer.decode([token_id])
        return kind(token=token, logprob=_lp(logprob), bytes=list(token.encode()), **more)


def _lp(value) -> float:
    """A log-prob for JSON: -inf becomes -9999.0 (OpenAI's convention), NaN too."""
    value = float(value)
    return value if math.isfinite(value) else -9999.0
