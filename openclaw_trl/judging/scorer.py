"""The scorer: turns with a next state in, judged training samples out.

A background worker (its own thread) polls the store for ``ready`` turns, a group of up to
``batch_turns`` at a time, and for each group:

1. asks the judge for votes (per method: PRM votes, hint votes, or both at once), every vote stored with
   its raw text; a failed, timed-out or unparsable vote is a ``None`` vote, never a crash;
2. reduces them: reward = :func:`~openclaw_trl.judge.majority_vote` of the PRM votes, hint =
   :func:`~openclaw_trl.judge.select_hint` of the hint votes;
3. for turns with an accepted hint, builds the teacher context (:func:`~openclaw_trl.judge.append_hint` on
   the turn's own prompt messages, same tools, rendered with the policy tokenizer) and scores the
   **original completion ids** under it with one batched ``engine.score`` call per sampling temperature
   (ids are concatenated, never re-tokenized: decoding and re-encoding a reply does not give back the
   sampled ids); log-probs at the turn's sampling temperature, the convention of ``engines/base.py``;
4. commits votes, verdict and sample in one transaction (:meth:`Store.save_judgement`).

A turn whose judging raises (a broken judge callable, a malformed stored turn) is judged again alone, so
the other turns of its group go on; after ``max_attempts`` failed attempts it is set aside as ``failed``
with its error (:meth:`Store.record_judge_failure`) and never blocks later turns. A turn whose accepted
hint could not be teacher-scored (the prompt does not render, or the engine refuses or fails the scoring)
keeps at most its RL reward and is counted (``stats["teacher_failed"]``, :meth:`Store.count_teacher_failed`).

Sample rules (a turn yields at most one sample; a turn without a usable verdict yields none, never a
masked placeholder):

========  ==============================  ============================================================
method    judges                          sample when
========  ==============================  ============================================================
rl        m PRM votes                     reward = majority vote is +1 or -1 (``has_hint`` False)
opd       m hint votes                    a hint is accepted (reward 0, ``has_hint`` True, teacher lp)
combine   m PRM + m hint votes, together  a hint is accepted or the reward is ±1; ``has_hint`` only
                                          with a hint (otherwise no teacher log-probs: opd_mask False)
========  ==============================  ============================================================

Judge backends (``JudgeConfig.backend``):

* ``engine`` (default): the colocated engine with the adapter disabled (``weights="base"``), the judge
  conversation rendered with the policy tokenizer; all votes of a group in one batched ``generate``.
* ``openai``: any OpenAI-compatible ``/chat/completions`` endpoint (``openai_base_url``,
  ``openai_model``, bearer key read from the environment variable named by ``openai_api_key_env``).
* ``callable``: ``"package.module:function"``, called once per turn as ``fn(turn: JudgeInput) -> Verdict |
  None``; its ``reward`` is the PRM vote, its ``hint`` the hint vote (decision 1 with a hint, -1 without).
* ``feedback``: explicit ratings only, no LLM: 👍/👎 map to +1/-1, the feedback text is the hint. A plain
  reply next state gives no vote (and so no sample) under this backend.

The judges see the response as the user saw it (the served message: content after stop strings were cut,
and tool calls, not the reasoning) and the next state with its role; never the rest of the conversation.
A turn sampled greedily (temperature 0) gives no sample: its log-probs are not those of a sampled policy.
"""

from __future__ import annotations

import concurrent.futures as cf
import importlib
import json
import logging
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from openclaw_trl import judge
from openclaw_trl.engines.base import GenerationRequest, SamplingParams
from openclaw_trl.records import TrainingSample, Vote
from openclaw_trl.store import TEACHER_ERROR_PREFIX, Store

log = logging.getLogger(__name__)


