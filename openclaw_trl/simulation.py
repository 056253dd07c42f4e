"""Simulated users: conversations driven through the real serving path (HTTP, OpenAI wire format).

A simulated user is any object with ``opening(rng) -> str`` (the first message of a conversation) and
``react(reply, rng) -> Reaction`` (its next message after reading the assistant's reply). The
reference implementation, :class:`PreferenceUser`, has a hidden preference about the answer (a style, or
several criteria at once, e.g. bulleted *and* brief): it says "thanks" and moves on when a reply meets it,
otherwise it asks in words for what was missing, as a person would. :func:`rule_judge` is the matching
rule-based judge for the ``callable`` backend: a "thanks" is a +1, a change request is a -1 whose words are
the hint; :class:`NoisyRuleJudge` is the same judge wrong with a given probability (flipped verdict, garbled
hint), to measure learning under judge noise.

:func:`run_conversations` drives ``n`` conversations against a running server with session headers,
so the turns, next states, judging and training are exactly those of live use.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from openclaw_trl.openai_client import OpenAIClient

THANKS = "Thanks, that's what I wanted. Next question."


class Criterion(Protocol):
    """Anything a user can want of an answer: a ``name``, the ``request`` a user writes to ask for it (a
    sentence starting with "Please", which is also the hint a judge extracts), and ``matches(text)``."""

    name: str
    request: str

    def matches(self, text: str) -> bool: ...


@dataclass(frozen=True)
class Style:
    """An answer style: how to recognise it and how a user asks for it."""

    name: str
    pattern: str  # regex that a reply in this style matches (searched, case-insensitive)
    request: str  # what the user writes to ask for it; also the hint text

    def matches(self, text: str) -> bool:
        return re.search(self.pattern, text or "", flags=re.IGNORECASE) is not None


DEFAULT_STYLES = (
    Style("bullets", r"^\s*- ", "Please answer as a short bulleted list, each line starting with '- '."),
    Style("formal", r"^\s*Certainly\b", "Please answer formally and start with 'Certainly'."),
    Style("casual", r"^\s*Hey\b", "Please answer casually and start with 'Hey'."),
)
DEFAULT_TOPICS = ("the weather", "apples", "homework", "python", "books", "the week", "numbers", "music")


@dataclass
class Reaction:
    text: str
    satisfied: bool


@dataclass
class PreferenceUser:
    """A user with a hidden preference: ``preferred`` names one criterion among ``styles`` (e.g.
    ``"bullets"``) or several joined with ``+`` (e.g. ``"bullets+brief"``: every one must be met).

    ``styles`` holds the criteria the user can look up by name (any :class:`Criterion`; the field keeps
    its historical name). A reply that meets every preferred criterion gets :data:`THANKS`; otherwise the
    user writes ``"No, not like that. "`` followed by the requests of the criteria it missed, in the order
    of ``preferred``, joined with a space (each request starts with "Please", so :func:`judge_reaction`
    extracts all of them as one hint).
    """

    preferred: str = "bullets"
    styles: tuple[Criterion, ...] = DEFAULT_STYLES
    topics: tuple[str, ...] = DEFAULT_TOPICS
    max_turns: int = 3
    _by_name: dict = field(init=False, repr=False)

    def __post_init__(self):
        self._by_name = {s.name: s for s in self.styles}
        names = self.preferred.split("+") if isinstance(self.preferred, str) else [None]
        unknown = [n for n in names if n not in self._by_name]
        if unknown or len(set(names)) != len(names):
            raise ValueError(
                f"preferred {self.preferred!r} must name one or more distinct criteria joined with '+', "
                f"each one of {sorted(self._by_name)}"
            )

    @property
    def criteria(self) -> tuple[Criterion, ...]:
        """The preferred criteria, in the order ``preferred`` names them."""
        return tuple(self._by_name[n] for n in self.preferred.split("+"))

    @property
    def style(self) -> Criterion:
        """The first preferred criterion (the only one for a single-criterion user)."""
        return self.criteria[0]

    @property
    def request(self) -> str:
        """Every preferred criterion's request, joined with a space."""
        return " ".join(c.request for c in self.criteria)

    def opening(self, rng: random.Random) -> str:
        return f"Tell me about {rng.choice(self.topics)}."

    def missed(self, reply: str) -> tuple[Criterion, ...]:
        """The preferred criteria ``reply`` does not meet (in the order of ``preferred``)."""
        return tuple(c for c in self.criteria if not c.matches(reply))

    def satisfied_by(self, reply: str) -> bool:
        return not self.missed(reply)

    def react(self, reply: str, rng: random.Random) -> Reaction:
        missed = self.missed(reply)
        if not missed:
            return Reaction(THANKS, True)
        return Reaction("No, not like that. " + " ".join(c.request for c in missed), False)


