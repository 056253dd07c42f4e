"""The version guard: every new adapter is checked before it is served, with signals that need no knowledge of
what the person prefers.

An online learner trains on a handful of noisy samples per update; one bad step (or an optimizer that keeps
moving on momentum) can push the adapter off the base model's manifold, into replies that repeat themselves or
stop being sentences. The person's own verdicts arrive only after they have read such a reply, so the check
must use signals that hold whatever the person wants:

* ``kl_served``: how far the candidate moved from the weights the person was last served, on the person's own
  recent turns. For ``m`` recent main turns with replies ``y`` sampled by a served version ``pi_v`` (their
  sampling log-probs are stored), ``mean_t [lp_v(y_t) - lp_cand(y_t)]`` over the reply tokens is the Monte-Carlo
  estimate of ``KL(pi_v || pi_cand)`` per token. One update that learns a style moves a few tokens of a reply
  (the opening, a list marker) by a few nats, a few tenths of a nat per token on average; an update that breaks
  the model moves every token.
* ``kl_base``: the same against the base model on a small fixed set of neutral prompts (``neutral_prompts``),
  with replies sampled once from the base (adapter off) and their base log-probs kept: ``KL(pi_base ||
  pi_cand)`` per token. It is anchored, so a slow drift that no single update shows still adds up here.
* ``entropy_ratio``: the candidate's mean next-token entropy on those neutral replies over the base's. A model
  that collapses onto a few strings becomes certain of them (the ratio falls); one that falls apart spreads
  its mass (the ratio rises).

All three come from one forward pass of the candidate over at most ``recent_prompts + len(neutral_prompts) *
samples`` short rows (the base's side of the neutral rows is computed once per run). A candidate with non-finite
weights, or a signal past its bound (``max_kl_served``, ``max_kl_base``, ``entropy_ratio_range``), is held
back: the trainer keeps serving the last version that passed and rewinds to it (``trainer.safety``). The verdict
says why in plain words (``GuardVerdict.reason``).

Rows whose prompt is longer than ``max_prompt_tokens`` are left out (an agent's 20k-token prompt would cost a
forward of its own); recent turns sampled at another temperature than the trainer's are left out too (their
log-probs are of another distribution).
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


@dataclass(frozen=True)
class GuardConfig:
    """How new versions are checked (``OpenClawConfig.guard_config()`` builds one; the module docstring).

    enabled: check every version before it is served (False: every version is served as trained).
    recent_prompts: the person's most recent main turns (distinct prompts) the candidate is compared on.
    neutral_prompts: the fixed prompts (user messages) of the anchored comparison with the base.
    samples: base replies sampled per neutral prompt (once per run).
    max_new_tokens: the length of those replies.
    max_prompt_tokens: longer prompts are left out of the check.
    max_kl_served: the most ``kl_served`` (nats per token) a version may show.
    max_kl_base: the most ``kl_base`` (nats per token) a version may show.
    entropy_ratio_range: ``(low, high)`` bounds of ``entropy_ratio``.
    seed: of the base replies' sampling.
    """

    enabled: bool = True
    recent_prompts: int = 2
    neutral_prompts: tuple[str, ...] = NEUTRAL_PROMPTS
    samples: int = 1
    max_new_tokens: int = 32
    max_prompt_tokens: int = 1024
    max_kl_served: float = 1.0
    max_kl_base: float = 1.0
    entropy_ratio_range: tuple[float, float] = (0.5, 2.0)
    seed: int = 0

    def __post_init__(self):
        bounds = tuple(self.entropy_ratio_range)
        numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in bounds)
        checks = [
            (
                _count(self.recent_prompts, 0),
                f"guard_recent_prompts must be an integer >= 0, got {self.recent_prompts!r}",
            ),
            (_count(self.samples, 1), f"the guard's samples must be an integer >= 1, got {self.samples!r}"),
            (_count(self.max_new_tokens, 1), "the guard's max_new_tokens must be an integer >= 1"),
            (_count(self.max_prompt_tokens, 1), "the guard's max_prompt_tokens must be an integer >= 1"),
            (
                _positive(self.max_kl_served) and _positive(self.max_kl_base),
                "guard_max_kl_served and guard_max_kl_base must be numbers > 0 (nats per token)",
            ),
            (
                len(bounds) == 2 and numbers and 0 <= bounds[0] < 1 < bounds[1],
                f"guard_entropy_ratio_range must be [low, high] with 0 <= low < 1 < high, got {list(bounds)}",
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
    """One row of the check: a prompt, a reply and the reply's reference log-probs (those of the weights
    that sampled it), with the reference's mean next-token entropy when known (neutral rows)."""

    prompt_ids: tuple[int, ...]
    reply_ids: tuple[int, ...]
    reference_logps: tuple[float, ...]
    kind: str  # "recent" (kl_served) or "neutral" (kl_base, entropy_ratio)
    reference_entropy: float | None = None


