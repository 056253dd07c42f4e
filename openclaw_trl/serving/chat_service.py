"""``ChatService``: one chat turn from validated request to stored turn, shared by the API and the UI.

It validates the request (``openai_schema``), renders the chat template to token ids, asks the engine for a
completion (streamed through ``streaming.StreamDecoder``), parses reasoning and tool calls, and records the
turn through the collector before the reply leaves. The routes (``openclaw_trl.serving.api``) and the Gradio
UI (``openclaw_trl.serving.ui``) only adapt it.

Best-of-N (a ``best_of_n`` with ``n > 1``, see ``openclaw_trl.judging.best_of_n``): a trainable turn samples
``n`` candidates in one engine call, each is decoded as its reply would be and quick-judged, and the best is
the turn: it is streamed only once chosen (its tokens go out one by one then), so the first token of a
streamed reply waits for all ``n`` generations and the quick judging. The turn and the conversation hold only
the served reply; the ``n`` candidates are stored as a group in the turn's own store transaction, before the
reply leaves.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from openclaw_trl.engines.base import Completion, GenerationRequest, SamplingParams
from openclaw_trl.serving.openai_schema import (
    ApiError,
    ChatRequest,
    check_text,
    check_tool_choice,
    format_validation_error,
    normalize_messages,
)
from openclaw_trl.serving.settings import ServerSettings
from openclaw_trl.serving.streaming import StopTrimmer, StreamDecoder, TurnStream

logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------------------
# The chat service: validation -> template -> engine -> parse -> store. Shared by the API and the UI.
# --------------------------------------------------------------------------------------------------


@dataclass
class PreparedChat:
    """A validated request, rendered to token ids, ready for the engine."""

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
    group: CandidateSet | None = None  # Best-of-N: the candidates and the choice, once generated
    # more rows that belong to the turn, written in its store transaction (``finish``): e.g. its response id
    on_recorded: Callable[[TurnResult], Any] | None = None
    created: int = field(default_factory=lambda: int(time.time()))
    completion_id: str = field(default_factory=lambda: f"chatcmpl-{uuid.uuid4().hex[:24]}")


@dataclass
class CandidateSet:
    """A Best-of-N turn's candidates, their decoded texts and the quick judge's choice."""

    completions: list[Completion]
    texts: list[str]  # each candidate's decoded completion (special tokens kept)
    choice: Any  # ``judging.best_of_n.GroupChoice``


@dataclass
class TurnResult:
    """What one generated turn became: parsed message, stored turn id, policy version."""

    completion: Completion
    message: dict  # {"role": "assistant", "content", "reasoning_content"?, "tool_calls"?}
    finish_reason: str
    turn_id: int | str | None
    policy_version: int
    logprobs: dict | None = None
    best_of_n: dict | None = None  # Best-of-N: n, served_index, scores, group_id (``openclaw.best_of_n``)


def openclaw_meta(prep: PreparedChat, result: TurnResult) -> dict:
    """The ``openclaw`` object of a reply: which stored turn it is, its session, the next state it gave, the
    policy version that sampled it and the temperature it was sampled at (see ``ServerSettings``); with
    Best-of-N also ``best_of_n`` (n, served_index, scores, group_id)."""
    meta = {
        "turn_id": result.turn_id,
        "session_id": prep.ctx.session_key,
        "turn_type": prep.ctx.turn_type,
        "next_state_of": prep.ctx.next_state_of,
        "policy_version": result.policy_version,
        "temperature": prep.sampling.temperature,
    }
    if result.best_of_n is not None:
        meta["best_of_n"] = result.best_of_n
    return meta


UNKNOWN_CONTEXT_LEN = 4096
"""The context of a model whose engine and config state none (``max_context_len: None``)."""


class ChatService:
    """The in-process chat API: what ``/v1/chat/completions`` and the Gradio UI both call.

    ``best_of_n``: a ``judging.BestOfN`` (its ``n`` candidates per trainable turn), or None for one sample.
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
        self.context_limit = _context_limit(engine, settings.max_context_len)
        self.executor = ThreadPoolExecutor(settings.generation_threads, thread_name_prefix="openclaw-gen")

    # -- validation and rendering ------------------------------------------------------------------

    def prepare(self, payload: Any, headers=None) -> PreparedChat:
        """Validate an OpenAI request body, render it to prompt ids, then open the turn with the collector.

        Everything that can reject the request runs *before* ``collector.begin``: a rejected request never
        gives its last message as the next state of the previous turn. Raises ``ApiError`` (4xx).
        """
        body, model = self._validate(payload, headers)
        messages, tools = self._conversation(body)
        prompt_ids = self._prompt_ids(messages, tools)
        sampling = self._sampling(body, len(prompt_ids))
        ctx = self._begin(messages, tools, headers, payload)
        candidates = 1
        if self._trainable(ctx):
            # the training distribution: the full softmax at the training temperature (no top-p / top-k)
            sampling = dataclasses.replace(
                sampling, temperature=self.settings.train_temperature, top_p=1.0, top_k=0
            )
            candidates = self.best_of_n.n if self.best_of_n is not None else 1
        return PreparedChat(
            model=model,
            messages=messages,
            tools=tools,
            prompt_ids=prompt_ids,
            sampling=sampling,
            ctx=ctx,
            logprobs=body.logprobs,
            top_logprobs=body.top_logprobs or 0,
            stream=body.stream,
            include_usage=bool((body.stream_options or {}).get("include_usage")),
            candidates=candidates,
        )

    def _validate(self, payload: Any, headers) -> tuple[ChatRequest, str]:
        """The body's schema, its sizes and session id (``settings.limits``), the model, the log-prob options."""
        if not isinstance(payload, dict):
            raise ApiError(400, "The request body must be a JSON object", "invalid_json")
        check_text(payload)
        if "messages" in payload and not isinstance(payload["messages"], list):
            raise ApiError(400, "'messages' must be a list of message objects", "invalid_value", "messages")
        try:
            body = ChatRequest.model_validate(payload)
        except ValidationError as exc:
            raise format_validation_error(exc) from None
        limits = self.settings.limits
        limits.check_chat(payload)
        from openclaw_trl.sessions import request_session_key

        limits.check_session_id(request_session_key(headers, payload))
        model = self._model(body)
        check_tool_choice(body.tool_choice, [t.function.name for t in body.tools or []])
        if body.top_logprobs and not body.logprobs:
            raise ApiError(400, "top_logprobs needs logprobs=true", "invalid_value", "top_logprobs")
        return body, model

    def _model(self, body: ChatRequest) -> str:
        """The served model the request names (the first one when it names none); 404 for any other."""
        model = body.model or self.settings.model_names[0]
        if model not in self.settings.model_names:
            raise ApiError(
                404,
                f"The model {model!r} does not exist; this server serves {', '.join(self.settings.model_names)}",
                "model_not_found",
                "model",
            )
        return model

    @staticmethod
    def _conversation(body: ChatRequest) -> tuple[list[dict], list[dict] | None]:
        """Plain message dicts and tool dicts for the template (``tool_choice="none"`` renders no tools)."""
        messages = normalize_messages(body.messages)
        tools = [t.model_dump(exclude_none=True) for t in body.tools] if body.tools else None
        if body.tool_choice == "none":
            tools = None
        return messages, tools

    def _prompt_ids(self, messages: list[dict], tools: list[dict] | None) -> list[int]:
        """The rendered prompt, refused when it exceeds ``max_prompt_tokens`` (when that is set)."""
        prompt_ids = self._render(messages, tools)
        limits = self.settings.limits
        if limits.max_prompt_tokens is not None and len(prompt_ids) > limits.max_prompt_tokens:
            raise limits.over(
                "max_prompt_tokens", len(prompt_ids), "messages", "The rendered prompt (tokens)"
            )
        return prompt_ids

    def _sampling(self, body: ChatRequest, n_prompt: int) -> SamplingParams:
        """The request's sampling values, the settings' defaults where it omits them.

        ``max_new_tokens`` = the asked ``max_tokens``, clamped to ``max_tokens_cap`` and to the context left;
        a prompt that leaves less than ``min(min_reply_tokens, asked, half the context)`` is refused
        (``context_length_exceeded``).
        """
        settings = self.settings
        asked = min(
            body.max_completion_tokens or body.max_tokens or settings.default_max_tokens,
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
            temperature=settings.default_temperature if body.temperature is None else float(body.temperature),
            top_p=settings.default_top_p if body.top_p is None else float(body.top_p),
            top_k=body.top_k or 0,
            max_new_tokens=min(asked, room),
            stop=list(body.stop or []),
            seed=body.seed,
        )

    def _begin(self, messages: list[dict], tools: list[dict] | None, headers, payload: dict):
        """Open the turn with the collector (session, turn type, next state of the previous turn)."""
        from openclaw_trl.sessions import SessionRequestError

        try:
            return self.collector.begin(messages, tools=tools, headers=headers or {}, body=payload)
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

    # -- generation --------------------------------------------------------------------------------

    def generate(self, prep: PreparedChat, on_token: Callable[[int], None] | None = None) -> Completion:
        """Blocking: one request through the engine (the engine batches concurrent callers); with Best-of-N
        the chosen candidate (``_best_of_n``)."""
        if prep.candidates > 1:
            return self._best_of_n(prep, on_token)
        request = GenerationRequest(prompt_ids=prep.prompt_ids, sampling=prep.sampling, weights="policy")
        callback = (lambda _index, token_id: on_token(token_id)) if on_token else None
        return self.engine.generate([request], on_token=callback)[0]

    async def complete(self, prep: PreparedChat) -> TurnResult:
        """The whole turn, awaited: generated in ``executor`` (the engine batches concurrent callers), then
        parsed and stored; a failure, or the caller going away, aborts it with the collector."""
        loop = asyncio.get_running_loop()
        try:
            completion = await loop.run_in_executor(self.executor, self.generate, prep, None)
            return await asyncio.to_thread(self.finish, prep, completion)
        except BaseException:
            await asyncio.to_thread(self.abort, prep)
            raise

    def _best_of_n(self, prep: PreparedChat, on_token: Callable[[int], None] | None) -> Completion:
        """``prep.candidates`` samples in one engine call, quick-judged; the chosen one is streamed (its
        tokens through ``on_token``) and returned, the set kept in ``prep.group`` for ``finish``."""
        sampling = dataclasses.replace(prep.sampling, n=prep.candidates)
        request = GenerationRequest(prompt_ids=prep.prompt_ids, sampling=sampling, weights="policy")
        completions = self.engine.generate([request])
        replies = [self._decoded_message(prep, c) for c in completions]
        session = prep.ctx.session_key or f"anonymous-{prep.ctx.session_id}"
        choice = self.best_of_n.choose(prep.messages, session, replies)
        texts = [self.tokenizer.decode(list(c.token_ids), skip_special_tokens=False) for c in completions]
        prep.group = CandidateSet(completions, texts, choice)
        chosen = completions[choice.served_index]
        for token_id in chosen.token_ids if on_token else ():
            on_token(token_id)
        return chosen

    def stream_parser(self, prep: PreparedChat) -> StreamDecoder:
        return StreamDecoder(
            self.tokenizer, prep.sampling.stop, start_in_reasoning=self._prompt_opens_think(prep)
        )

    def _prompt_opens_think(self, prep: PreparedChat) -> bool:
        """Qwen3-style templates may open ``<think>`` in the generation prompt: the stream starts in reasoning."""
        tail = self.tokenizer.decode(prep.prompt_ids[-8:], skip_special_tokens=False).rstrip()
        return tail.endswith("<think>")

    def finish(self, prep: PreparedChat, completion: Completion, streamed: dict | None = None) -> TurnResult:
        """Blocking: parse the completion, compute requested logprobs and store the turn (before replying).

        The turn, its Best-of-N group and what ``prep.on_recorded`` writes are one store transaction: all of
        it is stored, or nothing when any part fails. ``streamed``: the message a stream already sent
        (``StreamDecoder.message()``), stored as sent.
        """
        parsed = self._decoded_message(prep, completion) if streamed is None else _as_message(streamed)
        finish = completion.finish_reason
        if parsed.get("tool_calls") and finish == "stop":
            finish = "tool_calls"
        logprobs = self._logprobs(prep, completion) if prep.logprobs else None
        result = TurnResult(completion, parsed, finish, None, completion.policy_version, logprobs)

        def with_the_turn(turn_id: int) -> None:  # in the turn's store transaction
            result.turn_id = turn_id
            if prep.group is not None:
                result.best_of_n = self._record_group(prep, turn_id)
            if prep.on_recorded is not None:
                prep.on_recorded(result)

        self.record(prep, completion, parsed, with_the_turn)
        return result

    def _decoded_message(self, prep: PreparedChat, completion: Completion) -> dict:
        """The assistant message of a completion as a non-streamed reply carries it (stop text cut)."""
        from openclaw_trl.chat import decode_completion

        decoded = decode_completion(self.tokenizer, completion.token_ids)
        if prep.sampling.stop and decoded.get("content"):
            decoded["content"] = StopTrimmer(prep.sampling.stop).feed(decoded["content"], final=True)
        return _as_message(decoded)

    def _record_group(self, prep: PreparedChat, turn_id: int) -> dict:
        """Store the Best-of-N group of the turn being recorded (in its transaction); what the reply reports
        about it."""
        group = prep.group
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
        completion: Completion,
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
            completion,
            prep.sampling.temperature,
            completion_text=self.tokenizer.decode(list(completion.token_ids), skip_special_tokens=False),
            response_message=message,
            also=also,
        )

    def abort(self, prep: PreparedChat) -> None:
        """Generation failed or the client left before the turn was stored (honours ``session_done``)."""
        try:
            self.collector.abort(prep.ctx)
        except Exception:  # bookkeeping of a failed request must not mask the original error
            logger.exception("collector.abort failed")

    def _logprobs(self, prep: PreparedChat, completion: Completion) -> dict:
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
            tok = self.tokenizer.decode([tid])
            entry = {"token": tok, "logprob": _lp(lp), "bytes": list(tok.encode()), "top_logprobs": []}
            if top_ids is not None:
                entry["top_logprobs"] = [
                    {
                        "token": (s := self.tokenizer.decode([i])),
                        "logprob": _lp(v),
                        "bytes": list(s.encode()),
                    }
                    for i, v in zip(top_ids[t], top_lps[t], strict=False)
                ]
            content.append(entry)
        return {"content": content, "refusal": None}

    # -- feedback, sessions, status ------------------------------------------------------------------

    def feedback(self, turn_id, rating: int | None, text: str | None = None, *, session: str | None):
        """👍/👎 (+ optional text) on a turn of ``session`` = its next state; ``ApiError`` 400/404 for bad
        turns, unknown ones and those of another session (``openclaw_trl.sessions.signals``: ownership)."""
        self._check_feedback_text(text)
        return self._signal(self.collector.feedback, turn_id, rating, text, session=session)

    def correct(self, turn_id, text: str, kind: str = "correction", *, session: str | None):
        """A typed correction, or the answer as the user edited it (``kind="edit"``), of that turn."""
        self._check_feedback_text(text)
        return self._signal(self.collector.correct, turn_id, text, kind, session=session)

    def reject(self, turn_id, *, session: str | None):
        """Retry: the user rejected that answer (a 👎 without text); the caller samples a new one."""
        return self._signal(self.collector.reject, turn_id, session=session)

    def withdraw(self, turn_id, *, session: str | None):
        """Undo: the turn is withdrawn, never judged or trained (``openclaw_trl.sessions.signals``)."""
        return self._signal(self.collector.withdraw, turn_id, session=session)

    def _check_feedback_text(self, text) -> None:
        self.settings.limits.check_feedback(text)
        if isinstance(text, str):
            check_text(text, "text")

    @staticmethod
    def _signal(operation, turn_id, *args, session: str | None):
        """One per-turn operation of the collector, its errors as ``ApiError`` 400 / 404."""
        from openclaw_trl.sessions import FeedbackError, UnknownTurnError

        try:
            return operation(turn_id, *args, session=session)
        except UnknownTurnError as exc:
            raise ApiError(404, str(exc), "turn_not_found", "turn_id") from None
        except FeedbackError as exc:
            raise ApiError(400, str(exc), "invalid_value") from None

    def end_session(self, session_key: str) -> bool:
        return self.collector.end_session(session_key)

    def set_private(self, session_key: str, private: bool) -> None:
        self.collector.set_private(session_key, private)

    def status(self) -> dict:
        """The live view of ``/v1/status`` and the learning panel: the trainer's (``status``), completed with
        ``policy_version``, ``samples_waiting`` and ``correction_window`` (the 👎s waiting for a correction:
        ``openclaw_trl.sessions.correction_window_view``)."""
        out = dict(self._status() if self._status else {})
        out.setdefault("policy_version", getattr(self.engine, "policy_version", 0))
        if "samples_waiting" not in out and hasattr(self.store.queue, "count_waiting"):
            out["samples_waiting"] = self.store.queue.count_waiting()
        if "correction_window" not in out and hasattr(self.store.holds, "open_correction_windows"):
            from openclaw_trl.sessions import correction_window_view

            window = self.collector.config.correction_window_s
            out["correction_window"] = correction_window_view(self.store, window)
        return out

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)

    def stream(self, prep: PreparedChat) -> TurnStream:
        """The turn streamed to the event loop (the API's SSE stream and the UI): see ``TurnStream``."""
        return TurnStream(self, prep)


def _lp(value) -> float:
    """A log-prob for JSON: -inf becomes -9999.0 (OpenAI's convention), NaN too."""
    value = float(value)
    return value if math.isfinite(value) else -9999.0


def _context_limit(engine, configured: int | None) -> int:
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


def _as_message(parsed) -> dict:
    """``decode_completion``'s result (dict or object) -> an OpenAI assistant message dict."""
    get = parsed.get if isinstance(parsed, dict) else lambda k, d=None: getattr(parsed, k, d)
    content = get("content")
    msg: dict[str, Any] = {
        "role": "assistant",
        "content": content if content or get("tool_calls") else content or "",
    }
    if get("reasoning_content"):
        msg["reasoning_content"] = get("reasoning_content")
    if get("tool_calls"):
        msg["tool_calls"] = list(get("tool_calls"))
    return msg
