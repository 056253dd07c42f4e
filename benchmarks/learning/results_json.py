"""The learning benchmark's machine-readable summary: one entry per group (method row x judge noise).

``summary_json(report, rows_meta)`` turns a report (``run.build_report``: ``runs``, ``settings``,
``base_rate``, ``command``) into a dict that :func:`write_summary_json` saves as
``learning_summary.json``; the headline tables of the markdown summary and the README are rendered from
it (``headline.py``). Conventions:

* Every per-seed figure is ``null`` where the run did not reach it or did not record what it needs (runs
  cached before a field existed count as unknown, never as zero); a ``mean`` is over the seeds that have
  a value and is ``null`` when none has. ``sessions_until_stable`` also counts the seeds that recorded
  their first answers (``recorded``): ``null`` there with ``recorded`` 0 means unknown, not never.
* Floats are rounded to 3 decimals; the keys of an entry are always the same (see :data:`ENTRY_KEYS`).
* Entries are sorted by judge noise, then in the order of ``rows_meta`` (rows it does not name last, in
  the order they first appear), so the file diffs cleanly between reruns.
"""

from __future__ import annotations

import bisect
import json
import statistics
from pathlib import Path

from summary import TARGET, conversations_to, group_name, row_info, served_at_start

STREAK = 3  # conversations in a row whose first answer must be right for "stable"
DIGITS = 3
ENTRY_KEYS = (
    "name",
    "row",
    "label",
    "preference",
    "judge_noise",
    "oracle",
    "seeds",
    "conversations_to_0_9",
    "seeds_reaching_0_9",
    "sessions_until_stable",
    "seeds_stable",
    "fidelity_drop",
    "fidelity_worst_drop",
    "fidelity_unseen_drop",
    "distinct_drop",
    "distinct_final",
    "distinct_reference",
    "distinct_ratio",
    "guard_held",
    "base_rate",
    "final_score",
    "final_score_unseen",
    "served_before_update",
    "served_no_hint",
    "online_before_update",
    "stopped_early",
)


def sessions_until_stable(run: dict, target: float = TARGET, streak: int = STREAK) -> int | None:
    """Conversations held until the run shows a stable effect (1-based), None if it never does.

    A run is stable from conversation ``c`` (0-based) when

    * the first answers served in conversations ``c .. c + streak - 1`` were all in the preferred style
      (``first_ok``), and
    * every policy evaluation from the policy that served conversation ``c`` onward scores at least
      ``target``: the policy serving conversation ``c`` is the last evaluation point ``i`` with
      ``conversations[i] <= c`` (point ``i`` was taken after ``conversations[i]`` conversations, so it
      serves the next one), and ``rates[i], rates[i + 1], ...`` must all be ``>= target``.

    The result is ``c + streak`` for the first such ``c`` (the user has then held ``c + streak``
    conversations and seen the effect ``streak`` times in a row). None when no ``c`` qualifies, when the
    run has no ``first_ok`` record (cached before it existed) or no evaluation point.
    """
    first_ok = run.get("first_ok")
    rates, held = run.get("rates") or [], run.get("conversations") or []
    points = min(len(rates), len(held))
    if not first_ok or points == 0 or streak < 1:
        return None
    # lowest score from point i to the end: the condition on evaluations is suffix_min[i] >= target
    suffix_min = [0.0] * points
    low = float("inf")
    for i in range(points - 1, -1, -1):
        low = min(low, rates[i])
        suffix_min[i] = low
    run_of_ok = 0  # right first answers in a row ending at the current conversation
    for end, ok in enumerate(first_ok):
        run_of_ok = run_of_ok + 1 if ok else 0
        if run_of_ok < streak:
            continue
        c = end - streak + 1
        serving = max(bisect.bisect_right(held, c, 0, points) - 1, 0)
        if suffix_min[serving] >= target:
            return c + streak
    return None


def _drop(series: list | None) -> float | None:
    """First point minus last point (update 0 minus the end of the run); None without two points."""
    if not series or len(series) < 2 or series[0] is None or series[-1] is None:
        return None
    return series[0] - series[-1]


def _worst_drop(series: list | None) -> float | None:
    """First point minus the lowest point of the run (a collapse the run recovered from still shows)."""
    if not series or len(series) < 2 or any(x is None for x in series):
        return None
    return series[0] - min(series)


def _round(x):
    if isinstance(x, float):
        return round(x, DIGITS)
    if isinstance(x, list):
        return [_round(v) for v in x]
    if isinstance(x, dict):
        return {k: _round(v) for k, v in x.items()}
    return x


def _mean(values) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.fmean(known) if known else None


def _per_seed(values: list) -> dict:
    return {"mean": _mean(values), "per_seed": list(values)}


