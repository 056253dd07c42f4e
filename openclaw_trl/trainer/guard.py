"""The version guard: every new adapter is checked before it is served, with signals that need no knowledge of
what the person prefers beyond what they said.

An online learner trains on a handful of noisy samples per update; one bad step (or an optimizer that keeps
moving on momentum) can push the adapter off the base model's manifold, into replies that repeat themselves or
stop being sentences. The person's verdicts arrive only after they have read such a reply, so the check compares
the candidate's next-token distributions with a *reference* at every reply position of a few short rows:

* the person's ``recent_prompts`` most recent main turns with distinct prompts and a reply of at least
  ``MIN_REPLY_TOKENS`` tokens (an acknowledgement such as "You're welcome." shows nothing), their served
  replies cut to ``max_new_tokens``, and
* ``neutral_prompts``, fixed prompts that ask for nothing in particular, each with ``samples`` replies sampled
  once per run from the base.

The reference is the base model (adapter off): as it was, and, for a row it does not explain (a KL past the
bound), also as told what the person asked for: the even mixture of its distributions on the row's prompt and
on that prompt with the person's most recent distinct hints appended (``judge.append_hint``, the OPD teacher's
context). A row's KL is the smaller of the two. So a version that has not learned yet and one that has learned
what the person taught (a style the base rarely uses unprompted included) both stay close, while one that breaks
the replies is far from both. The signals:

* ``kl``: for each row, ``mean_t KL(pi_cand(. | x, y_<t) || pi_ref(. | x, y_<t))`` over its reply
  positions, exact (the whole vocabulary, at the trainer's temperature), in nats per token; the signal is the
  largest over the rows. This direction is the one that sees breakage: it is large where the candidate puts
  its mass on tokens the reference finds implausible (a reply that starts with a stray word, repeats itself or
  falls apart), and small where the candidate only sharpened what the reference already allows (the taught
  style, fewer facts). On the toy model it stays under 0.4 while a preference is learned (bulleted, brief or
  both) and jumps to 0.6-1.5 on the update that breaks the answers; the worst row is read because a broken
  adapter breaks some answers first.
* ``entropy_gap``: the candidate's mean next-token entropy minus the plain base's over all positions (nats). A
  model that collapses onto a few strings becomes certain of them (the gap falls); one that falls apart spreads
  its mass (the gap rises).
* ``implausible``: for each row and reply position, the probability mass the candidate moved onto tokens the
  reference gives less than ``exp(IMPLAUSIBLE_LOGP)`` (1 in 8,000): ``sum_v (p_cand(v) - p_ref(v)) *
  1[log p_ref(v) < IMPLAUSIBLE_LOGP]``; the signal is the largest over every position of every row (the
  reference as for ``kl``: the plain base, or for a row it does not explain, the base told the hints). It is
  the first sign of an adapter that starts to break its answers a little at a time: the mass it puts on a wrong
  fact or a stray word, at the one position where it does, which the per-token mean of ``kl`` dilutes over the
  reply. On the toy model it stays under 0.004 while a preference is learned (bulleted, brief or both) and
  reaches 0.01-0.07 on versions whose answers are starting to drift, 0.8-1.0 on a broken one.

A candidate with non-finite weights, or a signal past its bound (``max_kl``, ``max_implausible``,
``max_entropy_drop``, ``max_entropy_rise``), is held back: the trainer keeps serving the last version that
passed and rewinds to it (``trainer.safety``). The verdict says why in plain words (``GuardVerdict.reason``).

Cost: one forward with the adapter on over the rows (at most ``recent_prompts + len(neutral_prompts) * samples``
rows of a prompt and ``max_new_tokens`` reply tokens; rows of similar length share a batch). The reference's
side of a row (the plain base, and the base told the hints for a row the plain base does not explain) is
computed the first time the row is checked and kept while the row, the hints and the temperature stay the same
(``trainer.guard_reference``): a new turn or a new hint costs one more base forward over its row. A prompt is cut
to its last ``max_prompt_tokens`` tokens for the check, so an agent's 20k-token prompt costs no more than a chat
message's. Measured with ``benchmarks/guard_bench.py --quick`` (CPU, guard on / off, paired steps, the rows
unchanged between updates), the check costs 4-16% of a toy update and 47-60% of a 0.6B-shaped update of 4
short samples, where it is the candidate's forward over about as many tokens as the update trains on.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from openclaw_trl import judge

NEUTRAL_PROMPTS = (
    "Hi! What can you do?",
    "Tell me something interesting.",
)
"""Prompts that ask for nothing in particular: what a model answers there should stay sound whatever the
person teaches it."""


MIN_REPLY_TOKENS = 8
"""The shortest served reply the guard compares on."""

IMPLAUSIBLE_LOGP = -9.0
"""A token the reference gives a log-probability below this (about 1 in 8,000) is implausible there."""


@dataclass(frozen=True)
class GuardConfig:
    """How new versions are checked (``OpenClawConfig.guard_config()`` builds one; the module docstring).

    enabled: check every version before it is served (False: every version is served as trained).
    recent_prompts: the person's most recent main turns (distinct prompts) the candidate is compared on.
    neutral_prompts: the fixed prompts (user messages) of the anchored comparison with the base.
    samples: base replies sampled per neutral prompt (once per run).
    max_new_tokens: the length of those replies.
    max_prompt_tokens: a prompt is cut to its last this many tokens for the check.
    max_kl: the most ``kl`` (nats per token, the worst row) a version may show.
    max_implausible: the most ``implausible`` (probability mass, the worst position) a version may show.
    hints: how many of the person's most recent hints (distinct) the reference is told.
    max_entropy_drop: the most ``-entropy_gap`` (nats per token): answers collapsing onto a few strings.
    max_entropy_rise: the most ``entropy_gap`` (nats per token): answers falling apart.
    seed: of the base replies' sampling.
    """

    enabled: bool = True
    recent_prompts: int = 3
    neutral_prompts: tuple[str, ...] = NEUTRAL_PROMPTS
    samples: int = 1
    max_new_tokens: int = 24
    max_prompt_tokens: int = 256
    max_kl: float = 0.5
    max_implausible: float = 0.01
    hints: int = 3
    max_entropy_drop: float = 1.0
    max_entropy_rise: float = 1.0
    seed: int = 0

    def __post_init__(self):
        checks = [
            (
                _count(self.recent_prompts, 0),
                f"guard_recent_prompts must be an integer >= 0, got {self.recent_prompts!r}",
            ),
            (_count(self.samples, 1), f"the guard's samples must be an integer >= 1, got {self.samples!r}"),
            (_count(self.max_new_tokens, 1), "the guard's max_new_tokens must be an integer >= 1"),
            (_count(self.max_prompt_tokens, 1), "the guard's max_prompt_tokens must be an integer >= 1"),
            (_positive(self.max_kl), "guard_max_kl must be a number > 0 (nats per token)"),
            (
                _positive(self.max_implausible),
                "guard_max_implausible must be a number > 0 (a probability mass; 1 or more never holds)",
            ),
            (_count(self.hints, 0), f"the guard's hints must be an integer >= 0, got {self.hints!r}"),
            (
                _positive(self.max_entropy_drop) and _positive(self.max_entropy_rise),
                "guard_max_entropy_drop and guard_max_entropy_rise must be numbers > 0 (nats per token)",
            ),
            (
                all(isinstance(p, str) and p.strip() for p in self.neutral_prompts),
                "guard_neutral_prompts must be a list of non-empty strings",
            ),
            (
                not self.enabled or self.recent_prompts > 0 or bool(self.neutral_prompts),
                "the guard needs guard_recent_prompts > 0 or guard_neutral_prompts to compare versions on "
                "(or guard: false)",
            ),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)


def _count(value, least: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def _positive(value) -> bool:
    return (
        isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value > 0
    )


@dataclass(frozen=True)
class ProbeRow:
    """One row of the check: a prompt (as the candidate sees it, and as the reference does: with the person's
    hints), and a reply (the person's served one, or a base reply to a neutral prompt)."""

    prompt_ids: tuple[int, ...]
    reference_ids: tuple[int, ...]
    reply_ids: tuple[int, ...]
    kind: str  # "recent" or "neutral"


@dataclass(frozen=True)
class Comparison:
    """Candidate vs reference over the rows' reply positions: the largest per-row mean KL and the two mean
    entropies over every position (nats per token), and the largest mass moved onto implausible tokens."""

    kl: float
    entropy_candidate: float
    entropy_base: float
    positions: int
    implausible: float = 0.0


@dataclass(frozen=True)
class GuardVerdict:
    """The check of one candidate version: the signals (None when there was nothing to compare on), whether
    it passed, and why not in plain words."""

    passed: bool
    kl: float | None = None
    entropy_gap: float | None = None
    implausible: float | None = None
    rows: int = 0
    seconds: float = 0.0
    reason: str | None = None

    def metrics(self) -> dict[str, float]:
        """The numbers logged with the update (``guard/...``); a signal nobody measured is left out."""
        out = {
            "guard/held": 0.0 if self.passed else 1.0,
            "guard/rows": float(self.rows),
            "guard/seconds": self.seconds,
        }
        for name in ("kl", "entropy_gap", "implausible"):
            value = getattr(self, name)
            if value is not None:
                out[f"guard/{name}"] = value
        return out


@dataclass
class VersionGuard:
    """Checks candidate versions (``check``) against the config's bounds; owns the neutral replies it sampled once.

    ``render(messages, tools)``: prompt token ids (the chat template); ``recent_turns(n)``: the person's ``n`` most
    recent main turns with distinct prompts (``store.queries.recent_prompt_turns``); ``recent_hints(n)``: their
    ``n`` most recent hints, oldest first (``store.queries.recent_hints``).
    """

    config: GuardConfig
    render: Callable[[list[dict], list[dict] | None], Sequence[int]]
    recent_turns: Callable[[int], list]
    recent_hints: Callable[[int], list[str]] = lambda n: []
    _neutral: list[tuple[tuple[int, ...], list[dict], tuple[int, ...]]] | None = field(
        default=None, repr=False
    )

    def hint(self) -> str | None:
        """What the reference is told: the person's most recent distinct hints, one per line (None: none yet)."""
        if self.config.hints <= 0:
            return None
        recent = [h.strip() for h in self.recent_hints(self.config.hints * 4) if h and h.strip()]
        distinct = list(dict.fromkeys(reversed(recent)))[: self.config.hints]  # newest first, no repeats
        return "\n".join(reversed(distinct)) or None

    def rows(
        self, generate_base: Callable[[list[Sequence[int]], int, int], list[Sequence[int]]]
    ) -> list[ProbeRow]:
        """The rows of a check: the person's recent turns, then the neutral prompts (their base replies sampled
        with ``generate_base(prompts, max_new_tokens, seed)`` on the first call, then kept)."""
        hint = self.hint()
        return self._recent_rows(hint) + self._neutral_rows(generate_base, hint)

    def _reference(
        self, messages: list[dict], tools, hint: str | None, plain: Sequence[int]
    ) -> tuple[int, ...]:
        if hint is None:
            return self._cut(plain)
        return self._cut(self.render(judge.append_hint(messages, hint), tools))

    def _cut(self, ids: Sequence[int]) -> tuple[int, ...]:
        return tuple(ids[-self.config.max_prompt_tokens :])

    def _recent_rows(self, hint: str | None) -> list[ProbeRow]:
        if self.config.recent_prompts <= 0:
            return []
        rows = []
        for turn in self.recent_turns(self.config.recent_prompts * 4):
            if len(turn.completion_ids) < MIN_REPLY_TOKENS:
                continue
            reference = self._reference(list(turn.prompt_messages), turn.tools, hint, turn.prompt_ids)
            reply = tuple(turn.completion_ids[: self.config.max_new_tokens])
            rows.append(ProbeRow(self._cut(turn.prompt_ids), reference, reply, "recent"))
            if len(rows) == self.config.recent_prompts:
                break
        return rows

    def _neutral_rows(self, generate_base, hint: str | None) -> list[ProbeRow]:
        if self._neutral is None:
            rendered = [([{"role": "user", "content": p}], p) for p in self.config.neutral_prompts]
            prompts = [(self._cut(self.render(m, None)), m) for m, _ in rendered]
            repeated = [(ids, m) for ids, m in prompts for _ in range(self.config.samples)]
            replies = (
                generate_base([ids for ids, _ in repeated], self.config.max_new_tokens, self.config.seed)
                if repeated
                else []
            )
            self._neutral = [(ids, m, tuple(r)) for (ids, m), r in zip(repeated, replies, strict=True) if r]
        return [
            ProbeRow(ids, self._reference(messages, None, hint, ids), reply, "neutral")
            for ids, messages, reply in self._neutral
        ]

    def check(
        self,
        rows: list[ProbeRow],
        compare: Callable[[list[ProbeRow]], Comparison],
        weights_finite: bool = True,
    ) -> GuardVerdict:
        """The verdict on the candidate that ``compare`` sets against the base (module docstring)."""
        started = time.perf_counter()
        if not weights_finite:
            return GuardVerdict(False, reason="its weights hold inf or NaN values")
        if not rows:
            return GuardVerdict(True, seconds=time.perf_counter() - started)
        found = compare(rows)
        kl, gap, implausible = found.kl, found.entropy_candidate - found.entropy_base, found.implausible
        reason = self._reason(kl, gap, implausible)
        return GuardVerdict(
            reason is None,
            kl,
            gap,
            implausible,
            rows=len(rows),
            seconds=time.perf_counter() - started,
            reason=reason,
        )

    def _reason(self, kl: float, gap: float, implausible: float) -> str | None:
        """Why a candidate with these signals must not be served, in the person's words (None: it may)."""
        c = self.config
        if not (math.isfinite(kl) and math.isfinite(gap) and math.isfinite(implausible)):
            return "its answers could not be scored (inf or NaN probabilities)"
        if kl > c.max_kl:
            return (
                f"its answers moved away from anything the starting model would say, even told what you asked "
                f"for (KL {kl:.2f} nats per token on one of your recent or everyday prompts, limit {c.max_kl:g})"
            )
        if implausible > c.max_implausible:
            return (
                f"its answers started to go wrong: at one point of a recent or everyday reply it puts "
                f"{implausible:.1%} of its probability on words the starting model finds implausible there, even "
                f"told what you asked for (limit {c.max_implausible:.1%})"
            )
        if -gap > c.max_entropy_drop:
            return (
                f"its answers became repetitive (next-token entropy {gap:+.2f} nats from the starting model's, "
                f"limit -{c.max_entropy_drop:g})"
            )
        if gap > c.max_entropy_rise:
            return (
                f"its answers became erratic (next-token entropy {gap:+.2f} nats from the starting model's, "
                f"limit +{c.max_entropy_rise:g})"
            )
        return None
