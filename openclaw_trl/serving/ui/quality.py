"""Answer quality in plain words, from the version guard's signals: the panel's quality line and which version
is the last clean one.

Every new version is checked before it is served (``openclaw_trl.trainer.guard``); each update logs the
check's signals (``guard/kl``: how far its answers moved from the starting model; ``guard/implausible``: the
weight it puts on words the starting model finds implausible; ``guard/entropy_gap``: how much more (or less)
certain it is than the starting model; ``guard/held``: 1 when it was held back). Here they become words:

* :func:`quality_markdown`: "answers still varied and well-formed", "answers are starting to drift: …"
  (a signal past ``WARN_SHARE`` of its limit) or "v7 was held back: its answers repeated themselves", with
  the latest values and the versions held back so far;
* :func:`last_clean_version`: the newest version that was served, not held back, and whose check passed
  with every signal under ``WARN_SHARE`` of its limit (the initial adapter always counts): the one to roll
  back to when the answers broke.

No Gradio here.
"""

from __future__ import annotations

import math
from collections.abc import Container, Iterable
from dataclasses import dataclass

WARN_SHARE = 0.8
"""A signal past this share of its limit counts as drifting: the version is served, but not clean."""

DEFAULT_LIMITS = {"kl": 0.5, "implausible": 0.01, "entropy_drop": 1.0, "entropy_rise": 1.0}
"""The guard's default bounds, used when the status names none."""

REASONS = (
    ("inf or nan", "its weights broke (inf or NaN values)"),
    ("could not be scored", "its weights broke (inf or NaN values)"),
    ("repetitive", "its answers repeated themselves"),
    ("erratic", "its answers fell apart into random words"),
    ("moved away", "its answers moved away from anything the starting model would say"),
    ("go wrong", "its answers started to contain stray or wrong words"),
)
"""(words of the guard's verdict, what they mean in plain words), checked in order."""


@dataclass(frozen=True)
class HeldVersion:
    """A version the guard held back: ``kept`` (the version whose weights served in its place) and the
    guard's ``why``."""

    version: int
    kept: int | None
    why: str

    @classmethod
    def of(cls, published) -> HeldVersion:
        """From a ``PublishedVersion`` whose note is ``held: <why>``."""
        return cls(published.version, published.parent, published.note.partition(":")[2].strip())


def plain_reason(why: str) -> str:
    """The guard's verdict ``why`` in plain words (the verdict itself when no known words are in it)."""
    low = (why or "").lower()
    return next((plain for words, plain in REASONS if words in low), why or "it failed the quality check")


@dataclass(frozen=True)
class Signals:
    """One update's guard signals (None: not measured) and whether it was held back."""

    kl: float | None = None
    implausible: float | None = None
    entropy_gap: float | None = None
    held: bool = False

    @classmethod
    def of(cls, metrics: dict | None) -> Signals | None:
        """From an update's logged numbers (``guard/...``); None when the update logged no check."""
        metrics = metrics or {}
        if not any(isinstance(metrics.get(f"guard/{k}"), int | float) for k in ("held", "kl", "implausible")):
            return None

        def number(key: str) -> float | None:
            value = metrics.get(f"guard/{key}")
            ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
            return float(value) if ok else None

        return cls(
            number("kl"), number("implausible"), number("entropy_gap"), bool(metrics.get("guard/held"))
        )

    def drifting(self, limits: dict) -> list[str]:
        """What the signals past ``WARN_SHARE`` of their limits say, in plain words (empty: none is)."""
        limits = {**DEFAULT_LIMITS, **(limits or {})}
        out = []
        if self.kl is not None and self.kl > WARN_SHARE * limits["kl"]:
            out.append("its answers are moving away from what the starting model would say")
        if self.implausible is not None and self.implausible > WARN_SHARE * limits["implausible"]:
            out.append("it puts weight on words the starting model finds implausible")
        if self.entropy_gap is not None and -self.entropy_gap > WARN_SHARE * limits["entropy_drop"]:
            out.append("its answers are becoming repetitive")
        if self.entropy_gap is not None and self.entropy_gap > WARN_SHARE * limits["entropy_rise"]:
            out.append("its answers are becoming erratic")
        return out

    def clean(self, limits: dict) -> bool:
        return not self.held and not self.drifting(limits)

    def words(self, limits: dict) -> str:
        """The values beside their limits."""
        limits = {**DEFAULT_LIMITS, **(limits or {})}
        parts = []
        if self.kl is not None:
            parts.append(f"drift {self.kl:.2f} (limit {limits['kl']:g})")
        if self.implausible is not None:
            parts.append(f"implausible words {self.implausible:.1%} (limit {limits['implausible']:.1%})")
        if self.entropy_gap is not None:
            parts.append(
                f"certainty change {self.entropy_gap:+.2f} "
                f"(limits −{limits['entropy_drop']:g}, +{limits['entropy_rise']:g})"
            )
        return ", ".join(parts)