@dataclass
class JudgeConfig:
    """How turns are judged (``OpenClawConfig.judge_settings()`` builds one).

    method: ``rl`` / ``opd`` / ``combine`` (module docstring table).
    backend: ``engine`` / ``openai`` / ``callable`` / ``feedback``.
    m: votes per judge per turn (LLM backends; the callable and feedback backends give one vote).
    temperature, top_p, max_tokens: sampling of each judge vote.
    openai_base_url, openai_model, openai_api_key_env: the ``openai`` backend (the key is read from the
        named environment variable when set; no ``Authorization`` header otherwise).
    callable: ``"package.module:function"`` for the ``callable`` backend.
    teacher: ``base`` (adapter disabled, the reference) or ``policy`` (the current adapter) scores the
        hint-augmented prompt.
    kd_topk: also store the teacher's top-K ids and log-probs per position (0 = off).
    max_concurrency: judge calls in flight at once (threads).
    timeout_s: per judge call (an engine batch, one HTTP vote, one callable call); a timeout is a None vote.
    batch_turns: turns judged (and teacher-scored) together.
    max_attempts: failed judging attempts (an exception, not a None vote) after which a turn is set
        aside as ``failed``.
    max_prompt_tokens: tokens of one engine judge prompt; a longer one is fitted by cutting the next state
        (then the response) in the middle (:func:`~openclaw_trl.judge.fit_judge_messages`), and one the
        instructions alone overflow is a None vote with the error ``judge_prompt_too_long``.
    max_hint_chars: a hint keeps its first ``max_hint_chars`` characters (:func:`~openclaw_trl.judge.cap_hint`)
        before it is stored and added to the teacher prompt.
    poll_interval_s: how often the worker looks for new ready turns when not woken.
    """

    method: str = "combine"
    backend: str = "engine"
    m: int = 1
    temperature: float = 0.6
    max_tokens: int = 2048
    top_p: float = 1.0
    openai_base_url: str | None = None
    openai_model: str | None = None
    openai_api_key_env: str | None = "OPENAI_API_KEY"
    callable: str | None = None
    teacher: str = "base"
    kd_topk: int = 0
    max_concurrency: int = 4
    timeout_s: float = 120.0
    batch_turns: int = 8
    max_attempts: int = 3
    poll_interval_s: float = 0.5
    max_prompt_tokens: int = judge.MAX_JUDGE_PROMPT_TOKENS
    max_hint_chars: int = judge.MAX_HINT_CHARS

    def __post_init__(self):
        checks = [
            (self.method in judge.METHODS, f"method must be one of {judge.METHODS}, got {self.method!r}"),
            (
                self.backend in judge.JUDGE_BACKENDS,
                f"backend must be one of {judge.JUDGE_BACKENDS}, got {self.backend!r}",
            ),
            (self.m >= 1, f"m (votes per turn) must be >= 1, got {self.m}"),
            (self.teacher in ("base", "policy"), f"teacher must be 'base' or 'policy', got {self.teacher!r}"),
            (self.kd_topk >= 0, f"kd_topk must be >= 0, got {self.kd_topk}"),
            (self.max_concurrency >= 1, "max_concurrency must be >= 1"),
            (self.timeout_s > 0, "timeout_s must be > 0"),
            (self.batch_turns >= 1, "batch_turns must be >= 1"),
            (self.max_attempts >= 1, f"max_attempts must be >= 1, got {self.max_attempts}"),
            (self.max_tokens >= 1, "max_tokens must be >= 1"),
            (
                self.max_prompt_tokens >= 1 and self.max_hint_chars >= 1,
                "max_prompt_tokens and max_hint_chars must be >= 1",
            ),
            (
                self.backend != "openai" or bool(self.openai_base_url and self.openai_model),
                "backend 'openai' needs openai_base_url and openai_model",
            ),
            (
                self.backend != "callable" or bool(self.callable and ":" in self.callable),
                "backend 'callable' needs callable='package.module:function'",
            ),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)

    @property
    def kinds(self) -> tuple[str, ...]:
        """The judges this method runs: ``prm`` (reward) and/or ``hint``."""
        return {"rl": ("prm",), "opd": ("hint",), "combine": ("prm", "hint")}[self.method]


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

    @property
    def next_state_role(self) -> str:
        return self.next_state.get("role") or "user"

    @property
    def next_state_text(self) -> str:
        return judge.flatten_content(self.next_state.get("content"))


