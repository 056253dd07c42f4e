"""The first step of a chat turn: a ``TurnRequest`` (validated by its protocol) rendered to prompt ids, its
sampling values fixed and the turn opened with the collector (``ChatPreparer.prepare`` -> ``PreparedChat``).

Everything that can reject the request runs *before* ``collector.begin``: a rejected request never gives its
last message as the next state of the previous turn. Every refusal is an ``ApiError`` (4xx).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from openclaw_trl.engines.base import SamplingParams
from openclaw_trl.serving.errors import ApiError
from openclaw_trl.serving.pipeline.turn import TurnRequest
from openclaw_trl.serving.settings import ServerSettings

logger = logging.getLogger(__name__)

UNKNOWN_CONTEXT_LEN = 4096
"""The context of a model whose engine and config state none (``max_context_len: None``)."""


@dataclass(frozen=True)
class PreparedChat:
    """A validated request, rendered to token ids and opened with the collector: ready for the engine.

    Frozen: made once on the thread that prepares the request, then only read by the steps that follow.
    """

    model: str
    messages: list[dict]
    tools: list[dict] | None
    prompt_ids: list[int]
    sampling: SamplingParams
    ctx: Any = None  # the collector's RequestContext (session, turn type, next-state bookkeeping)
    logprobs: bool = False
    top_logprobs: int = 0
    stream: bool = False
    include_usage: bool = False
    candidates: int = 1  # Best-of-N: candidates sampled for this turn (1 = the reply is the one sample)
    created: int = field(default_factory=lambda: int(time.time()))


class ChatPreparer:
    """Validation, limits, the chat template, the sampling values and the collector's ``begin``.

    ``best_of_n``: a ``judging.BestOfN`` (its ``n`` candidates per trainable turn), or None for one sample.
    """

    def __init__(
        self, tokenizer, collector, store, settings: ServerSettings, context_limit: int, best_of_n=None
    ):
        self.tokenizer, self.collector, self.store, self.settings = tokenizer, collector, store, settings
        self.context_limit, self.best_of_n = context_limit, best_of_n

    def prepare(self, turn: TurnRequest) -> PreparedChat:
        """Render a turn's conversation to prompt ids, fix its sampling values, then open it with the collector."""
        prompt_ids = self._prompt_ids(turn.messages, turn.tools)
        sampling = self._sampling(turn, len(prompt_ids))
        ctx = self._begin(turn)
        candidates = 1
        if self._trainable(ctx):
            # the training distribution: the full softmax at the training temperature (no top-p / top-k)
            sampling = dataclasses.replace(
                sampling, temperature=self.settings.train_temperature, top_p=1.0, top_k=0
            )
            candidates = self.best_of_n.n if self.best_of_n is not None else 1
        return PreparedChat(
            model=turn.model,
            messages=turn.messages,
            tools=turn.tools,
            prompt_ids=prompt_ids,
            sampling=sampling,
            ctx=ctx,
            logprobs=turn.logprobs,
            top_logprobs=turn.top_logprobs,
            stream=turn.stream,
            include_usage=turn.include_usage,
            candidates=candidates,
        )

    def _prompt_ids(self, messages: list[dict], tools: list[dict] | None) -> list[int]:
        """The rendered prompt, refused when it exceeds ``max_prompt_tokens`` (when that is set)."""
        prompt_ids = self._render(messages, tools)
        limits = self.settings.limits
        if limits.max_prompt_tokens is not None and len(prompt_ids) > limits.max_prompt_tokens:
            raise limits.over(
                "max_prompt_tokens", len(prompt_ids), "messages", "The rendered prompt (tokens)"
            )
        return prompt_ids

    def _sampling(self, turn: TurnRequest, n_prompt: int) -> SamplingParams:
        """The request's sampling values, the settings' defaults where it omits them.

        ``max_new_tokens`` = the asked ``max_tokens``, clamped to ``max_tokens_cap`` and to the context left;
        a prompt that leaves less than ``min(min_reply_tokens, asked, half the context)`` is refused
        (``context_length_exceeded``).
        """
        settings = self.settings
        asked = min(
            turn.max_tokens or settings.default_max_tokens,
            settings.max_tokens_cap,
        )
        room = self.context_limit - n_prompt
        needed = min(settings.min_reply_tokens, asked, self.context_limit // 2)
        if room < needed:
            raise ApiError(
                400,
                f"This model's maximum context length is {self.context_limit} tokens. However, your messages "
                f"resulted in {n_prompt} tokens, which leaves {max(room, 0)} for the reply (at least {needed} "
                "needed). Please reduce the length of the messages.",
                "context_length_exceeded",
                "messages",
            )
        return SamplingParams(
            temperature=settings.default_temperature if turn.temperature is None else float(turn.temperature),
            top_p=settings.default_top_p if turn.top_p is None else float(turn.top_p),
            top_k=turn.top_k or 0,
            max_new_tokens=min(asked, room),
            stop=list(turn.stop),
            seed=turn.seed,
        )

    def _begin(self, turn: TurnRequest):
        """Open the turn with the collector (session, turn type, next state of the previous turn)."""
        from openclaw_trl.sessions import SessionRequestError

        try:
            return self.collector.begin(
                turn.messages, tools=turn.tools, headers=turn.headers, body=turn.session
            )
        except SessionRequestError as exc:
            raise ApiError(400, str(exc), "invalid_session") from None

    def _trainable(self, ctx) -> bool:
        """Whether this turn can become a training sample (a main turn of a trainable, non-private
        session): it is then sampled at ``settings.train_temperature`` from the full distribution (no
        top-p / top-k truncation), whatever the request asks."""
        if not ctx.trainable:
            return False
        session = self.store.conversations.get_session(ctx.session_id)
        return not (session and session.private)

    def _render(self, messages: list[dict], tools: list[dict] | None) -> list[int]:
        from openclaw_trl.chat import render_prompt_ids

        try:
            return list(render_prompt_ids(self.tokenizer, messages, tools))
        except Exception as exc:
            # a template that rejects this conversation is the client's input, not a server crash
            raise ApiError(
                400, f"The chat template cannot render these messages: {exc}", "invalid_messages"
            ) from exc


def context_limit(engine, configured: int | None) -> int:
    """``max_context_len`` (None: the model's own), lowered to what the model supports: the engine's
    ``max_model_len``, else its config's ``max_position_embeddings``; 4,096 when neither is known."""
    model_max = getattr(engine, "max_model_len", None)
    if model_max is None and getattr(engine, "model_path", None):
        try:
            from transformers import AutoConfig

            model_max = getattr(
                AutoConfig.from_pretrained(engine.model_path), "max_position_embeddings", None
            )
        except Exception:  # an engine without a readable config keeps the configured limit
            model_max = None
    known = isinstance(model_max, int) and model_max > 0
    if configured is None:
        return model_max if known else UNKNOWN_CONTEXT_LEN
    if known and model_max < configured:
        logger.info("max_context_len %d lowered to the model's %d positions", configured, model_max)
        return model_max
    return configured