def judge_reaction(next_state_text: str, next_state_role: str = "user") -> tuple[int, str | None]:
    """``(reward, hint)`` from a :class:`PreferenceUser` reaction: thanks -> +1; a change request -> -1
    with the request as the hint (from the first "Please" to the end of the line, so a reaction asking
    for several things gives all of their requests); anything else (a tool result, an unrelated reply)
    -> no signal."""
    text = (next_state_text or "").strip()
    if next_state_role != "user" or not text:
        return 0, None
    if text.lower().startswith("thanks"):
        return 1, None
    match = re.search(r"Please .+", text)
    return (-1, match.group(0).strip()) if match else (0, None)


def rule_judge(turn):
    """The ``callable`` judge backend for simulated conversations (``judge_callable:
    openclaw_trl.simulation:rule_judge``): receives a ``scorer.JudgeInput``, returns a ``scorer.Verdict``."""
    from openclaw_trl.judging import Verdict

    reward, hint = judge_reaction(turn.next_state_text, turn.next_state_role)
    return Verdict(reward=reward, hint=hint, raw=f"rule judge: reward {reward}, hint {hint!r}")


@dataclass(frozen=True)
class NoisyRuleJudge:
    """:func:`rule_judge` with judge uncertainty: with probability ``noise`` a turn's verdict is corrupted.

    A corrupted verdict has its reward negated (a "thanks" becomes -1, a change request +1, no signal
    stays 0) and its hint, when there is one, garbled: replaced by one of ``decoys`` other than the real
    hint (a wrong instruction, as a judge that misread the user would extract), or, without decoys, the
    hint's words in a shuffled order. A "thanks" flipped to -1 carries no hint (there was none to garble).

    Whether a turn is corrupted, and how, is drawn from ``random.Random(f"{seed}:{turn_id}")``: the same
    ``seed`` and turn ids give the same verdicts whatever order the scorer's threads call the judge in,
    and each turn is corrupted independently with probability ``noise``. Pass an instance as the
    scorer's ``judge_fn`` (it is called as ``fn(turn: JudgeInput) -> Verdict``).
    """

    noise: float = 0.0
    seed: int = 0
    decoys: tuple[str, ...] = ()

    def __post_init__(self):
        if not 0.0 <= self.noise <= 1.0:
            raise ValueError(f"noise is a probability in [0, 1], got {self.noise}")

    def verdict(self, turn_id: int, next_state_text: str, next_state_role: str = "user"):
        """``(reward, hint, corrupted)`` for one turn's next state."""
        reward, hint = judge_reaction(next_state_text, next_state_role)
        rng = random.Random(f"{self.seed}:{turn_id}")
        if rng.random() >= self.noise:
            return reward, hint, False
        return -reward, (self.garble(hint, rng) if hint else None), True

    def garble(self, hint: str, rng: random.Random) -> str:
        """A wrong version of ``hint``: another decoy, else its words shuffled (differently when possible)."""
        others = [d for d in self.decoys if d != hint]
        if others:
            return rng.choice(others)
        words = hint.split()
        if len(set(words)) < 2:
            return hint
        shuffled = list(words)
        while shuffled == words:
            rng.shuffle(shuffled)
        return " ".join(shuffled)

    def __call__(self, turn):
        from openclaw_trl.judging import Verdict

        reward, hint, corrupted = self.verdict(turn.turn_id, turn.next_state_text, turn.next_state_role)
        tag = "noisy rule judge (corrupted)" if corrupted else "noisy rule judge"
        return Verdict(reward=reward, hint=hint, raw=f"{tag}: reward {reward}, hint {hint!r}")


@dataclass
class ConversationLog:
    session_id: str
    first_reply_satisfied: bool
    turns: int
    turn_ids: list[str]