def distinct_reference(preference: str, answers_per_topic: int) -> float:
    """What ``distinct`` (distinct answers / answers, per topic) would be for a model that samples the answers
    meeting ``preference`` uniformly: ``E[distinct of n draws from K] / n = K (1 - (1 - 1/K)^n) / n``, ``K`` the
    number of well-formed answers about the topic that meet the preference, averaged over the topics."""
    from openclaw_trl.toy import world as toy_world

    wants, n = toy_world.preference(preference), answers_per_topic
    per_topic = []
    for topic in toy_world.TOPICS:
        k = sum(wants.matches(text) for text in toy_world.well_formed_answers(topic))
        per_topic.append(k * (1 - (1 - 1 / k) ** n) / n if k else 0.0)
    return statistics.fmean(per_topic)


def _held(run: dict) -> int | None:
    """Versions the guard held back in a run (None when the run did not log the guard)."""
    held = [m.get("guard/held") for m in run.get("trainer_metrics", [])]
    return int(sum(h for h in held if h)) if any(h is not None for h in held) else None


def group_entry(runs: list[dict], rows_meta=None, answers_per_topic: int | None = None) -> dict:
    """The summary entry of one group (same row and judge noise; one run per seed). ``answers_per_topic``:
    the evaluation's answers per topic (the distinct reference's ``n``; None: no reference)."""
    row, noise = runs[0]["row"], runs[0]["noise"]
    info = row_info(runs, rows_meta)
    final_distinct = [r["distinct"][-1] if r.get("distinct") else None for r in runs]
    reference = distinct_reference(info["preference"], answers_per_topic) if answers_per_topic else None
    reach = [conversations_to(r, TARGET) for r in runs]
    stable = [sessions_until_stable(r) for r in runs]
    unseen_final = [r["rates_unseen"][-1] if r.get("rates_unseen") else None for r in runs]
    served_rates = [r["served_rates"][0] for r in runs if r.get("served_rates")]
    entry = {
        "name": group_name(row, noise),
        "row": row,
        "label": info["label"],
        "preference": info["preference"],
        "judge_noise": noise,
        "oracle": info["oracle"],
        "seeds": [r["seed"] for r in runs],
        "conversations_to_0_9": _per_seed(reach),
        "seeds_reaching_0_9": sum(c is not None for c in reach),
        "sessions_until_stable": _per_seed(stable) | {"recorded": sum(bool(r.get("first_ok")) for r in runs)},
        "seeds_stable": sum(s is not None for s in stable),
        "fidelity_drop": _per_seed([_drop(r.get("fidelity")) for r in runs]),
        "fidelity_worst_drop": _per_seed([_worst_drop(r.get("fidelity")) for r in runs]),
        "fidelity_unseen_drop": _per_seed([_drop(r.get("fidelity_unseen")) for r in runs]),
        "distinct_drop": _per_seed([_drop(r.get("distinct")) for r in runs]),
        "distinct_final": _per_seed(final_distinct),
        "distinct_reference": reference,
        "distinct_ratio": _per_seed(
            [d / reference if d is not None and reference else None for d in final_distinct]
        ),
        "guard_held": _per_seed([_held(r) for r in runs]),
        "base_rate": _mean(r["rates"][0] for r in runs if r.get("rates")),
        "final_score": _mean(r["rates"][-1] for r in runs if r.get("rates")),
        "final_score_unseen": _mean(unseen_final),
        "served_before_update": _mean(r.get("served_after_hint") for r in runs),
        "served_no_hint": statistics.fmean(served_rates) if served_rates else None,
        "online_before_update": served_at_start(runs)["online"],
        "stopped_early": sum(bool(r.get("stopped_early")) for r in runs),
    }
    assert tuple(entry) == ENTRY_KEYS
    return entry


def _groups(runs: list[dict], rows_meta) -> list[list[dict]]:
    order = list(rows_meta or {})
    for run in runs:
        if run["row"] not in order:
            order.append(run["row"])
    groups: dict[tuple, list[dict]] = {}
    for run in runs:
        groups.setdefault((run["noise"], order.index(run["row"])), []).append(run)
    return [sorted(groups[key], key=lambda r: r["seed"]) for key in sorted(groups)]


def summary_json(report: dict, rows_meta=None, goal_noise: float | None = None) -> dict:
    """The machine-readable summary of ``report`` (pure). ``rows_meta``: row name -> its description
    (``run.ROWS``, or dicts) giving the row order and the label / preference / oracle flag of runs that do
    not record them. ``goal_noise``: the judge noise the goals are read at (default
    :data:`goals.GOAL_NOISE`)."""
    from goals import GOAL_NOISE, evaluate_goals

    per_topic = (report.get("settings") or {}).get("eval_per_topic")
    entries = [group_entry(g, rows_meta, per_topic) for g in _groups(report.get("runs", []), rows_meta)]
    base_rate = report.get("base_rate")
    return _round(
        {
            "target": TARGET,
            "command": report.get("command"),
            "settings": report.get("settings"),
            "base_rate": base_rate,
            "entries": entries,
            "goals": evaluate_goals(entries, GOAL_NOISE if goal_noise is None else goal_noise),
        }
    )


def write_summary_json(summary: dict, path) -> Path:
    """Save ``summary`` (from :func:`summary_json`) as indented JSON, atomically; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(summary, indent=1, allow_nan=False) + "\n")
    tmp.replace(path)
    return path