@dataclass(frozen=True)
class RowScores:
    """The candidate's (or the base's) log-probs of a row's reply tokens and its mean next-token entropy."""

    logps: Sequence[float]
    entropy: float


@dataclass(frozen=True)
class GuardVerdict:
    """The check of one candidate version: the signals (None when no row measured one), whether it passed,
    and why not in plain words."""

    passed: bool
    kl_served: float | None = None
    kl_base: float | None = None
    entropy_ratio: float | None = None
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
        for name in ("kl_served", "kl_base", "entropy_ratio"):
            value = getattr(self, name)
            if value is not None:
                out[f"guard/{name}"] = value
        return out


@dataclass
class VersionGuard:
    """Checks candidate versions (``check``) against the config's bounds; owns the neutral rows it built once.

    ``render(prompt)``: a neutral prompt's token ids (the chat template); ``recent_turns(n)``: the person's ``n``
    most recent main turns with distinct prompts (``store.queries.recent_prompt_turns``); ``temperature``: the
    trainer's (the one temperature every compared log-prob is at).
    """

    config: GuardConfig
    render: Callable[[str], Sequence[int]]
    recent_turns: Callable[[int], list]
    temperature: float
    _neutral: list[ProbeRow] | None = field(default=None, repr=False)

    def neutral_rows(
        self,
        generate_base: Callable[[list[Sequence[int]], int, int], list[Sequence[int]]],
        score_base: Callable[[list[ProbeRow]], list[RowScores]],
    ) -> list[ProbeRow]:
        """The neutral rows: ``samples`` base replies per neutral prompt (``generate_base(prompts, max_new_tokens,
        seed)``), with the base's log-probs and entropy (``score_base``); built on the first call, then kept."""
        if self._neutral is None:
            prompts = [tuple(self.render(p)) for p in self.config.neutral_prompts]
            prompts = [p for p in prompts if len(p) <= self.config.max_prompt_tokens]
            repeated = [p for p in prompts for _ in range(self.config.samples)]
            replies = (
                generate_base(repeated, self.config.max_new_tokens, self.config.seed) if repeated else []
            )
            rows = [ProbeRow(p, tuple(r), (), "neutral") for p, r in zip(repeated, replies, strict=True) if r]
            scores = score_base(rows) if rows else []
            self._neutral = [
                ProbeRow(r.prompt_ids, r.reply_ids, tuple(s.logps), "neutral", s.entropy)
                for r, s in zip(rows, scores, strict=True)
            ]
        return self._neutral

    def recent_rows(self, exclude_turns: frozenset[int] = frozenset()) -> list[ProbeRow]:
        """The person's most recent turns as rows (their served replies and sampling log-probs)."""
        if self.config.recent_prompts <= 0:
            return []
        rows = []
        for turn in self.recent_turns(self.config.recent_prompts * 2):
            if (
                turn.id in exclude_turns
                or not turn.completion_ids
                or len(turn.prompt_ids) > self.config.max_prompt_tokens
                or abs(turn.temperature - self.temperature) > 1e-6
                or len(turn.sampling_logprobs) != len(turn.completion_ids)
            ):
                continue
            reply = tuple(turn.completion_ids[: self.config.max_new_tokens])
            reference = tuple(turn.sampling_logprobs[: len(reply)])
            rows.append(ProbeRow(tuple(turn.prompt_ids), reply, reference, "recent"))
            if len(rows) == self.config.recent_prompts:
                break
        return rows

    def check(
        self,
        rows: list[ProbeRow],
        score_candidate: Callable[[list[ProbeRow]], list[RowScores]],
        weights_finite: bool = True,
    ) -> GuardVerdict:
        """The verdict on the candidate whose scores ``score_candidate`` computes (module docstring)."""
        started = time.perf_counter()
        if not weights_finite:
            return GuardVerdict(False, reason="its weights hold inf or NaN values")
        scores = score_candidate(rows) if rows else []
        kl_served = _mean_gap([r for r in rows if r.kind == "recent"], scores, rows)
        neutral = [(r, s) for r, s in zip(rows, scores, strict=True) if r.kind == "neutral"]
        kl_base = _mean_gap([r for r, _ in neutral], [s for _, s in neutral], [r for r, _ in neutral])
        entropy_ratio = None
        if neutral:
            base = sum(r.reference_entropy or 0.0 for r, _ in neutral) / len(neutral)
            mine = sum(s.entropy for _, s in neutral) / len(neutral)
            entropy_ratio = mine / base if base > 0 else None
        reason = self._reason(kl_served, kl_base, entropy_ratio)
        return GuardVerdict(
            reason is None,
            kl_served,
            kl_base,
            entropy_ratio,
            rows=len(rows),
            seconds=time.perf_counter() - started,
            reason=reason,
        )

    def _reason(self, kl_served, kl_base, entropy_ratio) -> str | None:
        """Why a candidate with these signals must not be served, in the person's words (None: it may)."""
        c = self.config
        low, high = c.entropy_ratio_range
        values = [v for v in (kl_served, kl_base, entropy_ratio) if v is not None]
        if any(not math.isfinite(v) for v in values):
            return "its answers could not be scored (inf or NaN log-probabilities)"
        if kl_served is not None and kl_served > c.max_kl_served:
            return (
                f"its answers to your recent messages changed far more than one update should "
                f"(KL {kl_served:.2f} nats per token from the version you were served, limit {c.max_kl_served:g})"
            )
        if kl_base is not None and kl_base > c.max_kl_base:
            return (
                f"it drifted far from the base model on everyday prompts "
                f"(KL {kl_base:.2f} nats per token, limit {c.max_kl_base:g})"
            )
        if entropy_ratio is not None and entropy_ratio < low:
            return (
                f"its answers became repetitive (next-token entropy {entropy_ratio:.2f}x the base model's, "
                f"limit {low:g}x)"
            )
        if entropy_ratio is not None and entropy_ratio > high:
            return (
                f"its answers became erratic (next-token entropy {entropy_ratio:.2f}x the base model's, "
                f"limit {high:g}x)"
            )
        return None


def _mean_gap(rows: list[ProbeRow], scores: list[RowScores], aligned: list[ProbeRow]) -> float | None:
    """``mean_t [reference_logp - candidate_logp]`` over every reply token of ``rows`` (None without rows);
    ``scores`` are aligned with ``aligned`` (the rows they were computed for)."""
    by_row = {id(r): s for r, s in zip(aligned, scores, strict=True)}
    gap, tokens = 0.0, 0
    for row in rows:
        score = by_row[id(row)]
        for ref, mine in zip(row.reference_logps, score.logps, strict=True):
            gap += ref - mine
            tokens += 1
    return gap / tokens if tokens else None
