"""Judge backends: one voter per ``JudgeConfig.backend``, all with ``votes(items) -> [[Vote]]``.

A voter gets the :class:`JudgeInput` of each turn of a group and returns, per turn, its votes in the order
of ``JudgeConfig.kinds`` (``m`` per kind for the LLM backends). A failed, timed-out or unparsable vote is a
vote with value None (its error kept), never an exception.

* ``engine`` (default): the colocated engine with the adapter disabled (``weights="base"``), the judge
  conversation rendered with the policy tokenizer and fitted in ``max_prompt_tokens``; all votes of a
  group in one batched ``generate``.
* ``openai``: any OpenAI-compatible ``/chat/completions`` endpoint (``openai_base_url``,
  ``openai_model``, bearer key read from the environment variable named by ``openai_api_key_env``).
* ``callable``: ``"package.module:function"``, called once per turn as ``fn(turn: JudgeInput) -> Verdict |
  None``; its ``reward`` is the PRM vote, its ``hint`` the hint vote (decision 1 with a hint, -1 without).
* ``feedback``: explicit ratings only, no LLM: 👍/👎 map to +1/-1, the feedback text is the hint. A plain
  reply next state gives no vote (and so no sample) under this backend.

The judges see the response as the user saw it (the served message: content after stop strings were cut,
and tool calls, not the reasoning) and the next state with its role; never the rest of the conversation.
"""

from __future__ import annotations

import concurrent.futures as cf
import importlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass

from openclaw_trl import judge
from openclaw_trl.chat import flatten_content
from openclaw_trl.engines.base import GenerationRequest, SamplingParams
from openclaw_trl.judging.config import JudgeConfig
from openclaw_trl.openai_client import SIDE_TURN
from openclaw_trl.records import Turn, Vote


@dataclass
class JudgeInput:
    """What a judge gets for one turn (the ``callable`` backend receives exactly this)."""

    turn_id: int
    session_id: int
    prompt_messages: list[dict]  # the request messages of the turn
    tools: list[dict] | None
    response_text: str  # the response as the user saw it: content, then tool calls
    next_state: dict  # {"role": "user"|"tool", "content": str, ...}; feedback adds "rating" and "text"
    next_state_source: str  # request / feedback

    @classmethod
    def from_turn(cls, turn: Turn) -> JudgeInput:
        return cls(
            turn_id=turn.id,
            session_id=turn.session_id,
            prompt_messages=turn.prompt_messages,
            tools=turn.tools,
            response_text=response_text_for_judge(turn),
            next_state=turn.next_state or {},
            next_state_source=turn.next_state_source or "request",
        )

    @property
    def next_state_role(self) -> str:
        return self.next_state.get("role") or "user"

    @property
    def next_state_text(self) -> str:
        return flatten_content(self.next_state.get("content"))


@dataclass
class Verdict:
    """What a ``callable`` judge returns: a reward in {-1, 0, +1} and/or a hint (None = no opinion)."""

    reward: int | None = None
    hint: str | None = None
    raw: str = ""  # an explanation, stored as the vote's raw text


class Voter:
    """The common interface: per turn of a group, its votes; ``close()`` releases what the voter holds."""

    def votes(self, items: list[JudgeInput]) -> list[list[Vote]]:
        raise NotImplementedError

    def close(self) -> None:
        """Nothing to release by default."""


def response_text_for_judge(turn: Turn) -> str:
    """The response as the user saw it: the stored response message (else the parsed completion text),
    as :func:`reply_text` writes it."""
    message = turn.response_message
    if not isinstance(message, dict):
        from openclaw_trl.chat import parse_assistant_text

        message = parse_assistant_text(turn.completion_text or "")
    return reply_text(message)


def reply_text(message: dict) -> str:
    """An assistant message as a judge reads it: content, then tool calls as ``<tool_call>{json}</tool_call>``
    lines; reasoning left out."""
    parts = [flatten_content(message.get("content")).strip()]
    for call in message.get("tool_calls") or []:
        fn = call.get("function", call) if isinstance(call, dict) else {}
        args = fn.get("arguments")
        args = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
        parts.append(f'<tool_call>{{"name": {json.dumps(fn.get("name"))}, "arguments": {args}}}</tool_call>')
    return "\n".join(p for p in parts if p)


def load_callable(path: str) -> Callable[[JudgeInput], Verdict | None]:
    """Import ``package.module:function``; a clear error when it does not resolve."""
    module_name, _, attr = path.partition(":")
    try:
        fn = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"judge callable {path!r} cannot be imported: {exc}") from exc
    if not callable(fn):
        raise ValueError(f"judge callable {path!r} is not callable")
    return fn


def error_text(exc: BaseException) -> str:
    """A stored error: ``timeout``, or the exception's type and message (at most 500 characters)."""
    if isinstance(exc, (cf.TimeoutError, TimeoutError)):
        return "timeout"
    return f"{type(exc).__name__}: {exc}"[:500]


