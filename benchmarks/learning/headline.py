"""Headline tables of the learning benchmark, rendered from its machine-readable summary
(``results_json.summary_json``): the markdown summary's table and goals, and the table of docs/benchmarks.md.

Cells: a per-seed figure reads ``mean (k/n)``: the mean over the ``k`` of ``n`` seeds that got there
(``never (0/n)`` when none did); drops (update 0 minus the last evaluation point; positive: the run lost
that much) are means over seeds; ``-`` marks a figure the runs did not record (cached before it existed,
or a row without Best-of-N for "served before update").
"""

from __future__ import annotations

from pathlib import Path

from goals import GOAL_NOISE

README_START = "<!-- learning-table:start -->"
README_END = "<!-- learning-table:end -->"


def _num(x, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _reach(value: dict, digits: int = 0) -> str:
    """``57 (5/5)``; ``never (0/5)``; ``-`` when no run recorded what the figure needs (``recorded``)."""
    per_seed = value["per_seed"]
    k, n = sum(v is not None for v in per_seed), len(per_seed)
    if value.get("recorded", n) == 0:
        return "-"
    if value["mean"] is None:
        return f"never (0/{n})"
    return f"{value['mean']:.{digits}f} ({k}/{n})"


def _oracle(flag) -> str:
    return {True: "yes", False: "no"}.get(flag, "?")


def headline_table(summary: dict) -> list[str]:
    """Every entry: row, judge noise, oracle, conversations to 0.9, sessions until stable, fidelity drop,
    distinct drop, served before update."""
    lines = [
        "| method | judge noise | oracle | conversations to 0.9 (seeds) | sessions until stable (seeds) "
        "| fidelity drop | distinct drop | served before update |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for e in summary["entries"]:
        cells = [
            e["label"],
            f"{e['judge_noise']:g}",
            _oracle(e["oracle"]),
            _reach(e["conversations_to_0_9"]),
            _reach(e["sessions_until_stable"]),
            _num(e["fidelity_drop"]["mean"], 3),
            _num(e["distinct_drop"]["mean"], 3),
            _num(e["served_before_update"]),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _best(goal: dict) -> tuple[str, str]:
    best = goal["best"]
    if best is None:
        return "-", "-"
    digits = 0 if goal["metric"] in ("conversations_to_0_9", "sessions_until_stable") else 3
    figure = f"{best['label']}: {best['value']:.{digits}f}"
    if goal["all_seeds"]:
        figure += f" ({best['seeds_there']}/{best['seeds']} seeds)"
    miss, never = best["miss"], best["seeds"] - best["seeds_there"] if goal["all_seeds"] else 0
    figure_ok = miss < 0 if goal["op"] == ">" else miss <= 0
    parts = ([] if figure_ok else [f"{miss:.{digits}f}"]) + (
        [f"{never} seed(s) never got there"] if never else []
    )
    return figure, "; ".join(parts) or "meets it"


def goals_table(summary: dict) -> list[str]:
    """Per goal: which rows meet it, the best row's figure and by how much it misses."""
    goals = summary.get("goals") or []
    noise = goals[0]["judge_noise"] if goals else GOAL_NOISE
    labels = {e["name"]: e["label"] for e in summary["entries"]}
    lines = [
        f"Goals at judge noise p = {noise:g}, rows whose quick judge does not read the hidden preference:",
        "",
        "| goal | met by | best row | misses by |",
        "| --- | --- | --- | --- |",
    ]
    for goal in goals:
        if not goal["rows"]:
            met = f"no row without an oracle at p = {noise:g}"
        else:
            met = ", ".join(labels[name] for name in goal["met_by"]) or "none"
        lines.append(f"| {goal['text']} | {met} | " + " | ".join(_best(goal)) + " |")
    return lines


def readme_table(summary: dict, noise: float = GOAL_NOISE) -> str:
    """The README's table: the entries at judge noise ``noise``, rows without an oracle first, rows whose
    quick judge reads the hidden preference marked "(upper bound)"."""
    entries = [e for e in summary["entries"] if e["judge_noise"] == noise]
    if not entries:
        return f"_No learning benchmark runs at judge noise {noise:g} yet._"
    order = {False: 0, None: 1, True: 2}
    entries = sorted(entries, key=lambda e: order.get(e["oracle"], 1))  # stable: keeps the row order
    lines = [
        f"Judge noise p = {noise:g}; mean over seeds (seeds that got there in brackets); score: the fraction of "
        "answers in the user's preference, base model → after the run; fidelity drop: the share of well-formed "
        "answers about the asked topic lost at the end of the run (mean) / at the worst point of the worst seed; "
        "distinct: distinct answers per topic at the end / what sampling the preferred answers uniformly gives; "
        "held back: versions the guard did not serve, per run; served before update: what Best-of-N serves with "
        "the base model once the user has given one hint.",
        "",
        "| method | preference | score | conversations to 0.9 | sessions until stable "
        "| fidelity drop: end / worst | distinct / uniform | held back | served before update |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for e in entries:
        marked = e["oracle"] is True and "upper bound" not in e["label"]
        label = e["label"] + (" (upper bound)" if marked else "")
        cells = [
            label,
            e["preference"] or "-",
            f"{_num(e['base_rate'])} → {_num(e['final_score'])}",
            _reach(e["conversations_to_0_9"]),
            _reach(e["sessions_until_stable"]),
            f"{_num(e['fidelity_drop']['mean'], 3)} / {_num(_worst(e['fidelity_worst_drop'], max), 3)}",
            f"{_num(e['distinct_final']['mean'])} / {_num(e['distinct_reference'])}",
            _num(e["guard_held"]["mean"], 1),
            _num(e["served_before_update"]),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _worst(value: dict, pick) -> float | None:
    known = [v for v in value["per_seed"] if v is not None]
    return pick(known) if known else None


def update_readme(readme_path, summary: dict, noise: float = GOAL_NOISE) -> bool:
    """Replace the text between :data:`README_START` and :data:`README_END` in ``readme_path`` with
    :func:`readme_table` (idempotent: a second call with the same summary changes nothing). Without both
    markers, in that order, it changes nothing and says so. Returns whether the markers were found."""
    path = Path(readme_path)
    text = path.read_text()
    start, end = text.find(README_START), text.find(README_END)
    if start < 0 or end < start:
        print(f"{path}: no {README_START} ... {README_END} markers: the learning table is not updated")
        return False
    head, tail = text[: start + len(README_START)], text[end:]
    new = f"{head}\n{readme_table(summary, noise)}\n{tail}"
    if new != text:
        path.write_text(new)
    return True
