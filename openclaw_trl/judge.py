"""The judge protocol as pure functions: prompts, verdict parsing, voting, hint selection and injection.

Two judges read one assistant response and the *next state* that followed it (the user's next
message, or the result of a tool the assistant called):

* the PRM judge votes ``\\boxed{1}`` / ``\\boxed{0}`` / ``\\boxed{-1}``; ``m`` votes are reduced by
  :func:`majority_vote` into the Binary-RL reward;
* the hint judge votes ``\\boxed{1}`` plus ``[HINT_START]…[HINT_END]`` when the next state reveals
  something the response should have taken into account, or ``\\boxed{-1}``; :func:`select_hint`
  keeps the longest usable hint, which :func:`append_hint` adds to the turn's prompt to build the
  teacher context for hindsight OPD.

Parsing ignores everything up to the last ``</think>``, and an output cut off inside ``<think>`` (no
closing tag after the last ``<think>``) is no vote: a thinking judge's drafts never count as its verdict.
Pure Python: importing this module must stay cheap.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence

from openclaw_trl.chat import flatten_content

METHODS = ("rl", "opd", "combine")
"""The learning methods: which judges run (PRM votes for ``rl``, hint votes for ``opd``, both for ``combine``)."""
JUDGE_BACKENDS = ("engine", "openai", "callable", "feedback")
"""Where judge votes come from: the colocated engine, an OpenAI-compatible endpoint, a Python callable, 👍/👎."""

HINT_MARKER = "[user's hint / instruction]"
MIN_HINT_CHARS = 10  # a kept hint is strictly longer than this once stripped
MAX_JUDGE_PROMPT_TOKENS = 4096  # tokens of one engine judge prompt (see fit_judge_messages)
MAX_HINT_CHARS = 2000  # characters of a hint added to the teacher prompt (see cap_hint)

_BOXED = re.compile(r"\\boxed\{([+-]?\d)\}")
_HINT_BLOCK = re.compile(r"\[HINT_START\](.*?)\[HINT_END\]", re.DOTALL)

_NEXT_STATE_GUIDE = (
    "The next state is one of two things. If its role is 'user', it is what the person wrote after "
    "reading the response. If its role is 'tool', it is the output of a tool that the assistant chose "
    "to call in its response: it exists only because the assistant acted."
)

PRM_SYSTEM_PROMPT = (
    "You grade a single assistant response in a conversation, acting as a process reward model. "
    "You do not see the whole conversation: you see the response and the next state, and you use the "
    "next state as evidence of whether the response did what the user wanted.\n\n"
    + _NEXT_STATE_GUIDE
    + "\n\nHow to score:\n"
    "- +1: the next state shows the response worked. The user moves on to something new, accepts the "
    "answer or says thanks; or the tool ran and returned a normal, error-free result.\n"
    "- -1: the next state shows the response missed. The user asks for a redo or a retry, corrects it, "
    "asks for a change, repeats or rephrases the same request, or complains; or the tool returned an "
    "error caused by how the assistant called it.\n"
    "- 0: the next state says nothing clear about the response, or is unrelated to it.\n\n"
    "A request to change or fix the response counts as negative evidence (-1); do not treat it as a "
    "neutral new instruction.\n\n"
    "Reason briefly, step by step, then end with the score written exactly as \\boxed{1}, \\boxed{0} "
    "or \\boxed{-1}."
)

HINT_SYSTEM_PROMPT = (
    "You extract hindsight hints. You see an assistant response from turn t and the next state that "
    "followed it at turn t+1, with its role.\n\n"
    + _NEXT_STATE_GUIDE
    + " A tool that simply succeeded teaches nothing the assistant should have known beforehand.\n\n"
    "Decide whether the next state reveals information that would have made the turn-t response "
    "better had the assistant known it: a preference, a correction, a missing requirement, a fact.\n\n"
    "Output format, strictly:\n"
    "- Exactly one final decision: \\boxed{1} if such hindsight exists, \\boxed{-1} if it does not.\n"
    "- If and only if the decision is \\boxed{1}, add a hint of one to three sentences between "
    "[HINT_START] and [HINT_END]. The hint must be concrete and actionable, written as an instruction "
    "to the assistant.\n"
    "- With \\boxed{-1}, write no hint block."
)


def _evidence_block(response_text: str, next_state_text: str, next_state_role: str) -> str:
    role = (next_state_role or "user").strip() or "user"
    return (
        "## Assistant response (turn t)\n"
        f"{response_text}\n\n"
        f"## Next state (turn t+1, role: {role})\n"
        f"{next_state_text}\n\n"
    )


def build_prm_messages(response_text: str, next_state_text: str, next_state_role: str = "user") -> list[dict]:
    """The PRM judge conversation (system + user) for one response and its next state."""
    user = _evidence_block(response_text, next_state_text, next_state_role) + (
        "First say which case the next state is: progress (the user moves on or the tool succeeded), "
        "a correction / redo / change request, or ambiguous. Then give the score as \\boxed{1}, "
        "\\boxed{0} or \\boxed{-1}."
    )
    return [{"role": "system", "content": PRM_SYSTEM_PROMPT}, {"role": "user", "content": user}]


def build_hint_messages(
    response_text: str, next_state_text: str, next_state_role: str = "user"
) -> list[dict]:
    """The hint judge conversation (system + user) for one response and its next state."""
    user = _evidence_block(response_text, next_state_text, next_state_role) + (
        "Give your decision as \\boxed{1} or \\boxed{-1}. Only with \\boxed{1}, follow it with the "
        "hint between [HINT_START] and [HINT_END]."
    )
    return [{"role": "system", "content": HINT_SYSTEM_PROMPT}, {"role": "user", "content": user}]


def cut_middle(text: str, keep: int) -> str:
    """``text`` with all but ``keep`` characters cut from its middle, replaced by a marker saying how many."""
    if len(text) <= keep:
        return text
    head = keep - keep // 2
    return f"{text[:head]}\n[… {len(text) - keep} characters cut …]\n{text[len(text) - keep // 2 :]}"


def fit_judge_messages(
    kind: str,
    response_text: str,
    next_state_text: str,
    next_state_role: str,
    count_tokens: Callable[[list[dict]], int],
    max_tokens: int,
) -> list[dict] | None:
    """The ``kind`` (``prm``/``hint``) judge conversation, fitted in ``max_tokens`` prompt tokens.

    When the full conversation is too long, the next-state text is cut in the middle (:func:`cut_middle`:
    its head and tail are kept), as little as needed; if cutting all of it is not enough, the response is
    cut the same way. ``None`` when even both cut to nothing do not fit (the instructions alone are too
    long). ``count_tokens(messages)`` is the length of the rendered judge prompt.
    """
    build = build_prm_messages if kind == "prm" else build_hint_messages

    def fits(response: str, next_state: str) -> bool:
        return count_tokens(build(response, next_state, next_state_role)) <= max_tokens

    if fits(response_text, next_state_text):
        return build(response_text, next_state_text, next_state_role)
    keep = _longest_fit(len(next_state_text), lambda k: fits(response_text, cut_middle(next_state_text, k)))
    if keep is not None:
        return build(response_text, cut_middle(next_state_text, keep), next_state_role)
    next_state = cut_middle(next_state_text, 0)
    keep = _longest_fit(len(response_text), lambda k: fits(cut_middle(response_text, k), next_state))
    if keep is None:
        return None
    return build(cut_middle(response_text, keep), next_state, next_state_role)


def _longest_fit(length: int, fits: Callable[[int], bool]) -> int | None:
    """The largest ``k`` in ``[0, length)`` with ``fits(k)`` (binary search; ``fits`` is monotone), or None."""
    if not fits(0):
        return None
    lo, hi = 0, length - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return lo


def cap_hint(hint: str | None, max_chars: int) -> str | None:
    """A hint for the teacher prompt: its first ``max_chars`` characters (stripped)."""
    return hint[:max_chars].strip() if hint else hint


def _verdict_part(text: str | None) -> str:
    """The part of a judge output that may hold the verdict: what follows the last ``</think>``;
    "" when the output ends inside an unterminated ``<think>`` (only drafts)."""
    if not text:
        return ""
    head, sep, tail = text.rpartition("</think>")
    verdict = tail if sep else text
    return "" if "<think>" in verdict else verdict


def _last_boxed(text: str) -> int | None:
    matches = _BOXED.findall(text)
    return int(matches[-1]) if matches else None


def parse_prm_score(text: str | None) -> int | None:
    """The last ``\\boxed{d}`` with d in {1, 0, -1} (``+1`` allowed) after any ``</think>``; else None."""
    value = _last_boxed(_verdict_part(text))
    return value if value in (-1, 0, 1) else None


def majority_vote(votes: Sequence[int | None]) -> int:
    """The most common non-None vote; 0 when no vote is valid or when another value ties with it."""
    counts = Counter(v for v in votes if v is not None).most_common()
    if not counts:
        return 0
    if len(counts) > 1 and counts[1][1] == counts[0][1]:
        return 0
    return int(counts[0][0])


def keeps_sample(method: str, reward: int, has_hint: bool, every_judged_turn: bool = False) -> bool:
    """Whether a judged turn becomes a training sample.

    * ``rl``: a non-zero reward; ``opd``: an accepted hint; ``combine``: either.
    * ``every_judged_turn`` (a baseline ``b`` in the RL term, ``rl`` and ``combine``): every judged turn, an
      ``r = 0`` one with the advantage ``-b``. A rule that keeps only some outcomes biases the baseline
      term: ``E[1(kept) * b * grad log pi] = b * grad P(kept)``, which is not 0 when the outcome depends on
      the reply, whatever ``b`` is averaged over; keeping every turn makes it ``b * grad 1 = 0``.
    """
    if method == "opd":
        return has_hint
    if every_judged_turn:
        return True
    if method == "rl":
        return reward != 0
    return has_hint or reward != 0


def parse_hint_vote(text: str | None) -> tuple[int | None, str]:
    """``(decision, hint)``: decision from the last box if it is 1 or -1 (else None); hint = the last
    complete ``[HINT_START]…[HINT_END]`` block, stripped ("" when there is none)."""
    verdict = _verdict_part(text)
    decision = _last_boxed(verdict)
    blocks = _HINT_BLOCK.findall(verdict)
    return (decision if decision in (1, -1) else None), (blocks[-1].strip() if blocks else "")


def select_hint(votes: Sequence[tuple[int | None, str]]) -> str | None:
    """Among votes with decision 1 and a stripped hint longer than 10 characters, the longest hint
    (the first one on ties); None when no vote qualifies. One positive vote is enough (no majority)."""
    best: str | None = None
    for decision, hint in votes:
        hint = (hint or "").strip()
        if decision == 1 and len(hint) > MIN_HINT_CHARS and (best is None or len(hint) > len(best)):
            best = hint
    return best


def append_hint(messages: Sequence[dict], hint: str) -> list[dict]:
    """A copy of ``messages`` whose last ``user`` message (else the last message) ends with the hint.

    The content becomes ``text + "\\n\\n[user's hint / instruction]\\n" + hint.strip()``, list-of-parts
    content flattened to text first. An empty list gives one user message with the marker and hint.
    The input is not mutated.
    """
    addition = f"{HINT_MARKER}\n{hint.strip()}"
    out = [dict(m) for m in messages]
    if not out:
        return [{"role": "user", "content": addition}]
    target = next((i for i in range(len(out) - 1, -1, -1) if out[i].get("role") == "user"), len(out) - 1)
    out[target]["content"] = f"{flatten_content(out[target].get('content'))}\n\n{addition}"
    return out


# -- the quick judge (Best-of-N): a 0-10 rating of one candidate reply, before any next state exists --

QUICK_JUDGE_MAX_CHARS = 6000  # characters of the conversation and of the reply in a quick judge prompt
QUICK_SYSTEM_PROMPT = (
    "You rate one assistant reply to a conversation. Judge how well it answers the last user message: "
    "correct, helpful, and in the form the user asked for. Answer with a single integer from 0 (useless) "
    "to 10 (excellent) and nothing else."
)
_RATING = re.compile(r"(?<![\d.-])(10|\d)(?:\.\d+)?(?![\d.])")


def build_quick_judge_messages(messages: Sequence[dict], response_text: str) -> list[dict]:
    """The quick judge conversation (system + user): the conversation so far (its text, role by role, the
    middle cut beyond ``QUICK_JUDGE_MAX_CHARS``), the candidate reply (cut the same way), the question."""
    lines = [f"{m.get('role', 'user')}: {flatten_content(m.get('content'))}" for m in messages]
    conversation = cut_middle("\n".join(lines), QUICK_JUDGE_MAX_CHARS)
    user = (
        f"## Conversation\n{conversation}\n\n## Assistant reply\n{cut_middle(response_text, QUICK_JUDGE_MAX_CHARS)}"
        "\n\nRate this reply to this conversation from 0 to 10. Answer with the number only."
    )
    return [{"role": "system", "content": QUICK_SYSTEM_PROMPT}, {"role": "user", "content": user}]


def parse_quick_score(text: str | None) -> float | None:
    """The first rating 0-10 (an integer, optionally with decimals) after any ``</think>``; else None."""
    match = _RATING.search(_verdict_part(text))
    return float(match.group(0)) if match else None