def _llm_vote(
    kind: str, backend: str, raw: str | None, error: str | None = None, opens_think: bool = False
) -> Vote:
    """Parse one LLM judge output into a vote (None value for garbage). ``opens_think``: the judge
    prompt ended with ``<think>``, so the output starts inside the reasoning."""
    if raw is None:
        return Vote(kind, backend, None, None, None, error or "no output")
    text = "<think>" + raw if opens_think else raw
    if kind == "prm":
        return Vote(kind, backend, raw, judge.parse_prm_score(text), None, error)
    decision, hint = judge.parse_hint_vote(text)
    return Vote(kind, backend, raw, decision, hint or None, error)


class FeedbackVoter(Voter):
    """Explicit feedback as votes: the rating is the PRM vote, the text the hint."""

    def __init__(self, config: JudgeConfig):
        self.kinds = config.kinds

    def votes(self, items: list[JudgeInput]) -> list[list[Vote]]:
        return [self._votes(item) for item in items]

    def _votes(self, item: JudgeInput) -> list[Vote]:
        if item.next_state_source != "feedback":
            return []
        rating, text = item.next_state.get("rating"), (item.next_state.get("text") or "").strip()
        raw = json.dumps({"rating": rating, "text": text or None}, ensure_ascii=False)
        votes = []
        if "prm" in self.kinds:
            votes.append(Vote("prm", "feedback", raw, rating if rating in (1, -1) else None))
        if "hint" in self.kinds:
            votes.append(Vote("hint", "feedback", raw, 1 if text else -1, text or None))
        return votes


class CallableVoter(Voter):
    """A Python judge, one call per turn on the judge pool, each bounded by ``timeout_s``."""

    def __init__(self, config: JudgeConfig, fn: Callable[[JudgeInput], Verdict | None], pool):
        self.kinds, self.timeout_s, self.fn, self.pool = config.kinds, config.timeout_s, fn, pool

    def votes(self, items: list[JudgeInput]) -> list[list[Vote]]:
        futures = [self.pool.submit(self.fn, item) for item in items]
        out = []
        for fut in futures:
            try:
                verdict, error = fut.result(timeout=self.timeout_s), None
                if verdict is not None and not isinstance(verdict, Verdict):
                    verdict, error = None, f"the callable returned {type(verdict).__name__}, not a Verdict"
            except Exception as exc:  # noqa: BLE001 - any judge failure is a None vote
                verdict, error = None, error_text(exc)
            out.append(self._verdict_votes(verdict, error))
        return out

    def _verdict_votes(self, verdict: Verdict | None, error: str | None) -> list[Vote]:
        raw = None if verdict is None else (verdict.raw or repr(verdict))
        votes = []
        if "prm" in self.kinds:
            reward = None if verdict is None else verdict.reward
            ok = reward is not None and not isinstance(reward, bool) and reward in (-1, 0, 1)
            err = error or (None if ok or reward is None else f"reward {reward!r} is not -1, 0 or +1")
            votes.append(Vote("prm", "callable", raw, int(reward) if ok else None, None, err))
        if "hint" in self.kinds:
            hint = None if verdict is None else (verdict.hint or "").strip() or None
            decision = None if verdict is None else (1 if hint else -1)
            votes.append(Vote("hint", "callable", raw, decision, hint, error))
        return votes


