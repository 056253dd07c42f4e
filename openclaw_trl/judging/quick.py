"""The quick judge of Best-of-N serving: a score for each candidate reply, before any next state exists.

A served turn with ``best_of_n > 1`` has ``N`` candidates; the quick judge scores each one (higher =
better, any real number, None = no opinion) so that the best is served and all ``N`` train as a GRPO group.
It sees the conversation up to the user's message and one candidate's text (:class:`QuickJudgeInput`),
never the next state. Backends (``QuickJudgeConfig.backend``), the judges' backend kinds:

* ``engine`` (default): the colocated engine with the adapter disabled (``weights="base"``), greedy, with a
  short "rate this reply to this conversation from 0 to 10" prompt (``judge.build_quick_judge_messages``);
  the first rating 0-10 of the output is the score, an output without one is None. All candidates in one
  batched ``generate`` at ``serve`` priority (a person waits for the reply).
* ``openai``: the same prompt sent to an OpenAI-compatible endpoint, one request per candidate, in parallel.
* ``callable``: ``"package.module:function"`` called once per candidate, in parallel, as
  ``fn(turn: QuickJudgeInput) -> float | None``. A value that is not a finite real number (a bool, a
  string, NaN) counts as None.
* ``memory``: what the user already said. Each candidate's log-likelihood gain when the user's recent hints
  (the judge's extractions of their corrections and requests, from the store) are added to the prompt,
  scored by the engine in one batched pass (:mod:`~openclaw_trl.judging.memory`); no hint yet, no score.

Every call is bounded: all scores of one turn arrive within ``timeout_s`` (``judge_timeout_s``), or the
missing ones are None; a backend that raises gives None (logged), never an error to the chat client.
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from openclaw_trl import judge
from openclaw_trl.chat import flatten_content
from openclaw_trl.engines.base import GenerationRequest, SamplingParams
from openclaw_trl.judging.voters import load_callable
from openclaw_trl.openai_client import SIDE_TURN

logger = logging.getLogger(__name__)

QUICK_JUDGE_BACKENDS = ("engine", "openai", "callable", "memory")
MAX_BEST_OF_N = 16
"""The most candidates per served turn: each one is decoded, scored and stored, and the reply waits for all."""
MAX_HINTS = 16
"""The most recent hints the ``memory`` backend weighs: each distinct one is a scoring row per candidate."""


@dataclass(frozen=True)
class QuickJudgeInput:
    """What the quick judge gets for one candidate (the ``callable`` backend receives exactly this).

    ``messages``: the OpenAI-format conversation up to the user's message (the prompt); ``response``: one
    candidate's text as the user would see it (content after stop strings are cut, then tool calls as
    ``<tool_call>{json}</tool_call>`` lines, no reasoning); ``session_id``: the client's session id (the
    ``x-session-id`` it sent), or ``"anonymous-<n>"`` with the store's session number when it sent none.
    The candidate as sampled (what the ``memory`` backend scores): ``completion_ids``, its token ids;
    ``logprobs``, their sampling log-probs (at ``temperature``); ``tools``, the request's tools (they are
    part of the rendered prompt).
    """

    messages: list[dict]
    response: str
    session_id: str
    completion_ids: tuple[int, ...] = ()
    logprobs: tuple[float, ...] = ()
    temperature: float = 1.0
    tools: list[dict] | None = None


@dataclass
class QuickJudgeConfig:
    """How Best-of-N candidates are scored (``OpenClawConfig.quick_judge_config()`` builds one).

    backend: ``engine`` / ``openai`` / ``callable`` / ``memory`` (module docstring).
    callable: ``"package.module:function"`` of the ``callable`` backend.
    openai_base_url, openai_model, openai_api_key_env: the ``openai`` backend's endpoint, model and the
        environment variable holding its key (the judges' ``judge_openai_*`` fields in a recipe).
    timeout_s: all scores of one turn within this many seconds; a late one is None.
    max_concurrency: candidates scored at once by the ``openai`` and ``callable`` backends (threads).
    max_tokens: tokens of one rating (``engine`` and ``openai``): a number is all it needs.
    max_prompt_tokens: tokens of one engine quick-judge prompt; a longer one is a None score.
    hints: the ``memory`` backend's number of recent hints (each distinct one weighted by its share).
    teacher: the ``memory`` backend's weights for the hint-conditioned pass: ``base`` or ``policy``.
    explore: the chance that a turn serves a uniformly random candidate instead of the best one
        (:mod:`~openclaw_trl.judging.best_of_n`): what makes the served reply's next-state verdict an
        unbiased training signal (its sample is weighted by ``(1/N) / P(served)``); 0 serves the best
        always, and the verdict is then not trained on.
    entropy_coef: ``lambda >= 0`` of the Best-of-N groups' entropy-regularised rewards, ``score - lambda *
        log pi(candidate)`` (:func:`~openclaw_trl.judging.best_of_n.group_rewards`); 0 trains on the scores.
    """

    backend: str = "engine"
    callable: str | None = None
    openai_base_url: str | None = None
    openai_model: str | None = None
    openai_api_key_env: str | None = "OPENAI_API_KEY"
    timeout_s: float = 120.0
    max_concurrency: int = 4
    max_tokens: int = 8
    max_prompt_tokens: int = judge.MAX_JUDGE_PROMPT_TOKENS
    explore: float = 0.25
    hints: int = 4
    teacher: str = "base"
    entropy_coef: float = 0.0

    def __post_init__(self):
        checks = [
            (
                isinstance(self.explore, int | float) and 0.0 <= self.explore <= 1.0,
                f"best_of_n_explore must be a probability in [0, 1], got {self.explore!r}",
            ),
            (
                self.backend in QUICK_JUDGE_BACKENDS,
                f"quick judge backend must be one of {QUICK_JUDGE_BACKENDS}, got {self.backend!r}",
            ),
            (
                self.backend != "callable" or bool(self.callable and ":" in self.callable),
                "quick judge backend 'callable' needs callable='package.module:function'",
            ),
            (
                self.backend != "openai" or bool(self.openai_base_url and self.openai_model),
                "quick judge backend 'openai' needs openai_base_url and openai_model",
            ),
            (self.timeout_s > 0, "quick judge timeout_s must be > 0"),
            (
                isinstance(self.hints, int)
                and not isinstance(self.hints, bool)
                and 1 <= self.hints <= MAX_HINTS,
                f"quick_judge_hints must be an integer from 1 to {MAX_HINTS}, got {self.hints!r}",
            ),
            (self.teacher in ("base", "policy"), f"teacher must be 'base' or 'policy', got {self.teacher!r}"),
            (
                isinstance(self.entropy_coef, int | float)
                and not isinstance(self.entropy_coef, bool)
                and 0.0 <= self.entropy_coef < float("inf"),
                f"group_entropy_coef must be a finite number >= 0, got {self.entropy_coef!r}",
            ),
            (self.max_concurrency >= 1, "quick judge max_concurrency must be >= 1"),
            (
                self.max_tokens >= 1 and self.max_prompt_tokens >= 1,
                "max_tokens and max_prompt_tokens must be >= 1",
            ),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)


def as_score(value) -> float | None:
    """A callable's return value as a score: a finite real number (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


class QuickJudge:
    """Scores the candidates of one served turn (``scores``); thread-safe, one instance per server. One
    subclass per ``QuickJudgeConfig.backend``, built by :func:`make_quick_judge`."""

    backend: str

    def __init__(self, config: QuickJudgeConfig):
        self.config = config

    def scores(self, items: list[QuickJudgeInput]) -> list[float | None]:
        """One score per item (None = no opinion, failed or late), all within ``timeout_s``."""
        raise NotImplementedError

    def close(self) -> None:
        """Release what the backend holds (threads, connections)."""


class EngineQuickJudge(QuickJudge):
    """The ``engine`` backend: the serving engine rates each candidate (module docstring)."""

    backend = "engine"

    def __init__(self, config: QuickJudgeConfig, engine, tokenizer):
        if engine is None or tokenizer is None:
            raise ValueError("the engine quick judge needs the serving engine and its tokenizer")
        super().__init__(config)
        self.engine, self.tokenizer = engine, tokenizer

    def scores(self, items: list[QuickJudgeInput]) -> list[float | None]:
        """All candidates in one batched ``generate`` on the base weights (greedy), bounded by ``timeout_s``."""
        from openclaw_trl.chat import render_prompt_ids

        sampling = SamplingParams(temperature=0.0, max_new_tokens=self.config.max_tokens)
        slots, requests = [], []
        for i, item in enumerate(items):
            messages = judge.build_quick_judge_messages(item.messages, item.response)
            ids = render_prompt_ids(self.tokenizer, messages, enable_thinking=False)
            if len(ids) <= self.config.max_prompt_tokens:
                slots.append(i)
                requests.append(GenerationRequest(prompt_ids=ids, sampling=sampling, weights="base"))
        out: list[float | None] = [None] * len(items)
        if not requests:
            return out
        try:
            completions = self.engine.generate(requests, priority="serve", timeout_s=self.config.timeout_s)
        except TimeoutError:
            logger.warning("quick judge timed out after %.1f s: no score", self.config.timeout_s)
            return out
        except Exception:  # noqa: BLE001 - a failed score is no opinion, never a failed chat request
            logger.exception("quick judge (engine) failed: no score")
            return out
        for i, completion in zip(slots, completions):
            text = self.tokenizer.decode(completion.token_ids, skip_special_tokens=True)
            out[i] = judge.parse_quick_score(text)
        return out


class MemoryQuickJudge(QuickJudge):
    """The ``memory`` backend: each candidate's log-likelihood gain under the user's recent hints
    (:class:`~openclaw_trl.judging.memory.HintMemory`, reading the hints from ``store``)."""

    backend = "memory"

    def __init__(self, config: QuickJudgeConfig, engine, tokenizer, store):
        if engine is None or tokenizer is None or store is None:
            raise ValueError("the memory quick judge needs the serving engine, its tokenizer and the store")
        from openclaw_trl.judging.memory import HintMemory

        super().__init__(config)
        self.memory = HintMemory(
            store.queries.recent_hints,
            engine,
            tokenizer,
            config.hints,
            config.teacher,
            config.max_prompt_tokens,
            config.timeout_s,
        )

    def scores(self, items: list[QuickJudgeInput]) -> list[float | None]:
        return self.memory.scores(items) if items else []


class PooledQuickJudge(QuickJudge):
    """A backend that scores one candidate at a time (``score_one``), the candidates in parallel on
    ``max_concurrency`` threads; a score not back within ``timeout_s`` is None."""

    def __init__(self, config: QuickJudgeConfig):
        super().__init__(config)
        self.pool = cf.ThreadPoolExecutor(config.max_concurrency, thread_name_prefix="openclaw-quick-judge")

    def score_one(self, item: QuickJudgeInput) -> float | None:
        raise NotImplementedError

    def scores(self, items: list[QuickJudgeInput]) -> list[float | None]:
        deadline = time.monotonic() + self.config.timeout_s
        futures = [self.pool.submit(self.score_one, item) for item in items]
        return [self._wait(f, deadline) for f in futures]

    def _wait(self, future: cf.Future, deadline: float):
        """The future's result by ``deadline``; None when it is late or raised (logged)."""
        try:
            return future.result(timeout=max(0.0, deadline - time.monotonic()))
        except cf.TimeoutError:
            future.cancel()
            logger.warning("quick judge timed out after %.1f s: no score", self.config.timeout_s)
        except Exception:  # noqa: BLE001 - a failed score is no opinion, never a failed chat request
            logger.exception("quick judge (%s) failed: no score", self.backend)
        return None

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


class CallableQuickJudge(PooledQuickJudge):
    """The ``callable`` backend: ``fn(QuickJudgeInput) -> float | None`` per candidate."""

    backend = "callable"

    def __init__(self, config: QuickJudgeConfig, fn: Callable | None = None):
        super().__init__(config)
        self.fn = fn or load_callable(config.callable)

    def score_one(self, item: QuickJudgeInput) -> float | None:
        value = self.fn(item)
        score = as_score(value)
        if score is None and value is not None:
            logger.warning("quick judge callable returned %r, not a finite number: no score", value)
        return score


class OpenAIQuickJudge(PooledQuickJudge):
    """The ``openai`` backend: the rating prompt sent to an OpenAI-compatible endpoint per candidate."""

    backend = "openai"

    def __init__(self, config: QuickJudgeConfig, http_client=None):
        from openclaw_trl.openai_client import OpenAIClient

        super().__init__(config)
        key = os.environ.get(config.openai_api_key_env) if config.openai_api_key_env else None
        self.client = OpenAIClient(
            config.openai_base_url, config.openai_model, key, config.timeout_s, http=http_client
        )

    def score_one(self, item: QuickJudgeInput) -> float | None:
        messages = judge.build_quick_judge_messages(item.messages, item.response)
        message, _ = self.client.chat(
            messages, headers=SIDE_TURN, temperature=0.0, max_tokens=self.config.max_tokens
        )
        return judge.parse_quick_score(flatten_content(message.get("content")))

    def close(self) -> None:
        super().close()
        self.client.close()


def make_quick_judge(
    config: QuickJudgeConfig, engine=None, tokenizer=None, fn=None, http_client=None, store=None
) -> QuickJudge:
    """The quick judge of ``config.backend``. ``engine`` / ``tokenizer``: the serving engine (``engine`` and
    ``memory`` backends); ``store``: where the ``memory`` backend reads the hints; ``fn``: a callable given
    directly instead of ``config.callable``; ``http_client``: an ``httpx.Client`` for the ``openai`` backend
    (tests)."""
    if config.backend == "memory":
        return MemoryQuickJudge(config, engine, tokenizer, store)
    if config.backend == "callable":
        return CallableQuickJudge(config, fn)
    if config.backend == "openai":
        return OpenAIQuickJudge(config, http_client)
    return EngineQuickJudge(config, engine, tokenizer)
