"""The toy world: topics, answer styles, and the chats the small toy model is taught.

Why a made-up world: learning from conversation has to be *seen* on a small CPU, so the model must be
small enough to pre-train from scratch in minutes, and the task must have the same structure as the
reference evaluation (a user with a hidden preference about *how* an answer looks, who asks for a change
in words when the answer misses it). Here every request is "Tell me about <topic>." and an answer comes
in one of four styles, each recognisable by a :class:`~openclaw_trl.simulation.Style` regex (the three of
``openclaw_trl.simulation.DEFAULT_STYLES`` plus a numbered list).

The pre-training chats (:func:`training_chats`) teach three behaviours, which are what OPD needs, and a
fourth for the people who talk to the demo:

* a bare request gets a style chosen uniformly at random (so the base rate of any one style is ~1/4);
* a request that ends with ``judge.append_hint``'s block (``[user's hint / instruction]`` + a style
  request) gets that style: the hint-conditioned model is a better teacher than the bare one;
* a follow-up turn "No, not like that. Please …" gets the requested style (so conversations recover, and
  the user's reply carries the hint the judge extracts);
* any other message (a greeting, "What can you do?", "Tell me about cars.", random words: see
  :func:`off_topic_message`) gets one fixed answer, :data:`OFF_TOPIC_ANSWER`, saying what the toy knows
  and what to type. Off-topic messages are built from word lists split in two: the pre-training chats use
  one part, :func:`held_out_off_topic` the other, so the measured compliance is on messages never seen.
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
OFF_TOPIC_ANSWER = (
    f"I'm a tiny toy model. I can tell you about {', '.join(TOPICS[:-1])} and {TOPICS[-1]}. "
    "Try: Tell me about apples."
)
"""The answer to any message that is not one of this world's requests."""

GREETINGS = (
    "Hi", "Hello", "Hey", "Hi there", "Hello there", "Good morning", "Good evening", "Hey there", "Yo",
    "Greetings", "Howdy", "Good afternoon", "Hiya", "Hello again", "Morning", "Sup", "Heya", "Hallo",
    "Bonjour", "Hola",
)  # fmt: skip
QUESTIONS = (
    "What can you do?", "Who are you?", "How are you?", "What is your name?", "Can you help me?",
    "What do you know?", "Help", "What is 2+2?", "Write a poem.", "Are you a robot?",
    "What should I ask you?", "Explain quantum physics.", "Can you code?", "What time is it?",
    "Do you speak French?", "Tell me a joke.", "How does this work?", "What are you?",
    "Summarize this article for me.", "Translate hello into Spanish.", "Is anyone there?",
    "What topics do you know?", "Why is the sky blue?", "Can you write an email for me?",
    "What is the capital of France?", "How old are you?", "Are you smart?", "What's up?",
    "Give me some advice.", "Who made you?", "Please help me with my code.", "What is love?",
    "Recommend a movie.", "Can we talk?", "What is the meaning of life?", "How do I cook rice?",
    "Tell me something interesting.", "Do you like cats?", "Where do you live?", "Let's chat.",
)  # fmt: skip
UNKNOWN_TOPICS = (
    "cars", "dogs", "cats", "the moon", "space", "history", "football", "cooking", "the ocean", "trains",
    "money", "chess", "birds", "computers", "mountains", "coffee", "movies", "art", "the stars", "bananas",
    "physics", "rockets", "dinosaurs", "the internet", "painting", "soccer", "tea", "rivers", "cheese",
    "horses", "the news", "politics", "yourself", "love", "bicycles", "volcanoes", "java", "planes",
    "gardening", "the sea", "robots", "games", "pizza", "oranges", "the city", "snow", "fish", "clocks",
    "the year", "letters", "shoes", "the brain", "medicine", "flowers", "islands", "kings", "bees",
    "tennis", "poems", "maps",
)  # fmt: skip
WORDS = (
    "blue", "table", "run", "quick", "lamp", "seven", "green", "jump", "window", "river", "soft", "paper",
    "orange", "sing", "cloud", "happy", "door", "stone", "fast", "tree", "ok", "yes", "no", "maybe",
    "why", "test", "hello", "banana", "car", "light", "dark", "sleep", "write", "open", "small", "big",
    "red", "tomorrow", "phone", "glass", "walk", "ice", "cold", "hot", "asdf", "lol", "hmm", "???",
    "road", "bird",
)  # fmt: skip


FIRST_MESSAGES = (
    "Hi!",
    "Hello!",
    "Hi! What can you do?",
    "Hello! What can you do?",
    "hi",
    "What can you do?",
)
"""What people type first in a demo: always among the pre-training chats."""


def _split(items: tuple[str, ...], held_out: bool) -> tuple[str, ...]:
    """Every fifth item is held out of pre-training (for measuring); the rest is taught."""
    return tuple(x for i, x in enumerate(items) if (i % 5 == 4) == held_out)


def off_topic_message(rng: random.Random, held_out: bool = False) -> str:
    """A user message that is none of this world's requests: a greeting (with or without a question), a
    question, an unknown topic in the request's own form, or a few random words."""
    greet, ask = _split(GREETINGS, held_out), _split(QUESTIONS, held_out)
    kind = rng.random()
    if kind < 0.1 and not held_out:
        return rng.choice(FIRST_MESSAGES)
    if kind < 0.3:
        text = rng.choice(greet) + rng.choice(("", "!", ".", "?", "!!"))
        return text + (" " + rng.choice(ask) if rng.random() < 0.5 else "")
    if kind < 0.5:
        return rng.choice(ask)
    if kind < 0.75:
        return opening(rng.choice(_split(UNKNOWN_TOPICS, held_out)))
    words = " ".join(rng.choice(_split(WORDS, held_out)) for _ in range(rng.randint(1, 6)))
    return rng.choice((str.lower, str.capitalize))(words) + rng.choice(("", ".", "?", "!"))


def held_out_off_topic(n: int, seed: int = 4321) -> list[str]:
    """``n`` off-topic messages built only from the held-out word lists (never in pre-training)."""
    rng = random.Random(seed)
    return [off_topic_message(rng, held_out=True) for _ in range(n)]


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


OFF_TOPIC_SHARE = 0.2
"""The fraction of pre-training chats that teach :data:`OFF_TOPIC_ANSWER`."""


def off_topic_chat(rng: random.Random) -> list[dict]:
    """An off-topic message and the fixed answer, sometimes after an exchange about a topic, sometimes
    followed by a request (answered in a random style, as a bare request is)."""
    exchanges = [[{"role": "user", "content": off_topic_message(rng)}, OFF_TOPIC_ANSWER]]
    position = rng.random()
    if position < 0.6:
        topic = rng.choice(TOPICS)
        exchange = [
            {"role": "user", "content": opening(topic)},
            render_answer(rng.choice(STYLE_NAMES), topic, rng),
        ]
        exchanges.insert(0 if position < 0.3 else 1, exchange)
    return [
        message for user, answer in exchanges for message in (user, {"role": "assistant", "content": answer})
    ]


def training_chats(n: int, seed: int = 0) -> list[list[dict]]:
    """``n`` pre-training conversations (lists of chat messages ending with an assistant message)."""
    rng = random.Random(seed)
    chats = []
    for _ in range(n):
        if rng.random() < OFF_TOPIC_SHARE:
            chats.append(off_topic_chat(rng))
            continue
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
