"""The toy world: topics, answer styles, and the chats the small toy model is taught.

Why a made-up world: learning from conversation has to be *seen* on a small CPU, so the model must be
small enough to pre-train from scratch in minutes, and the task must have the same structure as the
reference evaluation (a user with a hidden preference about *how* an answer looks, who asks for a change
in words when the answer misses it). Here every request is "Tell me about <topic>." and an answer comes
in one of four styles, each recognisable by a :class:`~openclaw_trl.simulation.Style` regex (the three of
``openclaw_trl.simulation.DEFAULT_STYLES`` plus a numbered list).

The pre-training chats (:func:`training_chats`) teach three behaviours, which are what OPD needs:

* a bare request gets a style chosen uniformly at random (so the base rate of any one style is ~1/4);
* a request that ends with ``judge.append_hint``'s block (``[user's hint / instruction]`` + a style
  request) gets that style: the hint-conditioned model is a better teacher than the bare one;
* a follow-up turn "No, not like that. Please …" gets the requested style (so conversations recover, and
  the user's reply carries the hint the judge extracts).
"""

from __future__ import annotations

import random

from openclaw_trl.judge import append_hint
from openclaw_trl.simulation import DEFAULT_STYLES, THANKS, PreferenceUser, Style

STYLES: tuple[Style, ...] = DEFAULT_STYLES + (
    Style("numbered", r"^\s*1\. ", "Please answer as a numbered list, each line starting with '1. ', '2. '."),
)
STYLE_NAMES = tuple(s.name for s in STYLES)
PREFERRED = "bullets"

FACTS: dict[str, tuple[str, ...]] = {
    "the weather": (
        "rain comes from clouds",
        "the sun warms the air",
        "winter days are cold",
        "wind moves the clouds",
    ),
    "apples": (
        "apples grow on trees",
        "an apple can be red or green",
        "apples taste sweet",
        "apple pie is a dessert",
    ),
    "homework": (
        "homework helps you practice",
        "a short break helps focus",
        "start with the hardest task",
        "check your answers at the end",
    ),
    "python": (
        "python is a programming language",
        "python code is easy to read",
        "lists hold many values",
        "functions group steps together",
    ),
    "books": (
        "books tell stories",
        "a library lends books",
        "reading every day builds vocabulary",
        "some books have pictures",
    ),
    "the week": (
        "a week has seven days",
        "monday starts the work week",
        "the weekend is for rest",
        "friday comes before saturday",
    ),
    "numbers": (
        "two plus two is four",
        "zero is an even number",
        "primes have two divisors",
        "ten is five times two",
    ),
    "music": (
        "music has rhythm and melody",
        "a piano has many keys",
        "songs often repeat a chorus",
        "drums keep the beat",
    ),
}
TOPICS = tuple(FACTS)
WELCOME = "You're welcome."


def make_user(preferred: str = PREFERRED, max_turns: int = 3) -> PreferenceUser:
    """The simulated user of this world: a hidden preferred style among :data:`STYLES`."""
    return PreferenceUser(preferred=preferred, styles=STYLES, topics=TOPICS, max_turns=max_turns)


def style(name: str) -> Style:
    """The style called ``name`` among :data:`STYLES`."""
    return next(s for s in STYLES if s.name == name)


def style_request(name: str) -> str:
    return style(name).request


def render_answer(style: str, topic: str, rng: random.Random) -> str:
    """An answer about ``topic`` in ``style``: two facts, laid out the way the style's regex recognises."""
    a, b = rng.sample(FACTS[topic], 2)
    if style == "bullets":
        return f"- {a.capitalize()}.\n- {b.capitalize()}."
    if style == "numbered":
        return f"1. {a.capitalize()}.\n2. {b.capitalize()}."
    if style == "formal":
        return f"Certainly. {a.capitalize()}, and {b}."
    if style == "casual":
        return f"Hey, {a}! Also, {b}."
    raise ValueError(f"unknown style {style!r}")


def opening(topic: str) -> str:
    """The first message of a conversation (the same text :class:`PreferenceUser` writes)."""
    return f"Tell me about {topic}."


def change_request(style: str) -> str:
    """The follow-up a dissatisfied :class:`PreferenceUser` writes."""
    return f"No, not like that. {style_request(style)}"


def training_chats(n: int, seed: int = 0) -> list[list[dict]]:
    """``n`` pre-training conversations (lists of chat messages ending with an assistant message)."""
    rng = random.Random(seed)
    chats = []
    for _ in range(n):
        topic = rng.choice(TOPICS)
        first = rng.choice(STYLE_NAMES)
        kind = rng.random()
        messages = [{"role": "user", "content": opening(topic)}]
        if kind < 0.35:  # bare request: a random style
            messages.append({"role": "assistant", "content": render_answer(first, topic, rng)})
        elif kind < 0.65:  # the hint block of judge.append_hint: that style
            want = rng.choice(STYLE_NAMES)
            messages = append_hint(messages, style_request(want))
            messages.append({"role": "assistant", "content": render_answer(want, topic, rng)})
        else:  # a miss, then "No, not like that. Please …" (sometimes hinted too): the requested style
            want = rng.choice([s for s in STYLE_NAMES if s != first])
            messages += [
                {"role": "assistant", "content": render_answer(first, topic, rng)},
                {"role": "user", "content": change_request(want)},
            ]
            if rng.random() < 0.25:
                messages = append_hint(messages, style_request(want))
            messages.append({"role": "assistant", "content": render_answer(want, topic, rng)})
        if rng.random() < 0.2:  # the user's "thanks" closes the conversation: a short reply
            messages += [{"role": "user", "content": THANKS}, {"role": "assistant", "content": WELCOME}]
        chats.append(messages)
    return chats