def quality_markdown(
    guard: dict, metrics: dict | None, held: list[HeldVersion], clean: int | None = None
) -> str | None:
    """The panel's quality line: ``guard`` (the status's ``guard``), the last update's logged ``metrics``,
    the versions ``held`` back (oldest first) and the ``clean`` version (``last_clean_version``); None when
    there is nothing to say (no guard, nothing held)."""
    limits = guard.get("limits") or {}
    latest = Signals.of(metrics)
    if not guard.get("enabled") and not held and latest is None:
        return None
    if latest is not None and latest.held and held:
        h = held[-1]
        kept = f" v{h.kept}'s weights serve in its place." if h.kept is not None else ""
        words = f"⚠️ v{h.version} was held back: {plain_reason(h.why)}.{kept}"
    elif latest is not None and latest.held:
        words = "⚠️ the last update was held back: the version before it keeps serving."
    elif latest is not None and latest.drifting(limits):
        words = "⚠️ answers are starting to drift: " + "; ".join(latest.drifting(limits)) + "."
    elif latest is not None:
        words = "✅ answers still varied and well-formed (the last check passed)."
    elif guard.get("enabled"):
        words = "every new version is checked against the starting model before it is served."
    else:
        words = "not checked (the version guard is off)."
    lines = [f"**Quality:** {words}"]
    if latest is not None and latest.words(limits):
        lines.append(f"**Last check:** {latest.words(limits)}.")
    earlier = held[:-1] if latest is not None and latest.held else held
    if earlier:
        shown = "; ".join(f"v{h.version} ({plain_reason(h.why)})" for h in earlier[-3:])
        more = f" and {len(earlier) - 3} more" if len(earlier) > 3 else ""
        lines.append(f"**Held back before:** {shown}{more}.")
    if clean is not None and (held or (latest is not None and not latest.clean(limits))):
        lines.append(f"**Last clean version:** v{clean}: roll back to it if the answers broke.")
    return "  \n".join(lines)


def last_clean_version(
    versions: Iterable, held: Iterable[int], limits: dict | None = None, path: Container[int] | None = None
) -> int | None:
    """The newest of ``versions`` (``VersionInfo``-like: version, restored_from, restorable, metrics; any
    order) that was not ``held`` back, is not a rollback's copy, can be restored, is on ``path`` (the serving
    version's lineage: an update a rollback undid is left out; None: any) and whose logged check passed with
    every signal under ``WARN_SHARE`` of its limit (one without a check counts, as the initial adapter does);
    None when there is none."""
    held = set(held)
    for v in sorted(versions, key=lambda v: v.version, reverse=True):
        if v.version in held or v.restored_from is not None or not v.restorable:
            continue
        if path is not None and v.version not in path:
            continue
        signals = Signals.of(v.metrics)
        if signals is None or signals.clean(limits or {}):
            return v.version
    return None
