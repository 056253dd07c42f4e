"""The simulated users of the evaluation: GSM8K homework *student* and grading *teacher* personas.

A persona is played by any OpenAI-compatible LLM. It has three prompts, all our own wording:

* ``system``: who the user is, what they want from the assistant, when to ask for a rewrite and when to
  stop (by writing the persona's ``sentinel``). It sees the assistant's replies as *user* messages that
  start with :data:`REPLY_PREFIX`, and its own earlier messages as *assistant* messages: the simulator is
  an ordinary chat model talking to "the assistant".
* ``opening``: the fixed first message to the assistant (the problem, and for the teacher a student's
  submission and the correct answer), so that every model under test gets the same request.
* ``rating``: a separate, stateless call that shows the persona the problem and *one* assistant reply and
  asks how satisfied it would be, as a number between 0 and 1. The reference reports "the simulator's
  rating of the first answer" without publishing a rating prompt; this is ours.

The student wants homework help that reads like a person wrote it (plain prose, every step kept, no
headings, bold or "Final answer" banners); the teacher wants grading comments that are specific, warm
and encouraging. Both are what the reference's simulators ask for; these are the styles a model can learn.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

REPLY_PREFIX = "The assistant replied:\n\n"


@dataclass(frozen=True)
class Persona:
    name: str
    system: str
    sentinel: str
    rating_criteria: str

    def opening(self, problem: dict, submission: str | None = None) -> str:
        if self.name == "student":
            return (
                "hey, can you help me with my math homework? here's the problem:\n\n"
                f"{problem['question']}\n\nshow me how to get the answer"
            )
        return (
            "I'm grading homework and I'd like your help writing the comments for this student.\n\n"
            f"Question: {problem['question']}\n\nCorrect answer: {problem['answer']}\n\n"
            f"Student's submission:\n{submission or '(no work shown)'}\n\n"
            "Compare the submission with the correct answer and write the comments for the student "
            "directly, addressed to them. Just the comments, please."
        )


STUDENT = Persona(
    name="student",
    sentinel="HOMEWORK_DONE",
    system=(
        "You are role-playing a high-school student who is chatting with an AI assistant about one math "
        "homework problem. You are a bit lazy and casual: short messages, lowercase is fine, no "
        "politeness formulas. You never solve the problem yourself and you never explain the math.\n\n"
        "What you want: a solution you could hand in as your own work. That means every step of the "
        "reasoning is there, but it reads like a student wrote it: plain sentences, calculations inline. "
        "Things that give away an AI and that you do not want: headings, bold text, numbered or bulleted "
        "step lists, a 'Final Answer' banner, boxed answers, an overly polished or chatty tone.\n\n"
        "How to react to each reply of the assistant:\n"
        "- If it looks AI-written in any of those ways, ask for a rewrite in a natural style, and say that "
        "all the steps must stay. Mention concretely what bothered you.\n"
        "- If the steps are missing or it only gives the number, ask for the working.\n"
        "- If you are happy with it, thank the assistant briefly and then write exactly HOMEWORK_DONE on "
        "its own line.\n"
        "Write only your next message to the assistant, nothing else."
    ),
    rating_criteria=(
        "You are a high-school student who wants a homework solution that keeps every step but reads as "
        "if a student wrote it: plain prose, calculations inline, no headings, no bold, no numbered or "
        "bulleted step lists, no 'Final Answer' banner, no boxed answer. A correct answer matters too."
    ),
)

TEACHER = Persona(
    name="teacher",
    sentinel="GRADING_DONE",
    system=(
        "You are role-playing a school teacher who is grading math homework with the help of an AI "
        "assistant. You already gave the assistant the question, the correct answer and the student's "
        "submission. You want comments you can give the student as they are.\n\n"
        "Good comments are addressed to the student, say specifically what they did well, explain any "
        "mistake and show the correct approach, and are patient, warm and encouraging. Comments that are "
        "too short, generic, cold or that only state the right answer are not good enough; so are comments "
        "full of headings or that talk about the student instead of to them.\n\n"
        "How to react to each reply of the assistant:\n"
        "- If the comments fall short in any of those ways, ask for a rewrite and say concretely what is "
        "missing (more detail, a warmer tone, the correct method, ...).\n"
        "- If you are happy with them, thank the assistant briefly and then write exactly GRADING_DONE on "
        "its own line.\n"
        "Write only your next message to the assistant, nothing else."
    ),
    rating_criteria=(
        "You are a teacher who wants grading comments you can hand to the student as they are: addressed "
        "to the student, specific about what they did well, explaining any mistake and showing the correct "
        "approach, patient, warm and encouraging, and consistent with the correct answer."
    ),
)

PERSONAS = {p.name: p for p in (STUDENT, TEACHER)}

SUBMISSION_PROMPT = (
    "Write a short handwritten-style homework submission by a middle-school student for the problem below: "
    "a few lines of working and a final answer. The student may make one small mistake. Write only the "
    "submission.\n\nProblem: {question}"
)

RATING_PROMPT = (
    "{criteria}\n\nHere is the request you sent to an AI assistant:\n\n{opening}\n\n"
    "Here is the assistant's reply:\n\n{reply}\n\n"
    "How satisfied are you with this reply, judging only by what you want? Answer with a single number "
    "between 0 and 1 (0 = not at all, 1 = exactly what you wanted), written as RATING: <number> on the "
    "last line."
)


def rating_messages(persona: Persona, opening: str, reply: str) -> list[dict]:
    """The stateless rating call for one reply."""
    text = RATING_PROMPT.format(criteria=persona.rating_criteria, opening=opening, reply=reply or "(empty)")
    return [{"role": "user", "content": text}]


_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_NUMBER = r"([0-9]*\.?[0-9]+)"
_LABELLED = re.compile(r"rating\s*[:=\-]?\s*\**\s*" + _NUMBER + r"\s*(%|/\s*([0-9]+))?", re.IGNORECASE)
_FRACTION = re.compile(_NUMBER + r"\s*(?:/|out of)\s*([0-9]+)", re.IGNORECASE)
_PERCENT = re.compile(_NUMBER + r"\s*%")
_BARE = re.compile(r"(?<![\w.])" + _NUMBER + r"(?![\w.])")


def strip_thinking(text: str | None) -> str:
    """The visible part of a model output: ``<think>`` blocks (and an unclosed leading one) removed."""
    text = _THINK.sub("", text or "")
    if "</think>" in text:
        text = text.rsplit("</think>", 1)[1]
    return text.strip()


def _scaled(value: float, scale: float | None) -> float | None:
    if scale:
        value = value / scale
    elif value > 1:  # "8" on an unstated scale: 0-10 if it fits, 0-100 otherwise
        value = value / 10 if value <= 10 else value / 100
    return value if 0 <= value <= 1 and math.isfinite(value) else None


def parse_rating(text: str | None) -> float | None:
    """A 0-1 rating from a rater's output; None when there is none.

    Robust to what LLMs write: the last ``RATING: x`` wins (also ``x%``, ``x/10``); else the last fraction
    ("7/10", "7 out of 10") or percentage; else the last bare number of the last line that has one.
    Values on a 0-10 or 0-100 scale are rescaled; anything that is still outside [0, 1] is rejected.
    """
    text = strip_thinking(text)
    if not text:
        return None
    labelled = _LABELLED.findall(text)
    if labelled:
        value, unit, denominator = labelled[-1]
        scale = 100.0 if unit.strip() == "%" else (float(denominator) if denominator else None)
        return _scaled(float(value), scale)
    fractions = _FRACTION.findall(text)
    if fractions:
        value, denominator = fractions[-1]
        return _scaled(float(value), float(denominator)) if float(denominator) > 0 else None
    percents = _PERCENT.findall(text)
    if percents:
        return _scaled(float(percents[-1]), 100.0)
    for line in reversed(text.splitlines()):
        numbers = _BARE.findall(line)
        if numbers:
            return _scaled(float(numbers[-1]), None)
    return None
