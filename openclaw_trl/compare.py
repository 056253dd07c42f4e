"""Did it learn for me? Your recent prompts replayed through two policies, side by side, with the same seed.

The prompts are the token ids of the most recent main turns of conversations not marked private ("don't
learn from this conversation"), exactly as the engine saw them (``store.queries.recent_prompt_turns``;
``distinct_prompt_turns`` keeps one turn per prompt text, so a question asked in many conversations is
replayed once). Each prompt is
generated once per side with the same sampling parameters and the same seed (``seed + i`` for the i-th
prompt), so a difference between the two replies comes from the weights, not from the dice.

* ``compare_base_and_policy``: the base model (adapter disabled) against the adapter the engine serves
  (the UI's "Did it learn for me?" button);
* ``compare_versions``: two versions of a run, each loaded from its ``checkpoint-<version>`` (version 0 = the
  base model), for ``openclaw-trl compare``;
* ``markdown_table`` / ``text_table``: the pairs for the UI and for a terminal.
"""

from __future__ import annotations

import dataclasses
import html
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from openclaw_trl.chat import decode_completion
from openclaw_trl.engines.base import GenerationRequest, Priority, SamplingParams, Weights
from openclaw_trl.records import Turn


@dataclass
class ReplyPair:
    """One replayed prompt and the reply of each side."""

    turn_id: int
    prompt: str  # the last user (or tool) message of the prompt
    left: str
    right: str


def prompt_text(turn: Turn) -> str:
    """The last user or tool message of the turn's prompt (what the person asked)."""
    for message in reversed(turn.prompt_messages):
        if message.get("role") in ("user", "tool") and isinstance(message.get("content"), str):
            return message["content"]
    return ""


def replay(
    engine, turns: list[Turn], weights: Weights, sampling: SamplingParams, priority: Priority = "serve"
) -> list[str]:
    """The reply to each turn's prompt ids with ``weights``; the i-th prompt sampled with seed ``seed + i``.
    ``priority``: ``serve`` when a person waits for the replies (a button), ``learn`` for background checks
    (chat turns are decoded first)."""
    seed = sampling.seed or 0
    requests = [
        GenerationRequest(t.prompt_ids, dataclasses.replace(sampling, seed=seed + i), weights)
        for i, t in enumerate(turns)
    ]
    completions = engine.generate(requests, priority=priority)
    return [_reply_text(engine.tokenizer, c.token_ids) for c in completions]


def distinct_prompt_turns(store, n: int, scan: int = 128) -> list[Turn]:
    """The ``n`` most recent main turns of non-private conversations whose prompts (:func:`prompt_text`, the
    person's last message) differ, newest first, found among the ``n * scan`` most recent main turns: a person
    who asks the same question in many conversations gets it once, and the others as well."""
    return store.queries.recent_prompt_turns(n, key=lambda turn: prompt_text(turn).strip(), scan=scan)


def _reply_text(tokenizer, token_ids: list[int]) -> str:
    message = decode_completion(tokenizer, token_ids)
    return (message.get("content") or "").strip()


def compare_base_and_policy(engine, turns: list[Turn], sampling: SamplingParams) -> list[ReplyPair]:
    """``turns`` replayed through the base model (left) and the adapter the engine serves (right)."""
    base = replay(engine, turns, "base", sampling)
    policy = replay(engine, turns, "policy", sampling)
    return [ReplyPair(t.id, prompt_text(t), b, p) for t, b, p in zip(turns, base, policy, strict=True)]


def compare_versions(
    engine,
    turns: list[Turn],
    versions: tuple[int, int],
    checkpoint: Callable[[int], Path],
    sampling: SamplingParams,
) -> list[ReplyPair]:
    """``turns`` replayed through two versions: 0 is the base model, any other ``v`` the adapter of
    ``checkpoint(v)``, published to ``engine`` before its side is generated."""
    sides = []
    for version in versions:
        if version == 0:
            sides.append(replay(engine, turns, "base", sampling))
            continue
        engine.publish_adapter(str(checkpoint(version)), version=version)
        sides.append(replay(engine, turns, "policy", sampling))
    return [ReplyPair(t.id, prompt_text(t), a, b) for t, a, b in zip(turns, *sides, strict=True)]


def markdown_table(pairs: list[ReplyPair], left: str, right: str) -> str:
    """Markdown: per prompt, the prompt as a line, then a two-column table (left | right); HTML-escaped,
    newlines kept as line breaks, long texts cut."""

    def cell(text: str, limit: int = 600) -> str:
        text = text if len(text) <= limit else text[:limit] + "…"
        return html.escape(text or "(empty)").replace("|", "&#124;").replace("\n", "<br>")

    blocks = []
    for p in pairs:
        blocks.append(
            f"**You asked:** {cell(p.prompt, 300)}\n\n| {left} | {right} |\n|---|---|\n| {cell(p.left)} | {cell(p.right)} |"
        )
    return "\n\n".join(blocks)


def text_table(pairs: list[ReplyPair], left: str, right: str, width: int = 100) -> str:
    """Side by side for a terminal: per prompt, a heading line, then the two replies in two columns."""
    col = max(20, (width - 3) // 2)
    lines = []
    for i, p in enumerate(pairs, 1):
        lines.append(f"[{i}] turn {p.turn_id}: {p.prompt.strip()[: width - 20]}")
        lines.append(f"{left:<{col}} | {right}")
        lines.append(f"{'-' * col}-+-{'-' * col}")
        a, b = _wrap(p.left, col), _wrap(p.right, col)
        for x, y in zip(a + [""] * (len(b) - len(a)), b + [""] * (len(a) - len(b)), strict=True):
            lines.append(f"{x:<{col}} | {y}")
        lines.append("")
    return "\n".join(lines)


def _wrap(text: str, width: int) -> list[str]:
    out = []
    for paragraph in (text or "(empty)").splitlines() or [""]:
        out += textwrap.wrap(paragraph, width) or [""]
    return out
