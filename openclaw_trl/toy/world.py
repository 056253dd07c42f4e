"""The toy world: topics, answer styles and lengths, and the chats the small toy model is taught.

Why a made-up world: learning from conversation has to be *seen* on a small CPU, so the model must be
small enough to pre-train from scratch in minutes, and the task must have the same structure as the
reference evaluation (a user with a hidden preference about *how* an answer looks, who asks for a change
in words when the answer misses it). Here every request is "Tell me about <topic>." and an answer states
one, two or three facts of the topic (:data:`FACTS`) in one of four styles, each recognisable by a
:class:`~openclaw_trl.simulation.Style` regex (the three of ``openclaw_trl.simulation.DEFAULT_STYLES`` plus
a numbered list). A user's preference (:func:`preference`) is a style, a length (:data:`BRIEF`: one fact
only), or both (``"bullets+brief"``); :func:`answer_fidelity` checks that an answer is a well-formed
answer about the asked topic.

The pre-training chats (:func:`training_chats`) teach three behaviours, which are what OPD needs, and a
fourth for the people who talk to the demo:

* a bare request gets a style chosen uniformly at random and 1, 2 or 3 facts (uniformly), so the base
  rate of any one style is ~1/4 and that of a brief answer ~1/3;
* a request that ends with ``judge.append_hint``'s block (``[user's hint / instruction]`` + a style
  request, the brief request, or both in either order) gets an answer meeting every request (a style
  request alone: any number of facts; the brief request alone: any style): the hint-conditioned model is
  a better teacher than the bare one;
* a follow-up turn "No, not like that. Please …" asking for what the first answer missed (its style, its
  length, or both; the first answer is a bare one, so the base rates above hold) gets an answer meeting
  every request (so conversations recover, and the user's reply carries the hint the judge
  extracts);
* any other message (a greeting, "What can you do?", "Tell me about cars.", random words: see
  :func:`off_topic_message`) gets one fixed answer, :data:`OFF_TOPIC_ANSWER`, saying what the toy knows
  and what to type. Off-topic messages are built from word lists split in two: the pre-training chats use
  one part, :func:`held_out_off_topic` the other, so the measured compliance is on messages never seen.
"""

from __future__ import annotations

import functools
import itertools
import random
from dataclasses import dataclass

from openclaw_trl.judge import append_hint
from openclaw_trl.simulation import DEFAULT_STYLES, THANKS, Criterion, PreferenceUser, Style

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
ALL_FACTS = tuple(fact for facts in FACTS.values() for fact in facts)
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


MAX_FACTS = 3
"""An answer states 1 to ``MAX_FACTS`` distinct facts of its topic."""


def _fact_mentions(text: str) -> int:
    """How many times facts of :data:`FACTS` (any topic) occur in ``text`` (case-insensitive)."""
    low = (text or "").lower()
    return sum(low.count(fact) for fact in ALL_FACTS)


@dataclass(frozen=True)
class Brief:
    """The length criterion: the answer states exactly one fact.

    ``matches(text)``: the facts of :data:`FACTS` (of any topic, case-insensitive) occur exactly once in
    ``text`` in all, and ``text`` is a single line (a second bullet or sentence-line is a second item,
    whatever it says). Counting known facts, rather than sentences, keeps it independent of the style.
    """

    name: str = "brief"
    request: str = "Please keep it short: one fact only."

    def matches(self, text: str) -> bool:
        lines = [line for line in (text or "").splitlines() if line.strip()]
        return len(lines) == 1 and _fact_mentions(text) == 1


BRIEF = Brief()
CRITERIA: tuple[Criterion, ...] = STYLES + (BRIEF,)
"""Everything a user of this world can want: one of the styles, and/or a brief answer."""
CRITERION_NAMES = tuple(c.name for c in CRITERIA)


def criterion(name: str) -> Criterion:
    """The criterion called ``name`` among :data:`CRITERIA`."""
    for c in CRITERIA:
        if c.name == name:
            return c
    raise ValueError(f"unknown criterion {name!r}: one of {CRITERION_NAMES}")


@dataclass(frozen=True)
class Preference:
    """A user's preference: every criterion must match. ``name`` is the spec it was built from."""

    name: str
    criteria: tuple[Criterion, ...]

    def matches(self, text: str) -> bool:
        return all(c.matches(text) for c in self.criteria)

    @property
    def requests(self) -> tuple[str, ...]:
        """What the user writes to ask for each criterion, in the spec's order."""
        return tuple(c.request for c in self.criteria)


