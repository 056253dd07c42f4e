"""The learning benchmark's goals, checked against the summary entries (``results_json.summary_json``).

Each goal is read at one judge noise level (:data:`GOAL_NOISE`) on the rows whose quick judge does not
read the simulated user's hidden preference (``oracle`` is False; rows with an unknown flag are left
out). For each goal the result names the rows that meet it and the best row with its figure and
``miss``: by how much the figure falls short of the threshold, in the figure's unit (positive: it misses
by that much; zero or negative: it meets the goal with that margin, except that "above" a threshold is
strict, so a ``miss`` of exactly 0 does not meet it).

Goals on a per-seed count (conversations to 0.9, sessions until stable) also require every seed to get
there: a mean over the seeds that did would hide the ones that never did. Among rows, the best is the one
with the most seeds there, then the best figure.
"""

from __future__ import annotations

GOAL_NOISE = 0.2


def _figure(entry: dict, metric: str, aggregate: str = "mean"):
    """The entry's figure: the mean over seeds, or the worst seed's (``aggregate`` "max" / "min")."""
    value = entry[metric]
    if not isinstance(value, dict):
        return value
    if aggregate == "mean":
        return value["mean"]
    known = [v for v in value["per_seed"] if v is not None]
    return (max if aggregate == "max" else min)(known) if known else None


def _seeds_there(entry: dict, metric: str) -> int:
    value = entry[metric]
    return sum(v is not None for v in value["per_seed"]) if isinstance(value, dict) else len(entry["seeds"])


ROW_BASE_RATE = "the row's base rate"
"""The threshold of a goal read against each row's own base rate (its preference's rate before any update)."""


def _threshold(entry: dict, goal: dict) -> float | None:
    return entry.get("base_rate") if goal["threshold"] == ROW_BASE_RATE else goal["threshold"]


def _goals() -> list[dict]:
    return [
        {
            "id": "conversations_to_0_9",
            "text": "≥ 0.9 within 20 conversations on average with all seeds getting there",
            "metric": "conversations_to_0_9",
            "op": "<=",
            "threshold": 20,
            "all_seeds": True,
        },
        {
            "id": "sessions_until_stable",
            "text": "sessions until stable ≤ 12 (all seeds getting there)",
            "metric": "sessions_until_stable",
            "op": "<=",
            "threshold": 12,
            "all_seeds": True,
        },
        {
            "id": "fidelity_worst_drop",
            "text": "worst fidelity drop of any served version ≤ 0.05 (the worst seed)",
            "metric": "fidelity_worst_drop",
            "op": "<=",
            "threshold": 0.05,
            "all_seeds": False,
            "aggregate": "max",
        },
        {
            "id": "distinct_ratio",
            "text": "distinct answers at the end ≥ 90% of sampling the preferred answers uniformly (the worst seed)",
            "metric": "distinct_ratio",
            "op": ">=",
            "threshold": 0.9,
            "all_seeds": False,
            "aggregate": "min",
        },
        {
            "id": "served_before_update",
            "text": "served before update above the base rate (once the user has given one hint)",
            "metric": "served_before_update",
            "op": ">",
            "threshold": ROW_BASE_RATE,
            "all_seeds": False,
        },
    ]


def _miss(value: float, op: str, threshold: float) -> float:
    return value - threshold if op == "<=" else threshold - value


def _goal_figure(entry: dict, goal: dict):
    return _figure(entry, goal["metric"], goal.get("aggregate", "mean"))


def _meets(entry: dict, goal: dict) -> bool:
    value, threshold = _goal_figure(entry, goal), _threshold(entry, goal)
    if value is None or threshold is None:
        return False
    if goal["all_seeds"] and _seeds_there(entry, goal["metric"]) < len(entry["seeds"]):
        return False
    miss = _miss(value, goal["op"], threshold)
    return miss < 0 if goal["op"] == ">" else miss <= 0


def _rank(entry: dict, goal: dict) -> tuple:
    """Sort key, best first: most seeds there (goals on every seed), then the smallest miss."""
    metric = goal["metric"]
    seeds = -_seeds_there(entry, metric) if goal["all_seeds"] else 0
    return (seeds, _miss(_goal_figure(entry, goal), goal["op"], _threshold(entry, goal)))


def evaluate_goals(entries: list[dict], noise: float = GOAL_NOISE) -> list[dict]:
    """Per goal: ``id``, ``text``, ``judge_noise``, ``metric``, ``op``, ``threshold``, ``rows`` (the
    candidate entries' names), ``met_by`` (names, in entry order) and ``best`` (``name``, ``label``,
    ``value``, ``miss``, ``seeds_there``, ``seeds``; None when no candidate has the figure)."""
    candidates = [e for e in entries if e["judge_noise"] == noise and e["oracle"] is False]
    out = []
    for goal in _goals():
        metric, op = goal["metric"], goal["op"]
        scored = [
            e for e in candidates if _goal_figure(e, goal) is not None and _threshold(e, goal) is not None
        ]
        best = None
        if scored:
            top = min(scored, key=lambda e: _rank(e, goal))
            value = _goal_figure(top, goal)
            best = {
                "name": top["name"],
                "label": top["label"],
                "value": value,
                "threshold": _threshold(top, goal),
                "miss": _miss(value, op, _threshold(top, goal)),
                "seeds_there": _seeds_there(top, metric),
                "seeds": len(top["seeds"]),
            }
        out.append(
            goal
            | {
                "judge_noise": noise,
                "rows": [e["name"] for e in candidates],
                "met_by": [e["name"] for e in candidates if _meets(e, goal)],
                "best": best,
            }
        )
    return out
