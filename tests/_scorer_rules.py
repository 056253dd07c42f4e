"""Deterministic rule-based judges for the scorer tests (loaded through the ``callable`` backend)."""

import time

from openclaw_trl.judging import JudgeInput, Verdict

FRENCH_HINT = "Answer in French, the language the user writes in."
CATS_HINT = "Make the joke about cats and keep it short."


def rule_judge(turn: JudgeInput) -> Verdict:
    text = turn.next_state_text.lower()
    if turn.next_state_role == "tool":
        return Verdict(reward=-1 if "error" in text else 1, raw="tool rule")
    if "thanks" in text:
        return Verdict(reward=1, raw="thanks rule")
    if "wrong" in text:
        return Verdict(reward=-1, hint=FRENCH_HINT, raw="correction rule")
    if "make it about" in text:
        return Verdict(reward=0, hint=CATS_HINT, raw="preference rule")
    return Verdict(reward=0, raw="neutral")


def not_a_verdict(turn: JudgeInput):
    return {"reward": 1}


def out_of_range(turn: JudgeInput) -> Verdict:
    return Verdict(reward=2)


def raises(turn: JudgeInput) -> Verdict:
    raise RuntimeError("judge exploded")


def slow(turn: JudgeInput) -> Verdict:
    time.sleep(1.5)
    return Verdict(reward=1)