def preference(spec: str) -> Preference:
    """The preference named by ``spec``: distinct :data:`CRITERION_NAMES` joined with ``+``, at most one of
    them a style (``"bullets"``, ``"brief"``, ``"bullets+brief"``, ``"brief+numbered"``)."""
    allowed = (
        f"one or more distinct names of {CRITERION_NAMES} joined with '+', at most one of them a style of "
        f"{STYLE_NAMES} (e.g. 'bullets', 'brief', 'bullets+brief')"
    )
    names = spec.split("+") if isinstance(spec, str) else [None]
    if any(n not in CRITERION_NAMES for n in names) or len(set(names)) != len(names):
        raise ValueError(f"preference {spec!r} is not one of the allowed specs: {allowed}")
    if sum(n in STYLE_NAMES for n in names) > 1:
        raise ValueError(f"preference {spec!r} asks for two styles at once; a preference is {allowed}")
    return Preference(spec, tuple(criterion(n) for n in names))


def make_user(
    preferred: str = PREFERRED, max_turns: int = 3, topics: tuple[str, ...] = TOPICS
) -> PreferenceUser:
    """The simulated user of this world: a hidden preference (a :func:`preference` spec) over
    :data:`CRITERIA`, asking about ``topics`` (a subset of :data:`TOPICS`, e.g. to hold some out)."""
    preference(preferred)  # the world's rules (at most one style) on top of the user's
    unknown = [t for t in topics if t not in FACTS]
    if not topics or unknown:
        raise ValueError(f"topics must be a non-empty subset of {TOPICS}; got {tuple(topics)!r}")
    return PreferenceUser(preferred=preferred, styles=CRITERIA, topics=tuple(topics), max_turns=max_turns)


def style(name: str) -> Style:
    """The style called ``name`` among :data:`STYLES`."""
    return next(s for s in STYLES if s.name == name)


def style_request(name: str) -> str:
    """The request for the criterion ``name`` (a style, or ``"brief"``)."""
    return criterion(name).request


def render_facts(style: str, facts: tuple[str, ...] | list[str]) -> str:
    """An answer stating ``facts`` (1 to 3, in this order) in ``style``, laid out the way the style's regex
    recognises: one line per fact for bullets / numbered; ``Certainly. A.`` / ``Certainly. A, and b.`` /
    ``Certainly. A, b, and c.``; ``Hey, a!`` / ``Hey, a! Also, b.`` / ``Hey, a! Also, b. And c.``."""
    if not 1 <= len(facts) <= MAX_FACTS:
        raise ValueError(f"an answer states 1 to {MAX_FACTS} facts, got {len(facts)}")
    if style == "bullets":
        return "\n".join(f"- {f.capitalize()}." for f in facts)
    if style == "numbered":
        return "\n".join(f"{i}. {f.capitalize()}." for i, f in enumerate(facts, 1))
    first, rest = facts[0], list(facts[1:])
    if style == "formal":
        if not rest:
            return f"Certainly. {first.capitalize()}."
        return f"Certainly. {', '.join([first.capitalize()] + rest[:-1])}, and {rest[-1]}."
    if style == "casual":
        tail = "".join(f" {lead} {f}." for lead, f in zip(("Also,", "And"), rest))
        return f"Hey, {first}!{tail}"
    raise ValueError(f"unknown style {style!r}: one of {STYLE_NAMES}")


def render_answer(style: str, topic: str, rng: random.Random, n_facts: int = 2) -> str:
    """An answer about ``topic`` in ``style`` stating ``n_facts`` distinct facts drawn with ``rng``."""
    if not 1 <= n_facts <= MAX_FACTS:
        raise ValueError(f"an answer states 1 to {MAX_FACTS} facts, got n_facts={n_facts}")
    return render_facts(style, rng.sample(FACTS[topic], n_facts))


@functools.cache
def well_formed_answers(topic: str) -> frozenset[str]:
    """Every well-formed answer about ``topic``: each style, each ordered choice of 1-3 distinct facts
    (4 styles x (4 + 12 + 24) orders = 160 texts per topic)."""
    if topic not in FACTS:
        raise ValueError(f"unknown topic {topic!r}: one of {TOPICS}")
    return frozenset(
        render_facts(s, facts)
        for s in STYLE_NAMES
        for n in range(1, MAX_FACTS + 1)
        for facts in itertools.permutations(FACTS[topic], n)
    )


def answer_fidelity(topic: str, text: str) -> bool:
    """Content fidelity: ``text`` (stripped) is exactly one of :func:`well_formed_answers` of ``topic``
    (so it is about the asked topic and states its facts, word for word, in a style of this world).
    False for a topic this world does not know."""
    if topic not in FACTS or not isinstance(text, str):
        return False
    return text.strip() in well_formed_answers(topic)


def opening(topic: str) -> str:
    """The first message of a conversation (the same text :class:`PreferenceUser` writes)."""
    return f"Tell me about {topic}."