@dataclass
class Verdict:
    """What a ``callable`` judge returns: a reward in {-1, 0, +1} and/or a hint (None = no opinion)."""

    reward: int | None = None
    hint: str | None = None
    raw: str = ""  # an explanation, stored as the vote's raw text


@dataclass
class Judgement:
    """One judged turn before it is committed."""

    turn: dict
    votes: list[Vote] = field(default_factory=list)
    reward: int = 0
    hint: str | None = None
    error: str | None = None
    teacher: dict | None = None  # {"logprobs", "prompt_len"[, "topk_ids", "topk_logprobs"]}
    sample: TrainingSample | None = None


def response_text_for_judge(turn: dict) -> str:
    """The response as the user saw it: the stored response message (else the parsed completion text),
    content then tool calls as ``<tool_call>{json}</tool_call>`` lines; reasoning left out."""
    message = turn.get("response_message")
    if not isinstance(message, dict):
        from openclaw_trl.chat import parse_assistant_text

        message = parse_assistant_text(turn.get("completion_text") or "")
    parts = [judge.flatten_content(message.get("content")).strip()]
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


def _error_text(exc: BaseException) -> str:
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


def _judge_messages(kind: str, item: JudgeInput) -> list[dict]:
    build = judge.build_prm_messages if kind == "prm" else judge.build_hint_messages
    return build(item.response_text, item.next_state_text, item.next_state_role)