def run_conversations(
    base_url: str,
    user: PreferenceUser,
    n: int,
    seed: int = 0,
    session_prefix: str = "sim",
    max_tokens: int = 48,
    model: str = "openclaw",
    api_key: str | None = None,
    should_stop: Callable[[], bool] = lambda: False,
    timeout: float = 600.0,
    feedback: bool = False,
    seeded: bool = False,
    after_reply: Callable[[], object] | None = None,
) -> list[ConversationLog]:
    """Run ``n`` simulated conversations through ``POST /v1/chat/completions`` with session headers.

    ``base_url`` is the server's root (``http://127.0.0.1:7860``), the API is under ``/v1``.

    Each conversation: the opening request, then the user's reaction to each reply, until the user is
    satisfied (its "thanks" is sent as the final request with ``X-Session-Done``) or ``max_turns``.
    With ``feedback`` (a :class:`FeedbackUser`), each reply is first rated with ``POST /v1/feedback``.
    With ``seeded``, every request carries a ``seed`` drawn from ``seed`` (the server samples, and picks
    among Best-of-N candidates, the same way for the same request); ``after_reply()`` is called after each
    reply arrives, before the user reacts (a caller that judges the turns itself, in step).
    """
    rng = random.Random(seed)
    request_seeds = random.Random(f"requests-{seed}") if seeded else None

    def chat(messages: list, session: str, done: bool) -> tuple[str, str]:
        request_seed = request_seeds.randrange(2**31) if request_seeds is not None else None
        answer = _chat(client, messages, session, max_tokens, done=done, seed=request_seed)
        if after_reply is not None:
            after_reply()
        return answer

    logs = []
    with OpenAIClient(base_url.rstrip("/") + "/v1", model, api_key, timeout) as client:
        for i in range(n):
            if should_stop():
                break
            session = f"{session_prefix}-{seed}-{i}"
            messages = [{"role": "user", "content": user.opening(rng)}]
            first_ok, turn_ids = None, []

            for turn in range(user.max_turns):
                last = turn == user.max_turns - 1
                reply, turn_id = chat(messages, session, done=False)
                turn_ids.append(turn_id)
                if feedback and turn_id:
                    _rate(client, user, reply, int(turn_id), session)
                reaction = user.react(reply, rng)
                first_ok = reaction.satisfied if first_ok is None else first_ok
                messages += [
                    {"role": "assistant", "content": reply},
                    {"role": "user", "content": reaction.text},
                ]
                if reaction.satisfied or last:
                    # The reaction is the next state of the last reply; this final request closes the session.
                    _, turn_id = chat(messages, session, done=True)
                    turn_ids.append(turn_id)
                    break
            logs.append(ConversationLog(session, bool(first_ok), len(turn_ids), turn_ids))
    return logs


def _rate(client: OpenAIClient, user, reply: str, turn_id: int, session: str) -> None:
    rating, text = user.rate(reply)
    body = {"turn_id": turn_id, "session_id": session, "rating": rating}
    if text:
        body["text"] = text
    client.post("/feedback", body)


def _chat(client: OpenAIClient, messages: list, session: str, max_tokens: int, done: bool, seed=None):
    headers = {"X-Session-Id": session, "X-Turn-Type": "main"}
    if done:
        headers["X-Session-Done"] = "true"
    message, response = client.chat(messages, headers=headers, max_tokens=max_tokens, seed=seed)
    return message.get("content") or "", response.headers.get("x-openclaw-turn-id", "")


@dataclass
class FeedbackUser(PreferenceUser):
    """A :class:`PreferenceUser` that also rates every reply through ``POST /v1/feedback``.

    👍 (+1) when the reply meets the preference; otherwise 👎 (-1) with the requests of the missed
    criteria as the correction text. This is the signal the ``feedback`` judge backend reads (rating =
    reward, text = hint); the user still replies in words as well, so the conversation goes on as with a
    :class:`PreferenceUser`.
    """

    def rate(self, reply: str) -> tuple[int, str | None]:
        if self.satisfied_by(reply):
            return 1, None
        return -1, " ".join(c.request for c in self.missed(reply))


def run_feedback_conversations(
    base_url: str,
    user: FeedbackUser,
    n: int,
    seed: int = 0,
    session_prefix: str = "fb",
    max_tokens: int = 48,
    model: str = "openclaw",
    api_key: str | None = None,
    should_stop: Callable[[], bool] = lambda: False,
    timeout: float = 600.0,
    seeded: bool = False,
    after_reply: Callable[[], object] | None = None,
) -> list[ConversationLog]:
    """Like :func:`run_conversations`, but each reply is rated with ``POST /v1/feedback`` (turn id from the
    ``x-openclaw-turn-id`` header) before the user's next message is sent.

    The feedback arrives first, so it is the turn's next state; the reply that follows is then only the
    conversation going on (the collector does not replace a next state with a later request).
    """
    return run_conversations(
        base_url,
        user,
        n,
        seed=seed,
        session_prefix=session_prefix,
        max_tokens=max_tokens,
        model=model,
        api_key=api_key,
        should_stop=should_stop,
        timeout=timeout,
        feedback=True,
        seeded=seeded,
        after_reply=after_reply,
    )
