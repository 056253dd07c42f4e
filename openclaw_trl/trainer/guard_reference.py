"""The tensor side of the version guard's comparison (``trainer.guard``): the reference's next-token
distributions over a row's reply, kept between checks, and the signals of a candidate against them.

The reference of a row (the base model with the adapter off, on the row's prompt; or the even mixture of that
and the base on the prompt with the person's hints) does not change from one version to the next while the row
is the same, so ``ReferenceCache`` computes it once per row and keeps it for as long as the row is among those
checked: a check then runs the candidate alone. An entry is keyed by every token the reference saw (the prompt
as given, the reply) and the temperature, so a new turn, a new hint or another temperature computes a new one;
entries of rows no longer checked are dropped, so the cache never holds more than the rows of one check (each
``[reply tokens, vocabulary]`` float32 log-probs, the plain and, for a row the plain base does not explain, the
mixed reference: with the default rows and a 152k-token vocabulary at most about 150 MB, on the model's device).

``row_signals`` reads everything the guard needs from one pass over a candidate's log-probs: the exact
per-position KL(candidate || reference) over the whole vocabulary (``H(cand, ref) - H(cand)``), the candidate's
entropy and the mass it moved onto the reference's implausible tokens (the reference's own mass there is kept
with it).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from openclaw_trl.trainer.guard import IMPLAUSIBLE_LOGP, Comparison, ProbeRow

RowKey = tuple[tuple[int, ...], tuple[int, ...], float]
"""A reference's key: the prompt it was computed on, the reply, the temperature."""


@dataclass(frozen=True)
class Reference:
    """A reference over one row's reply: log-probs ``[reply tokens, vocabulary]``, its entropy per position and
    its own probability mass on the tokens it finds implausible (log-prob below ``IMPLAUSIBLE_LOGP``)."""

    logps: torch.Tensor
    entropy: torch.Tensor
    tail_mass: torch.Tensor

    @classmethod
    def of(cls, logps: torch.Tensor) -> Reference:
        probs = logps.exp()
        return cls(logps, -(probs * logps).sum(-1), (probs * (logps < IMPLAUSIBLE_LOGP)).sum(-1))

    def mixed_with(self, hinted: torch.Tensor) -> Reference:
        """The even mixture of this reference and the base told the hints (``hinted``, log-probs): a
        continuation is plausible when either finds it so."""
        return Reference.of(torch.logsumexp(torch.stack([self.logps, hinted]), dim=0) - math.log(2.0))


@dataclass(frozen=True)
class RowSignals:
    """A candidate against one reference over one row: mean KL per token, the largest moved implausible mass,
    and the sums of the candidate's and the plain reference's entropies over the row's positions."""

    kl: float
    implausible: float
    entropy_candidate: float
    entropy_base: float
    positions: int

    def closer(self, other: RowSignals) -> RowSignals:
        """Each of the two distances at the smaller of the two references' (the entropies stay the plain
        base's)."""
        return RowSignals(
            min(self.kl, other.kl),
            min(self.implausible, other.implausible),
            self.entropy_candidate,
            self.entropy_base,
            self.positions,
        )


def row_signals(candidate: torch.Tensor, reference: Reference, plain: Reference | None = None) -> RowSignals:
    """The signals of a candidate's log-probs ``[reply tokens, vocabulary]`` against ``reference`` (entropy of
    the base from ``plain``, the reference itself when None)."""
    probs = candidate.exp()
    entropy = -(probs * candidate).sum(-1)
    kl = -(probs * reference.logps).sum(-1) - entropy
    moved = (probs * (reference.logps < IMPLAUSIBLE_LOGP)).sum(-1) - reference.tail_mass
    base = reference if plain is None else plain
    return RowSignals(
        float(kl.mean()),
        float(moved.max()),
        float(entropy.sum()),
        float(base.entropy.sum()),
        int(candidate.size(0)),
    )


def comparison(signals: Sequence[RowSignals]) -> Comparison:
    """The guard's signals over every row: the worst row's KL and implausible mass, the mean entropies."""
    count = max(sum(s.positions for s in signals), 1)
    return Comparison(
        max(s.kl for s in signals),
        sum(s.entropy_candidate for s in signals) / count,
        sum(s.entropy_base for s in signals) / count,
        sum(s.positions for s in signals),
        max(s.implausible for s in signals),
    )


class ReferenceCache:
    """The references of the rows being checked (module docstring); owned by the trainer's guard side.

    ``compute(prompts, replies)`` runs the base (adapter off) and returns per row its log-probs over the
    reply ``[reply tokens, vocabulary]`` at the temperature asked for."""

    def __init__(self):
        self._plain: dict[RowKey, Reference] = {}
        self._mixed: dict[tuple[tuple[int, ...], RowKey], Reference] = {}
        self.computed = 0  # row references computed so far (every other one asked for came from the cache)

    def __len__(self) -> int:
        """The references held (plain and mixed)."""
        return len(self._plain) + len(self._mixed)

    def plain(
        self, rows: Sequence[ProbeRow], temperature: float, compute: Callable[[list, list], list]
    ) -> list[Reference]:
        """The plain base's reference of each row. The rows are the check's: references of other rows (and
        mixtures of other rows or hints) are dropped."""
        keys = [(r.prompt_ids, r.reply_ids, float(temperature)) for r in rows]
        kept = set(keys)
        self._plain = {k: v for k, v in self._plain.items() if k in kept}
        self._fill(self._plain, keys, rows, "prompt_ids", compute, lambda key, logps: Reference.of(logps))
        told = {(r.reference_ids, k) for r, k in zip(rows, keys)}
        self._mixed = {k: v for k, v in self._mixed.items() if k in told}
        return [self._plain[k] for k in keys]

    def mixed(
        self, rows: Sequence[ProbeRow], temperature: float, compute: Callable[[list, list], list]
    ) -> list[Reference]:
        """The mixture of the plain base and the base told the hints (``row.reference_ids``) of each row, all
        among the rows ``plain`` was last asked for."""
        keys = [(r.reference_ids, (r.prompt_ids, r.reply_ids, float(temperature))) for r in rows]
        self._fill(
            self._mixed,
            keys,
            rows,
            "reference_ids",
            compute,
            lambda key, logps: self._plain[key[1]].mixed_with(logps),
        )
        return [self._mixed[k] for k in keys]

    def _fill(self, have: dict, keys: list, rows: Sequence[ProbeRow], prompt: str, compute, make) -> None:
        missing = {k: r for k, r in zip(keys, rows) if k not in have}
        if not missing:
            return
        found = compute(
            [getattr(r, prompt) for r in missing.values()], [r.reply_ids for r in missing.values()]
        )
        self.computed += len(missing)
        for key, logps in zip(missing, found, strict=True):
            have[key] = make(key, logps)