class EngineVoter(Voter):
    """The colocated engine with base weights: every vote of a group in one batched ``generate``.

    ``stats["judge_prompt_too_long"]`` counts judge prompts the instructions alone overflow.
    """

    def __init__(self, config: JudgeConfig, engine, tokenizer, stats: dict[str, int]):
        self.config, self.engine, self.tokenizer, self.stats = config, engine, tokenizer, stats

    def votes(self, items: list[JudgeInput]) -> list[list[Vote]]:
        out: list[list[Vote]] = [[] for _ in items]
        slots, requests = self._requests(items, out)
        if not requests:
            return out
        texts, errors = self._generate(requests)
        if all(t is None for t in texts) and len({s[0] for s in slots}) > 1:
            texts, errors = self._generate_per_turn(slots, requests)
        for (i, kind, opens_think), text, error in zip(slots, texts, errors, strict=True):
            out[i].append(_llm_vote(kind, "engine", text, error, opens_think))
        return out

    def _requests(self, items: list[JudgeInput], out: list[list[Vote]]):
        """The judge requests of a group; ``slots[i] = (item index, kind, prompt opens <think>)`` of
        ``requests[i]``. A prompt that cannot be built gives its ``m`` None votes in ``out`` at once."""
        cfg = self.config
        sampling = SamplingParams(temperature=cfg.temperature, top_p=cfg.top_p, max_new_tokens=cfg.max_tokens)
        slots, requests = [], []
        for i, item in enumerate(items):
            for kind in cfg.kinds:
                try:
                    ids = self._prompt_ids(kind, item)
                except Exception as exc:  # noqa: BLE001
                    out[i] += [_llm_vote(kind, "engine", None, error_text(exc))] * cfg.m
                    continue
                opens_think = self.tokenizer.decode(ids[-8:]).rstrip().endswith("<think>")
                for _ in range(cfg.m):
                    slots.append((i, kind, opens_think))
                    requests.append(GenerationRequest(prompt_ids=ids, sampling=sampling, weights="base"))
        return slots, requests

    def _generate_per_turn(self, slots, requests):
        """One ``generate`` per turn: one bad prompt (e.g. too long for the engine) must not void the
        other turns' votes."""
        texts, errors = [], []
        for i in dict.fromkeys(s[0] for s in slots):
            own = [r for s, r in zip(slots, requests, strict=True) if s[0] == i]
            t, e = self._generate(own)
            texts += t
            errors += e
        return texts, errors

    def _prompt_ids(self, kind: str, item: JudgeInput) -> list[int]:
        """The rendered judge prompt, fitted in ``max_prompt_tokens`` (``JudgeConfig``)."""
        from openclaw_trl.chat import render_prompt_ids

        def count(messages: list[dict]) -> int:
            return len(render_prompt_ids(self.tokenizer, messages))

        limit = self.config.max_prompt_tokens
        messages = judge.fit_judge_messages(
            kind, item.response_text, item.next_state_text, item.next_state_role, count, limit
        )
        if messages is None:
            self.stats["judge_prompt_too_long"] += 1
            raise ValueError(
                f"judge_prompt_too_long: the {kind} judge instructions alone exceed max_prompt_tokens={limit}"
            )
        return list(render_prompt_ids(self.tokenizer, messages))

    def _generate(self, requests: list[GenerationRequest]) -> tuple[list[str | None], list[str | None]]:
        """Judge texts of one batched ``generate`` call (bounded by ``timeout_s``); all None on failure."""
        try:
            completions = self.engine.generate(requests, priority="learn", timeout_s=self.config.timeout_s)
            texts = [self.tokenizer.decode(c.token_ids, skip_special_tokens=True) for c in completions]
            return texts, [None] * len(texts)
        except Exception as exc:  # noqa: BLE001 - a judge failure is a None vote
            return [None] * len(requests), [error_text(exc)] * len(requests)


class OpenAIVoter(Voter):
    """An OpenAI-compatible endpoint through :class:`~openclaw_trl.openai_client.OpenAIClient`, one HTTP
    call per vote on the judge pool, each bounded by ``timeout_s``."""

    def __init__(self, config: JudgeConfig, pool, http_client=None):
        from openclaw_trl.openai_client import OpenAIClient

        key = os.environ.get(config.openai_api_key_env) if config.openai_api_key_env else None
        self.config, self.pool = config, pool
        self.client = OpenAIClient(
            config.openai_base_url, config.openai_model, key, config.timeout_s, http=http_client
        )

    def votes(self, items: list[JudgeInput]) -> list[list[Vote]]:
        cfg = self.config
        jobs = []
        for i, item in enumerate(items):
            for kind in cfg.kinds:
                build = judge.build_prm_messages if kind == "prm" else judge.build_hint_messages
                messages = build(item.response_text, item.next_state_text, item.next_state_role)
                jobs += [(i, kind, self.pool.submit(self._call, messages)) for _ in range(cfg.m)]
        out: list[list[Vote]] = [[] for _ in items]
        for i, kind, fut in jobs:
            try:
                out[i].append(_llm_vote(kind, "openai", fut.result(timeout=cfg.timeout_s)))
            except Exception as exc:  # noqa: BLE001
                out[i].append(_llm_vote(kind, "openai", None, error_text(exc)))
        return out

    def _call(self, messages: list[dict]) -> str:
        cfg = self.config
        message, _ = self.client.chat(
            messages,
            headers=SIDE_TURN,
            temperature=cfg.temperature,
            top_p=cfg.top_p,
            max_tokens=cfg.max_tokens,
        )
        return flatten_content(message.get("content"))

    def close(self) -> None:
        self.client.close()


def make_voter(
    config: JudgeConfig, engine, tokenizer, judge_fn, http_client, pool, stats: dict[str, int]
) -> Voter:
    """The voter of ``config.backend`` (``judge_fn`` given directly, else ``config.callable`` imported)."""
    if config.backend == "feedback":
        return FeedbackVoter(config)
    if config.backend == "callable":
        return CallableVoter(config, judge_fn or load_callable(config.callable), pool)
    if config.backend == "engine":
        return EngineVoter(config, engine, tokenizer, stats)
    return OpenAIVoter(config, pool, http_client)
