"""The simulated-user evaluation loop: a persona LLM talks to our server, one session per GSM8K problem.

For each problem ``i`` (``persona-i-<run id>`` is the session, sent as ``X-Session-Id`` and as the OpenAI
``user`` field, so the server chains the turns and learns from them as it would from a person):

1. (teacher only) the persona LLM writes a student's submission for the problem;
2. the persona's fixed opening goes to the server; the first reply is **rated** by the persona LLM in a
   separate stateless call (``personas.rating_messages``): that rating, in [0, 1], is the problem's score;
3. the conversation goes on: the persona LLM reads each reply and writes the next message, until it writes
   its sentinel (``HOMEWORK_DONE`` / ``GRADING_DONE``) or ``max_turns`` replies were served. The last
   message is sent with ``X-Session-Done`` (and ``max_tokens=1``: nobody reads that reply) so that it
   becomes the next state of the last reply and the session closes.

The mean score over problems with a parsable rating is the result ("the simulator's rating of the first
answer", as in the reference's figure). Requests to the persona LLM are sent as side turns
(``X-Turn-Type: side``): if it is our own server (the tests do that), it never trains on them.
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import os
import statistics
import uuid
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path

import httpx

from openclaw_trl.eval.personas import (
    PERSONAS,
    REPLY_PREFIX,
    SUBMISSION_PROMPT,
    Persona,
    parse_rating,
    rating_messages,
    strip_thinking,
)
from openclaw_trl.openai_client import SIDE_TURN, OpenAIClient

DATA_FILE = "gsm8k_test_subset.json"


def load_problems(n: int, offset: int = 0, path: str | Path | None = None) -> list[dict]:
    """``n`` problems ``{"question", "answer"}`` from the packaged GSM8K test subset (or a JSON file in the
    same shape, or with the reference's ``ground_truth_answer`` key)."""
    if path is None:
        text = resources.files("openclaw_trl.eval").joinpath(DATA_FILE).read_text(encoding="utf-8")
    else:
        text = Path(path).read_text(encoding="utf-8")
    rows = json.loads(text)
    problems = [
        {"question": r["question"], "answer": str(r.get("answer", r.get("ground_truth_answer", "")))}
        for r in rows[offset : offset + n]
    ]
    if len(problems) < n:
        raise ValueError(f"asked for {n} problems from offset {offset}, the data has {len(rows)}")
    return problems


def say(endpoint: OpenAIClient, messages: list[dict], **params) -> tuple[str, httpx.Response]:
    """The visible content of one chat reply (reasoning dropped) and the raw response."""
    message, response = endpoint.chat(messages, **params)
    return strip_thinking(message.get("content") or ""), response


@dataclass
class ProblemResult:
    index: int
    session: str
    score: float | None  # the persona's 0-1 rating of the first reply (None: no parsable rating)
    rating_text: str
    first_reply: str
    replies: int  # replies served in this conversation (the closing request not counted)
    finished: bool  # the persona wrote its sentinel within max_turns
    policy_versions: list[int] = field(default_factory=list)
    error: str | None = None


@dataclass
class EvalResult:
    persona: str
    problems: list[ProblemResult]

    @property
    def scores(self) -> list[float]:
        return [p.score for p in self.problems if p.score is not None]

    @property
    def mean_score(self) -> float | None:
        return statistics.fmean(self.scores) if self.scores else None

    def summary(self) -> dict:
        return {
            "persona": self.persona,
            "problems": len(self.problems),
            "rated": len(self.scores),
            "mean_score": self.mean_score,
            "finished": sum(p.finished for p in self.problems),
            "errors": sum(p.error is not None for p in self.problems),
        }

    def to_json(self) -> dict:
        return {"summary": self.summary(), "problems": [asdict(p) for p in self.problems]}


@dataclass
class EvalSettings:
    persona: str = "student"
    max_turns: int = 8
    user_temperature: float = 0.7
    user_max_tokens: int = 1024
    server_max_tokens: int | None = None  # None: the server's default
    server_temperature: float | None = None  # None: the server's (= the training) temperature
    concurrency: int = 1

    def __post_init__(self):
        if self.persona not in PERSONAS:
            raise ValueError(f"persona must be one of {sorted(PERSONAS)}, got {self.persona!r}")
        if self.max_turns < 1 or self.concurrency < 1:
            raise ValueError("max_turns and concurrency must be >= 1")


def rate_reply(user_llm: OpenAIClient, persona: Persona, opening: str, reply: str, settings: EvalSettings):
    """``(score, raw text)``: the persona's rating of one reply (one retry when it is not parsable)."""
    raw = ""
    for _ in range(2):
        raw, _ = say(
            user_llm,
            rating_messages(persona, opening, reply),
            headers=SIDE_TURN,
            temperature=settings.user_temperature,
            max_tokens=settings.user_max_tokens,
        )
        score = parse_rating(raw)
        if score is not None:
            return score, raw
    return None, raw


def run_problem(
    server: OpenAIClient,
    user_llm: OpenAIClient,
    problem: dict,
    index: int,
    settings: EvalSettings,
    run_id: str,
) -> ProblemResult:
    """One conversation (module docstring); errors are recorded in the result, never raised."""
    persona = PERSONAS[settings.persona]
    session = f"{persona.name}-{index}-{run_id}"
    result = ProblemResult(index, session, None, "", "", 0, False)
    headers = {"X-Session-Id": session, "X-Turn-Type": "main"}
    serve = {
        "user": session,
        "max_tokens": settings.server_max_tokens,
        "temperature": settings.server_temperature,
    }
    user_params = {"temperature": settings.user_temperature, "max_tokens": settings.user_max_tokens}
    try:
        submission = None
        if persona.name == "teacher":
            submission, _ = say(
                user_llm,
                [{"role": "user", "content": SUBMISSION_PROMPT.format(question=problem["question"])}],
                headers=SIDE_TURN,
                **user_params,
            )
        opening = persona.opening(problem, submission)
        messages = [{"role": "user", "content": opening}]
        simulator = [{"role": "system", "content": persona.system}, {"role": "assistant", "content": opening}]
        for turn in range(settings.max_turns):
            reply, response = say(server, messages, headers=headers, **serve)
            result.replies += 1
            version = response.headers.get("x-openclaw-policy-version")
            if version is not None and version.lstrip("-").isdigit():
                result.policy_versions.append(int(version))
            if turn == 0:
                result.first_reply = reply
                result.score, result.rating_text = rate_reply(user_llm, persona, opening, reply, settings)
            simulator.append({"role": "user", "content": REPLY_PREFIX + (reply or "(empty reply)")})
            next_message, _ = say(user_llm, simulator, headers=SIDE_TURN, **user_params)
            result.finished = persona.sentinel in next_message
            said = next_message.replace(persona.sentinel, "").strip() or "Thanks."
            simulator.append({"role": "assistant", "content": next_message or "..."})
            messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": said}]
            if result.finished or turn == settings.max_turns - 1:
                # the closing message: the next state of the last reply; nobody reads this reply
                say(
                    server,
                    messages,
                    headers={**headers, "X-Session-Done": "true"},
                    **{**serve, "max_tokens": 1},
                )
                break
    except (httpx.HTTPError, KeyError, IndexError, ValueError) as exc:
        result.error = f"{type(exc).__name__}: {exc}"[:500]
    return result


def evaluate(
    server: OpenAIClient,
    user_llm: OpenAIClient,
    problems: list[dict],
    settings: EvalSettings,
    offset: int = 0,
    on_result=None,
) -> EvalResult:
    """Every problem (``concurrency`` at a time, each its own session); ``on_result(ProblemResult)`` is
    called as each finishes."""
    run_id = f"{os.getpid()}-{uuid.uuid4().hex[:6]}"
    results: list[ProblemResult] = []
    with cf.ThreadPoolExecutor(settings.concurrency) as pool:
        futures = [
            pool.submit(run_problem, server, user_llm, p, offset + i, settings, run_id)
            for i, p in enumerate(problems)
        ]
        for fut in futures:
            results.append(fut.result())
            if on_result is not None:
                on_result(results[-1])
    return EvalResult(settings.persona, results)