def change_request(spec: str) -> str:
    """The follow-up a dissatisfied :class:`PreferenceUser` writes when it missed every criterion of
    ``spec`` (a :func:`preference` spec): ``"No, not like that. "`` and their requests."""
    return "No, not like that. " + " ".join(preference(spec).requests)


OFF_TOPIC_SHARE = 0.2
"""The fraction of pre-training chats that teach :data:`OFF_TOPIC_ANSWER`."""


def random_answer(topic: str, rng: random.Random) -> str:
    """A bare request's answer: a uniformly random style and 1-3 facts (uniformly)."""
    return render_answer(rng.choice(STYLE_NAMES), topic, rng, rng.randint(1, MAX_FACTS))


def off_topic_chat(rng: random.Random) -> list[dict]:
    """An off-topic message and the fixed answer, sometimes after an exchange about a topic, sometimes
    followed by a request (answered in a random style and length, as a bare request is)."""
    exchanges = [[{"role": "user", "content": off_topic_message(rng)}, OFF_TOPIC_ANSWER]]
    position = rng.random()
    if position < 0.6:
        topic = rng.choice(TOPICS)
        exchange = [{"role": "user", "content": opening(topic)}, random_answer(topic, rng)]
        exchanges.insert(0 if position < 0.3 else 1, exchange)
    return [
        message for user, answer in exchanges for message in (user, {"role": "assistant", "content": answer})
    ]


HINT_KINDS = (("style", 0.4), ("brief", 0.3), ("both", 0.3))
"""What a hinted request asks for, and how often: a style, brevity, or both."""
MISS_KINDS = (("style", 0.25), ("brief", 0.375), ("both", 0.375))
"""What a follow-up asks for after a first answer of 2-3 facts (after one fact: a style, the only miss)."""


def _wanted(
    rng: random.Random, kinds=HINT_KINDS, not_style: str | None = None
) -> tuple[str | None, bool, str]:
    """A taught request: ``(style or None, brief?, spec)``, drawn from ``kinds``; a requested style is
    never ``not_style``; "both" comes in either order."""
    kind = rng.choices([k for k, _ in kinds], weights=[w for _, w in kinds])[0]
    want = rng.choice([s for s in STYLE_NAMES if s != not_style]) if kind != "brief" else None
    if kind == "style":
        return want, False, want
    if kind == "brief":
        return None, True, BRIEF.name
    return want, True, rng.choice((f"{want}+brief", f"brief+{want}"))


def _meeting(topic: str, want: str | None, brief: bool, rng: random.Random) -> str:
    """An answer meeting the request: the wanted style (else any), one fact if brief (else any count)."""
    return render_answer(
        want or rng.choice(STYLE_NAMES), topic, rng, 1 if brief else rng.randint(1, MAX_FACTS)
    )


def training_chats(n: int, seed: int = 0) -> list[list[dict]]:
    """``n`` pre-training conversations (lists of chat messages ending with an assistant message)."""
    rng = random.Random(seed)
    chats = []
    for _ in range(n):
        if rng.random() < OFF_TOPIC_SHARE:
            chats.append(off_topic_chat(rng))
            continue
        topic = rng.choice(TOPICS)
        kind = rng.random()
        messages = [{"role": "user", "content": opening(topic)}]
        if kind < 0.35:  # bare request: a random style and length
            messages.append({"role": "assistant", "content": random_answer(topic, rng)})
        elif kind < 0.65:  # the hint block of judge.append_hint: an answer meeting every request
            want, brief, spec = _wanted(rng)
            messages = append_hint(messages, " ".join(preference(spec).requests))
            messages.append({"role": "assistant", "content": _meeting(topic, want, brief, rng)})
        else:  # a bare answer, then "No, not like that. Please …" for what it missed (sometimes hinted too)
            first, n_facts = rng.choice(STYLE_NAMES), rng.randint(1, MAX_FACTS)
            kinds = MISS_KINDS if n_facts > 1 else (("style", 1.0),)
            want, brief, spec = _wanted(rng, kinds, not_style=first)
            messages += [
                {"role": "assistant", "content": render_answer(first, topic, rng, n_facts)},
                {"role": "user", "content": change_request(spec)},
            ]
            if rng.random() < 0.25:
                messages = append_hint(messages, " ".join(preference(spec).requests))
            messages.append({"role": "assistant", "content": _meeting(topic, want, brief, rng)})
        if rng.random() < 0.2:  # the user's "thanks" closes the conversation: a short reply
            messages += [{"role": "user", "content": THANKS}, {"role": "assistant", "content": WELCOME}]
        chats.append(messages)
    return chats
