"""The version guard: every new adapter is checked before it is served, with signals that need no knowledge of
what the person prefers.

An online learner trains on a handful of noisy samples per update; one bad step (or an optimizer that keeps
moving on momentum) can push the adapter off the base model's manifold, into replies that repeat themselves or
stop being sentences. The person's own verdicts arrive only after they have read such a reply, so the check
must use signals that hold whatever the person wants. Both come from comparing the candidate's next-token
distributions with the base model's (adapter off) at the same positions of a few short rows:

* the person's ``recent_prompts`` most recent main turns with distinct prompts and a reply of at least
  ``MIN_REPLY_TOKENS`` tokens (an acknowledgement such as "You're welcome." shows nothing), their served
  replies cut to ``max_new_tokens``, and
* ``neutral_prompts``, fixed prompts that ask for nothing in particular, each with ``samples`` replies sampled
  once per run from the base;

* ``kl_base``: for each row, ``mean_t KL(pi_base(. | x, y_<t) || pi_cand(. | x, y_<t))`` over its reply
  positions, exact (the whole vocabulary, at the trainer's temperature), in nats per token; the signal is the
  largest over the rows. What a person teaches moves a few positions of a reply (its opening, a list marker, how
  many facts) by a few nats, a few hundredths to tenths of a nat per token on average; an adapter that breaks
  the answers moves most positions of the replies it breaks (the toy model's collapse: 0.01 -> 0.4 in one
  update on an answer to an everyday request), so the worst row is the one to read, not the mean over rows. It is
  anchored at the base, so a slow drift that no single update shows still adds up here.
* ``entropy_gap``: the candidate's mean next-token entropy minus the base's over all those positions (nats). A
  model that collapses onto a few strings becomes certain of them (the gap falls); one that falls apart spreads
  its mass (the gap rises).

A candidate with non-finite weights, or a signal past its bound (``max_kl_base``, ``max_entropy_drop``,
``max_entropy_rise``), is
held back: the trainer keeps serving the last version that passed and rewinds to it (``trainer.safety``). The
verdict says why in plain words (``GuardVerdict.reason``). Cost: one forward of the candidate and one of the
base over the rows (at most ``recent_prompts + len(neutral_prompts) * samples`` rows of a prompt and
``max_new_tokens`` reply tokens); prompts longer than ``max_prompt_tokens`` are left out, so an agent's
20k-token prompt never costs a forward of its own.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

NEUTRAL_PROMPTS = (
    "Hi! What can you do?",
    "Tell me something interesting.",
)
"""Prompts that ask for nothing in particular: what a model answers there should stay sound whatever the
person teaches it."""


MIN_REPLY_TOKENS = 8
"""The shortest served reply the guard compares on."""


@dataclass(frozen=True)
class GuardConfig:
    """How new versions are checked (``OpenClawConfig.guard_config()`` builds one; the module docstring).

    enabled: check every version before it is served (False: every version is served as trained).
    recent_prompts: the person's most recent main turns (distinct prompts) the candidate is compared on.
    neutral_prompts: the fixed prompts (user messages) of the anchored comparison with the base.
    samples: base replies sampled per neutral prompt (once per run).
    max_new_tokens: the length of those replies.
    max_prompt_tokens: longer prompts are left out of the check.
    max_kl_base: the most ``kl_base`` (nats per token) a version may show.
    max_entropy_drop: the most ``-entropy_gap`` (nats per token): answers collapsing onto a few strings.
    max_entropy_rise: the most ``entropy_gap`` (nats per token): answers falling apart.
    seed: of the base replies' sampling.
    """

    enabled: bool = True
    recent_prompts: int = 3
    neutral_prompts: tuple[str, ...] = NEUTRAL_PROMPTS
    samples: int = 1
    max_new_tokens: int = 24
    max_prompt_tokens: int = 1024
    max_kl_base: float = 0.25
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
            (_positive(self.max_kl_base), "guard_max_kl_base must be a number > 0 (nats per token)"),
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
    """One row of the check: a prompt and a reply (the person's served one, or a base reply to a neutral
    prompt)."""

    prompt_ids: tuple[int, ...]
    reply_ids: tuple[int, ...]
    kind: str  # "recent" or "neutral"


@dataclass(frozen=True)
class Comparison:
    """Candidate vs base over the rows' reply positions: the largest per-row mean KL and the two mean entropies
    over every position (nats per token)."""

    kl: float
    entropy_candidate: float
    entropy_base: float
    positions: int


@dataclass(frozen=True)
class GuardVerdict:
    """The check of one candidate version: the signals (None when there was nothing to compare on), whether
    it passed, and why not in plain words."""

    passed: bool
    kl_base: float | None = None
    entropy_gap: float | None = None
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
        for name in ("kl_base", "entropy_gap"):
            value = getattr(self, name)
            if value is not None:
                out[f"guard/{name}"] = value
        return out


@dataclass
class VersionGuard:
    """Checks candidate versions (``check``) against the config's bounds; owns the neutral rows it built once.

    ``render(prompt)``: a neutral prompt's token ids (the chat template); ``recent_turns(n)``: the person's ``n``
    most recent main turns with distinct prompts (``store.queries.recent_prompt_turns``).
    """

    config: GuardConfig
    render: Callable[[str], Sequence[int]]
    recent_turns: Callable[[int], list]
    _neutral: list[ProbeRow] | None = field(default=None, repr=False)

    def neutral_rows(self, generate_base: Callable[[list[Sequence[int]], int, int], list[Sequence[int]]]):
        """The neutral rows: ``samples`` base replies per neutral prompt (``generate_base(prompts,
        max_new_tokens, seed)``), built on the first call, then kept."""
        if self._neutral is None:
            prompts = [tuple(self.render(p)) for p in self.config.neutral_prompts]
            prompts = [p for p in prompts if len(p) <= self.config.max_prompt_tokens]
            repeated = [p for p in prompts for _ in range(self.config.samples)]
            replies = (
                generate_base(repeated, self.config.max_new_tokens, self.config.seed) if repeated else []
            )
            self._neutral = [
                ProbeRow(p, tuple(r), "neutral") for p, r in zip(repeated, replies, strict=True) if r
            ]
        return self._neutral

    def recent_rows(self) -> list[ProbeRow]:
        """The person's most recent turns as rows (their served replies, cut to ``max_new_tokens``)."""
        if self.config.recent_prompts <= 0:
            return []
        rows = []
        for turn in self.recent_turns(self.config.recent_prompts * 4):
            if (
                len(turn.completion_ids) >= MIN_REPLY_TOKENS
                and len(turn.prompt_ids) <= self.config.max_prompt_tokens
            ):
                reply = tuple(turn.completion_ids[: self.config.max_new_tokens])
                rows.append(ProbeRow(tuple(turn.prompt_ids), reply, "recent"))
            if len(rows) == self.config.recent_prompts:
                break
        return rows

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
        kl, gap = found.kl, found.entropy_candidate - found.entropy_base
        reason = self._reason(kl, gap)
        return GuardVerdict(
            reason is None, kl, gap, rows=len(rows), seconds=time.perf_counter() - started, reason=reason
        )

    def _reason(self, kl: float, gap: float) -> str | None:
        """Why a candidate with these signals must not be served, in the person's words (None: it may)."""
        c = self.config
        if not (math.isfinite(kl) and math.isfinite(gap)):
            return "its answers could not be scored (inf or NaN probabilities)"
        if kl > c.max_kl_base:
            return (
                f"its answers drifted too far from the base model's (KL {kl:.2f} nats per token on one of your "
                f"recent or everyday prompts, limit {c.max_kl_base:g})"
            )
        if -gap > c.max_entropy_drop:
            return (
                f"its answers became repetitive (next-token entropy {gap:+.2f} nats from the base model's, "
                f"limit -{c.max_entropy_drop:g})"
            )
        if gap > c.max_entropy_rise:
            return (
                f"its answers became erratic (next-token entropy {gap:+.2f} nats from the base model's, "
                f"limit +{c.max_entropy_rise:g})"
            )
        return None