class Scorer:
    """The background judge worker (module docstring).

    Args:
        store: where ready turns come from and judged samples go.
        config: a :class:`JudgeConfig`.
        engine: the colocated engine: judge votes (``engine`` backend, ``weights="base"``) and the teacher
            (``opd`` / ``combine``). Required by those.
        tokenizer: the policy tokenizer (default ``engine.tokenizer``), renders judge and teacher prompts.
        judge_fn: a callable judge given directly (instead of ``config.callable``).
        http_client: an ``httpx.Client`` for the ``openai`` backend (tests inject a mock transport).

    ``start()`` / ``stop()`` run the worker thread; ``run_until_idle()`` judges everything ready in the
    calling thread (tests, replay); ``wake()`` makes a sleeping worker look now.
    """

    def __init__(
        self,
        store: Store,
        config: JudgeConfig,
        engine=None,
        tokenizer=None,
        judge_fn: Callable[[JudgeInput], Verdict | None] | None = None,
        http_client=None,
    ):
        self.store = store
        self.config = config
        self.engine = engine
        self.tokenizer = tokenizer if tokenizer is not None else getattr(engine, "tokenizer", None)
        needs_teacher = config.method in ("opd", "combine")
        if engine is None and (config.backend == "engine" or needs_teacher):
            raise ValueError(
                f"method {config.method!r} with backend {config.backend!r} needs the engine "
                "(judge votes with base weights and/or the teacher)"
            )
        if self.tokenizer is None and (config.backend == "engine" or needs_teacher):
            raise ValueError("the scorer needs the policy tokenizer to render judge / teacher prompts")
        self.judge_fn = judge_fn
        if config.backend == "callable" and judge_fn is None:
            self.judge_fn = load_callable(config.callable)
        self._openai = None
        if config.backend == "openai":
            from openclaw_trl.openai_client import OpenAIClient

            key = os.environ.get(config.openai_api_key_env) if config.openai_api_key_env else None
            self._openai = OpenAIClient(
                config.openai_base_url, config.openai_model, key, config.timeout_s, http=http_client
            )
        self._pool = cf.ThreadPoolExecutor(config.max_concurrency, thread_name_prefix="openclaw-judge")
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._in_flight: set[int] = set()
        self._lock = threading.Lock()  # one group at a time (worker thread vs run_until_idle)
        self.stats = {
            "judged": 0,
            "samples": 0,
            "none_votes": 0,
            "votes": 0,
            "teacher_calls": 0,
            "teacher_failed": 0,
            "errors": 0,
            "failed_attempts": 0,
            "failed": 0,
            "judge_prompt_too_long": 0,
        }

    # ------------------------------------------------------------------ worker
    def start(self) -> Scorer:
        if self._thread is None or not self._thread.is_alive():
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, name="openclaw-scorer", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float | None = 30.0) -> None:
        """Stop the worker after the group in progress (its judgements are committed or not at all)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def close(self) -> None:
        self.stop()
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self._openai is not None:
            self._openai.close()

    def wake(self) -> None:
        self._wake.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                judged = self.score_once()
            except Exception:  # the worker must survive anything (a locked DB, a bug in one group)
                log.exception("scorer: a scoring round failed; retrying later")
                self.stats["errors"] += 1
                judged = 0
            if not judged:
                self._wake.wait(self.config.poll_interval_s)
                self._wake.clear()

    def run_until_idle(self, max_rounds: int = 1000) -> int:
        """Judge every ready turn now, in this thread; returns how many turns were judged."""
        total = 0
        for _ in range(max_rounds):
            n = self.score_once()
            if n == 0:
                break
            total += n
        return total

    drain = run_until_idle

    # ------------------------------------------------------------------ one group
    def score_once(self) -> int:
        """Judge one group of ready turns and commit the results; returns the number of turns handled
        (judged, or counted as a failed attempt)."""
        with self._lock:
            turns = self.store.ready_turns(self.config.batch_turns, exclude=self._in_flight)
            if not turns:
                return 0
            self._in_flight.update(t["id"] for t in turns)
            try:
                for turn, outcome in self._judge_each(turns):
                    if isinstance(outcome, Exception):
                        self._record_failure(turn, outcome)
                        continue
                    try:
                        self._commit(outcome)
                    except Exception as exc:  # noqa: BLE001 - e.g. a sample the store refuses
                        self._record_failure(turn, exc)
            finally:
                self._in_flight.difference_update(t["id"] for t in turns)
            return len(turns)

    def _judge_each(self, turns: Sequence[dict]) -> list[tuple[dict, Judgement | Exception]]:
        """``(turn, judgement or the exception its judging raised)``: a group that raises is judged again
        turn by turn, so one poison turn does not take its group down with it."""
        try:
            return list(zip(turns, self.judge_turns(turns), strict=True))
        except Exception as exc:  # noqa: BLE001
            if len(turns) == 1:
                return [(turns[0], exc)]
            return [pair for turn in turns for pair in self._judge_each([turn])]

    def _commit(self, j: Judgement) -> None:
        turn = j.turn
        sample_id = self.store.save_judgement(
            turn["id"], turn["judge_round"], j.votes, float(j.reward), j.hint, j.sample, j.error
        )
        self.stats["judged"] += 1
        self.stats["samples"] += sample_id is not None

    def _record_failure(self, turn: dict, exc: Exception) -> None:
        error = _error_text(exc)
        self.stats["failed_attempts"] += 1
        set_aside = self.store.record_judge_failure(
            turn["id"], turn["judge_round"], error, self.config.max_attempts
        )
        if set_aside:
            self.stats["failed"] += 1
            log.error(
                "scorer: turn %s failed %d judging attempts and is set aside: %s",
                turn["id"],
                self.config.max_attempts,
                error,
            )
        else:
            log.warning("scorer: judging turn %s failed (it will be retried): %s", turn["id"], error)

    def judge_turns(self, turns: Sequence[dict]) -> list[Judgement]:
        """Votes, verdicts, teacher scores and samples for a group of turns (nothing is written)."""
        items = [self._judge_input(t) for t in turns]
        all_votes = self._votes(items)
        judgements = []
        for turn, votes in zip(turns, all_votes, strict=True):
            j = Judgement(turn=turn, votes=votes)
            prm = [v.value for v in votes if v.kind == "prm"]
            hints = [(v.value, v.hint or "") for v in votes if v.kind == "hint"]
            j.reward = judge.majority_vote(prm) if "prm" in self.config.kinds else 0
            j.hint = judge.select_hint(hints) if "hint" in self.config.kinds else None
            j.hint = judge.cap_hint(j.hint, self.config.max_hint_chars)
            self.stats["votes"] += len(votes)
            self.stats["none_votes"] += sum(v.value is None for v in votes)
            judgements.append(j)
        self._teacher(judgements)
        for j in judgements:
            j.sample = self._sample(j)
        return judgements

    def _judge_input(self, turn: dict) -> JudgeInput:
        return JudgeInput(
            turn_id=turn["id"],
            session_id=turn["session_id"],
            prompt_messages=turn["prompt_messages"],
            tools=turn["tools"],
            response_text=response_text_for_judge(turn),
            next_state=turn["next_state"] or {},
            next_state_source=turn["next_state_source"] or "request",
        )

    def _sample(self, j: Judgement) -> TrainingSample | None:
        method, turn = self.config.method, j.turn
        if turn["temperature"] <= 0:
            j.error = "greedy turn (temperature 0): its log-probs are not those of a sampled policy"
            return None
        has_hint = j.hint is not None and j.teacher is not None
        if method == "rl":
            keep = j.reward != 0
        elif method == "opd":
            keep = has_hint
        else:
            keep = has_hint or j.reward != 0
        if not keep:
            return None
        teacher = j.teacher if has_hint else None
        return TrainingSample(
            turn_id=turn["id"],
            prompt_ids=turn["prompt_ids"],
            completion_ids=turn["completion_ids"],
            sampling_logprobs=turn["sampling_logprobs"],
            temperature=turn["temperature"],
            policy_version=turn["policy_version"],
            reward=float(j.reward) if method != "opd" else 0.0,
            has_hint=has_hint,
            hint=j.hint if has_hint else None,
            teacher_logprobs=teacher["logprobs"] if teacher else None,
            topk_ids=teacher.get("topk_ids") if teacher else None,
            topk_logprobs=teacher.get("topk_logprobs") if teacher else None,
            teacher_prompt_ids=teacher["prompt_ids"] if teacher else None,
            finish_reason=turn["finish_reason"],
            meta={
                "method": method,
                "backend": self.config.backend,
                "teacher": self.config.teacher if has_hint else None,
                "next_state_source": turn["next_state_source"],
                "finish_reason": turn["finish_reason"],
                "session_id": turn["session_id"],
                "teacher_prompt_len": teacher["prompt_len"] if teacher else None,
            },
        )

    # ------------------------------------------------------------------ votes per backend
    def _votes(self, items: list[JudgeInput]) -> list[list[Vote]]:
        backend = self.config.backend
        if backend == "feedback":
            return [self._feedback_votes(item) for item in items]
        if backend == "callable":
            return self._callable_votes(items)
        if backend == "engine":
            return self._engine_votes(items)
        return self._openai_votes(items)

    def _feedback_votes(self, item: JudgeInput) -> list[Vote]:
        if item.next_state_source != "feedback":
            return []
        rating, text = item.next_state.get("rating"), (item.next_state.get("text") or "").strip()
        raw = json.dumps({"rating": rating, "text": text or None}, ensure_ascii=False)
        votes = []
        if "prm" in self.config.kinds:
            votes.append(Vote("prm", "feedback", raw, rating if rating in (1, -1) else None))
        if "hint" in self.config.kinds:
            votes.append(Vote("hint", "feedback", raw, 1 if text else -1, text or None))
        return votes

    def _callable_votes(self, items: list[JudgeInput]) -> list[list[Vote]]:
        futures = [self._pool.submit(self.judge_fn, item) for item in items]
        out = []
        for fut in futures:
            try:
                verdict, error = fut.result(timeout=self.config.timeout_s), None
                if verdict is not None and not isinstance(verdict, Verdict):
                    verdict, error = None, f"the callable returned {type(verdict).__name__}, not a Verdict"
            except Exception as exc:  # noqa: BLE001 - any judge failure is a None vote
                verdict, error = None, _error_text(exc)
            out.append(self._verdict_votes(verdict, error))
        return out

    def _verdict_votes(self, verdict: Verdict | None, error: str | None) -> list[Vote]:
        raw = None if verdict is None else (verdict.raw or repr(verdict))
        votes = []
        if "prm" in self.config.kinds:
            reward = None if verdict is None else verdict.reward
            ok = reward is not None and not isinstance(reward, bool) and reward in (-1, 0, 1)
            err = error or (None if ok or reward is None else f"reward {reward!r} is not -1, 0 or +1")
            votes.append(Vote("prm", "callable", raw, int(reward) if ok else None, None, err))
        if "hint" in self.config.kinds:
            hint = None if verdict is None else (verdict.hint or "").strip() or None
            decision = None if verdict is None else (1 if hint else -1)
            votes.append(Vote("hint", "callable", raw, decision, hint, error))
        return votes

    def _engine_votes(self, items: list[JudgeInput]) -> list[list[Vote]]:
        cfg = self.config
        sampling = SamplingParams(temperature=cfg.temperature, top_p=cfg.top_p, max_new_tokens=cfg.max_tokens)
        slots, requests = [], []  # slots[i] = (item index, kind, prompt opens <think>) of requests[i]
        out: list[list[Vote]] = [[] for _ in items]
        for i, item in enumerate(items):
            for kind in cfg.kinds:
                try:
                    ids = self._judge_prompt_ids(kind, item)
                except Exception as exc:  # noqa: BLE001
                    out[i] += [_llm_vote(kind, "engine", None, _error_text(exc))] * cfg.m
                    continue
                opens_think = self.tokenizer.decode(ids[-8:]).rstrip().endswith("<think>")
                for _ in range(cfg.m):
                    slots.append((i, kind, opens_think))
                    requests.append(GenerationRequest(prompt_ids=ids, sampling=sampling, weights="base"))
        if requests:
            texts, errors = self._generate(requests)
            if all(t is None for t in texts) and len({s[0] for s in slots}) > 1:
                # one bad prompt (e.g. too long for the engine) must not void the other turns' votes
                texts, errors = [], []
                for i in dict.fromkeys(s[0] for s in slots):
                    own = [r for s, r in zip(slots, requests, strict=True) if s[0] == i]
                    t, e = self._generate(own)
                    texts += t
                    errors += e
            for (i, kind, opens_think), text, error in zip(slots, texts, errors, strict=True):
                out[i].append(_llm_vote(kind, "engine", text, error, opens_think))
        return out

    def _judge_prompt_ids(self, kind: str, item: JudgeInput) -> list[int]:
        """The rendered judge prompt, fitted in ``max_prompt_tokens`` (``JudgeConfig``)."""
        from openclaw_trl.chat import render_prompt_ids

        def count(messages: list[dict]) -> int:
            return len(render_prompt_ids(self.tokenizer, messages))

        messages = judge.fit_judge_messages(
            kind,
            item.response_text,
            item.next_state_text,
            item.next_state_role,
            count,
            self.config.max_prompt_tokens,
        )
        if messages is None:
            self.stats["judge_prompt_too_long"] += 1
            raise ValueError(
                f"judge_prompt_too_long: the {kind} judge instructions alone exceed "
                f"max_prompt_tokens={self.config.max_prompt_tokens}"
            )
        return list(render_prompt_ids(self.tokenizer, messages))

    def _generate(self, requests: list[GenerationRequest]) -> tuple[list[str | None], list[str | None]]:
        """Judge texts of one batched ``generate`` call (bounded by ``timeout_s``); all None on failure."""
        try:
            completions = self._pool.submit(self.engine.generate, requests, priority="learn").result(
                timeout=self.config.timeout_s
            )
            texts = [self.tokenizer.decode(c.token_ids, skip_special_tokens=True) for c in completions]
            return texts, [None] * len(texts)
        except Exception as exc:  # noqa: BLE001 - a judge failure is a None vote
            return [None] * len(requests), [_error_text(exc)] * len(requests)

    def _openai_votes(self, items: list[JudgeInput]) -> list[list[Vote]]:
        cfg = self.config

        def call(messages: list[dict]) -> str:
            message, _ = self._openai.chat(
                messages, temperature=cfg.temperature, top_p=cfg.top_p, max_tokens=cfg.max_tokens
            )
            return judge.flatten_content(message.get("content"))

        jobs = []
        for i, item in enumerate(items):
            for kind in cfg.kinds:
                messages = _judge_messages(kind, item)
                jobs += [(i, kind, self._pool.submit(call, messages)) for _ in range(cfg.m)]
        out: list[list[Vote]] = [[] for _ in items]
        for i, kind, fut in jobs:
            try:
                out[i].append(_llm_vote(kind, "openai", fut.result(timeout=cfg.timeout_s)))
            except Exception as exc:  # noqa: BLE001
                out[i].append(_llm_vote(kind, "openai", None, _error_text(exc)))
        return out

    # ------------------------------------------------------------------ teacher
    def _teacher(self, judgements: list[Judgement]) -> None:
        """Teacher log-probs of the original completion ids under the hint-augmented prompt, batched."""
        from openclaw_trl.chat import render_prompt_ids

        by_temperature: dict[float, list[tuple[Judgement, list[int]]]] = {}
        for j in judgements:
            j.teacher = None
            if j.hint is None:
                continue
            turn = j.turn
            try:
                enhanced = judge.append_hint(turn["prompt_messages"], j.hint)
                ids = render_prompt_ids(self.tokenizer, enhanced, turn["tools"])
            except Exception as exc:  # noqa: BLE001
                self._teacher_failed(j, f"{TEACHER_ERROR_PREFIX} prompt: {_error_text(exc)}")
                continue
            if turn["temperature"] <= 0:
                continue  # a greedy turn gives no sample (_sample): nothing to score
            t = turn["temperature"]
            by_temperature.setdefault(t, []).append((j, ids))
        for temperature, group in by_temperature.items():
            self._score_group(group, temperature, split_on_failure=True)

    def _score_group(
        self, group: list[tuple[Judgement, list[int]]], temperature: float, split_on_failure: bool
    ):
        try:
            self.stats["teacher_calls"] += 1
            scores = self.engine.score(
                [ids for _, ids in group],
                [j.turn["completion_ids"] for j, _ in group],
                weights=self.config.teacher,
                top_k=self.config.kd_topk,
                temperature=temperature,
                priority="learn",
            )
        except Exception as exc:  # noqa: BLE001 - the turns are judged without a teacher (no OPD sample)
            if split_on_failure and len(group) > 1:  # find the turn that fails; score the others
                for item in group:
                    self._score_group([item], temperature, split_on_failure=False)
                return
            log.warning(
                "scorer: teacher scoring failed for turn(s) %s: %s", [j.turn["id"] for j, _ in group], exc
            )
            for j, _ in group:
                self._teacher_failed(j, f"{TEACHER_ERROR_PREFIX}: {_error_text(exc)}")
            return
        for n, (j, ids) in enumerate(group):
            teacher = {"logprobs": list(scores.logprobs[n]), "prompt_len": len(ids), "prompt_ids": ids}
            if self.config.kd_topk > 0 and scores.topk_ids is not None:
                teacher["topk_ids"] = scores.topk_ids[n]
                teacher["topk_logprobs"] = scores.topk_logprobs[n]
            if len(teacher["logprobs"]) != len(j.turn["completion_ids"]):
                self._teacher_failed(j, f"{TEACHER_ERROR_PREFIX}: wrong number of log-probs")
                continue
            j.teacher = teacher

    def _teacher_failed(self, j: Judgement, error: str) -> None:
        j.error = error
        self.stats["teacher_failed"] += 1
