"""The learning benchmark's report: per-group aggregates, the markdown summary and the plot.

A *group* is one method row at one judge-noise level (``combine+baseline@p0.2``), over its seeds. Each run
(a dict of ``run.RunResult``) has ``rates[i]`` (the evaluation score after update ``i``),
``conversations[i]`` (conversations the simulated user had held by then), ``served_rates`` (the same
evaluation through the row's serving selection: best-of-N picks by the quick judge; equal to ``rates`` for
N = 1) and ``online_first_ok[1]`` (first answers served in the conversations before the first update).
The headline figures (sessions until stable, fidelity, goals) come from the machine-readable summary
(``results_json.py``, ``goals.py``) and are rendered by ``headline.py``.
"""

from __future__ import annotations

import statistics

from headline import goals_table, headline_table

from openclaw_trl.toy import world

TARGET = 0.9  # the rate the issue asks for within 60 conversations
BUDGETS = (20, 40, 60, 80)  # conversations at which the "per conversation" table reads the curves


def group_name(row: str, noise: float) -> str:
    return f"{row}@p{noise:g}"


def spread(values: list[float]) -> dict:
    """Mean, population std, min and max of ``values`` (std 0 for one value)."""
    return {
        "mean": statistics.fmean(values),
        "std": statistics.pstdev(values) if len(values) > 1 else 0.0,
        "min": min(values),
        "max": max(values),
        "n": len(values),
    }


def fmt(s: dict | None, digits: int = 2) -> str:
    if s is None:
        return "-"
    return f"{s['mean']:.{digits}f} ± {s['std']:.{digits}f} [{s['min']:.{digits}f}, {s['max']:.{digits}f}]"


def aggregate(runs: list[dict]) -> dict:
    """Per update: mean, min, max and standard deviation of the rate over the seeds that reached it (``n``;
    a run whose conversation budget ran out stops early); mean conversations used by then."""
    out = {"mean": [], "min": [], "max": [], "std": [], "n": [], "conversations": []}
    for i in range(max(len(r["rates"]) for r in runs)):
        reached = [r for r in runs if len(r["rates"]) > i]
        s = spread([r["rates"][i] for r in reached])
        for key in ("mean", "min", "max", "std", "n"):
            out[key].append(s[key])
        out["conversations"].append(statistics.fmean(r["conversations"][i] for r in reached))
    return out


def rate_after_conversations(run: dict, budget: int) -> float | None:
    """The rate of the policy being served once ``budget`` conversations were held: the last evaluation
    taken with at most that many conversations used (None when the run ended before reaching it)."""
    if run["conversations"][-1] < budget and not run["stopped_early"]:
        return None
    return [r for r, c in zip(run["rates"], run["conversations"]) if c <= budget][-1]


def conversations_to(run: dict, target: float) -> int | None:
    """Conversations used when the evaluation first reached ``target`` (None: never in this run)."""
    return next((c for r, c in zip(run["rates"], run["conversations"]) if r >= target), None)


def served_at_start(runs: list[dict]) -> dict:
    """The rate of preferred answers served before any update, two ways:

    * ``eval``: the evaluation set answered through the row's serving selection with the base weights
      (for Best-of-N: N samples per opening, the quick judge's pick), mean over seeds;
    * ``online``: the first answers actually served in the training conversations held before the
      first update, pooled over seeds (``conversations`` of them).
    """
    evals = [r["served_rates"][0] for r in runs if r.get("served_rates")]
    held = [r["conversations"][1] for r in runs if len(r["conversations"]) > 1]
    ok = [
        r["online_first_ok"][1] * r["conversations"][1]
        for r in runs
        if len(r["conversations"]) > 1 and r["online_first_ok"][1] is not None
    ]
    return {
        "eval": spread(evals) if evals else None,
        "online": sum(ok) / sum(held) if sum(held) else None,
        "conversations": sum(held),
    }


def by_conversations(runs: list[dict], budgets: tuple[int, ...]) -> dict:
    """Per budget the spread over seeds of :func:`rate_after_conversations` (None unless every seed got
    there), and the spread of :func:`conversations_to` the target over the seeds that reached it."""
    out: dict = {"budgets": {}, "to_target": None, "reached": 0, "seeds": len(runs)}
    for budget in budgets:
        values = [rate_after_conversations(r, budget) for r in runs]
        out["budgets"][budget] = None if any(v is None for v in values) else spread(values)
    reached = [c for c in (conversations_to(r, TARGET) for r in runs) if c is not None]
    out["to_target"], out["reached"] = (spread(reached) if reached else None), len(reached)
    return out


def budgets_for(runs: list[dict]) -> tuple[int, ...]:
    """:data:`BUDGETS` that every completed run reached; for short (quick) runs, a quarter, a half and all
    of the smallest completed run instead."""
    completed = [r["conversations"][-1] for r in runs if not r["stopped_early"]]
    top = min(completed) if completed else max(r["conversations"][-1] for r in runs)
    fixed = tuple(b for b in BUDGETS if b <= top)
    if len(fixed) >= 2:
        return fixed
    top = max(5, 5 * (top // 5))
    return tuple(sorted({max(5, 5 * round(top / 20)), max(5, 5 * round(top / 10)), top}))


def checkpoints(updates: int) -> list[int]:
    return sorted({u for u in (0, 4, 8, 12, 16, updates) if u <= updates})


def _per_update_table(report: dict, names: list[str], labels: dict[str, str]) -> list[str]:
    points = checkpoints(report["settings"]["updates"])
    lines = [
        "| method | seeds | " + " | ".join(f"update {u}" for u in points) + " |",
        "| --- | --- | " + " | ".join("---" for _ in points) + " |",
    ]
    for name in names:
        a = report["aggregate"][name]
        cells = [
            (
                f"{a['mean'][u]:.2f} ± {a['std'][u]:.2f} [{a['min'][u]:.2f}, {a['max'][u]:.2f}] "
                f"({a['conversations'][u]:.0f})" + (f" n={a['n'][u]}" if a["n"][u] != a["n"][0] else "")
            )
            if u < len(a["mean"])
            else "budget spent"
            for u in points
        ]
        lines.append(f"| {labels[name]} | {a['n'][0]} | " + " | ".join(cells) + " |")
    return lines


def _per_conversation_table(report: dict, names: list[str], labels: dict[str, str]) -> list[str]:
    groups = {name: [r for r in report["runs"] if group_name(r["row"], r["noise"]) == name] for name in names}
    budgets = budgets_for([r for runs in groups.values() for r in runs])
    lines = [
        "| method | "
        + " | ".join(f"{b} conversations" for b in budgets)
        + f" | conversations to reach {TARGET} | served @ update 0: eval | online |",
        "| --- | " + " | ".join("---" for _ in budgets) + " | --- | --- | --- |",
    ]
    for name, runs in groups.items():
        conv, served = by_conversations(runs, budgets), served_at_start(runs)
        to = conv["to_target"]
        reach = f"{to['mean']:.0f} ± {to['std']:.0f} [{to['min']:.0f}, {to['max']:.0f}]" if to else "never"
        reach += f" ({conv['reached']}/{conv['seeds']} seeds)"
        online = "-" if served["online"] is None else f"{served['online']:.2f} ({served['conversations']})"
        cells = [fmt(conv["budgets"][b]) for b in budgets] + [reach, fmt(served["eval"]), online]
        lines.append(f"| {labels[name]} | " + " | ".join(cells) + " |")
    return lines


def summary_markdown(report: dict, labels: dict[str, str] | None = None, results: dict | None = None) -> str:
    """The markdown summary: the headline table and the goals of ``results`` (the machine-readable
    summary, ``results_json.summary_json(report, ...)``; left out when None), then per noise level the
    per-update table and the per-conversation table."""
    s = report["settings"]
    pre = report["pretrain"]["metrics"]
    labels = {
        group_name(r["row"], r["noise"]): (labels or {}).get(r["row"], r["row"]) for r in report["runs"]
    }
    lines = [
        "# Learning benchmark: results",
        "",
        f"`{report.get('command', 'python benchmarks/learning/run.py')}` on this machine "
        f"(batch {s['batch_size']}, {s['updates']} updates, lr {s['learning_rate']}, LoRA r {s['lora_r']}, "
        f"T {s['temperature']}, conversation budget {s['max_conversations']} per run); "
        f"{report['seconds'] / 60:.0f} min of runs in all (each run cached, see docs/benchmarks.md).",
        "",
        f"Pre-trained model ({report['pretrain']['parameters'] / 1e6:.2f}M parameters): "
        f"P(preferred style) bare {pre['bare']['rate']:.2f}, with the hint block {pre['hinted']['rate']:.2f}, "
        f"follow-up compliance {pre['follow_up']['rate']:.2f}.",
        "",
        "Score: fraction of first answers in the preferred style on a fixed evaluation set of "
        f"{s['eval_per_topic'] * len(world.TOPICS)} openings (policy adapter, T={s['temperature']}, fixed sampling seeds), "
        "mean ± std over seeds [min, max]. Judge noise p: the rule judge flips its verdict and garbles its "
        "hint (a wrong style request) on a fraction p of the turns.",
    ]
    if results is not None:
        lines += ["", "## Headline", "", *_headline(results)]
    noises = sorted({r["noise"] for r in report["runs"]})
    for noise in noises:
        names = [n for n in report["aggregate"] if report["aggregate"][n]["noise"] == noise]
        lines += [
            "",
            f"## Judge noise p = {noise:g}",
            "",
            "Per update (conversations used by then in brackets):",
            "",
            *_per_update_table(report, names, labels),
            "",
            "Per conversation (the user's cost): the score of the policy being served after N conversations; "
            f"conversations until the score first reached {TARGET}; preferred answers *served* before any "
            "update (eval: the evaluation set through the row's serving selection, base weights; online: "
            "first answers of the conversations held before update 1, pooled over seeds, their count in "
            "brackets):",
            "",
            *_per_conversation_table(report, names, labels),
        ]
    gap = pre.get("teacher_gap", {})
    lines += [
        "",
        f"`budget spent`: every seed ran out of its conversation budget ({s['max_conversations']}) before "
        "that update; `n=` counts the seeds that got there. A `-` in the per-conversation table: some seed "
        "ended (all its updates done) before that many conversations.",
    ]
    if gap:
        lines.append(
            "Teacher - student log-prob of a sampled bare answer (summed over its tokens, the OPD advantage): "
            f"{_signed(gap['preferred_style'])} for answers in the preferred style, "
            f"{_signed(gap['other_styles'])} for the others."
        )
    for skipped in report.get("skipped", []):
        lines.append(f"Not run: {skipped}")
    lines += ["", "Interpretation: docs/benchmarks.md.", ""]
    return "\n".join(lines)


def _headline(results: dict) -> list[str]:
    return [
        f"Conversations to {TARGET}: until the policy evaluation first reached it. Sessions until stable: "
        "conversations until three in a row got a first answer in the preferred style from a policy whose "
        f"evaluations all stay at or above {TARGET} from then on. Fidelity drop: the fraction of well-formed "
        "on-topic answers at update 0 minus at the last update (positive: lost). Distinct drop: the same for "
        "distinct answers / answers (a collapse figure). Served before update: preferred answers served by "
        "the row's serving selection with the base model once the user gave one hint. Oracle: the row's "
        "quick judge reads the simulated user's hidden preference (an upper bound). Mean over the seeds "
        "that got there (k/n seeds); `-`: not recorded by these runs.",
        "",
        *headline_table(results),
        "",
        *goals_table(results),
    ]


def _signed(x: float | None) -> str:
    """``+0.12``; ``-`` where the model drew no answer of that kind (nothing to average)."""
    return "-" if x is None else f"{x:+.2f}"


def _meta(rows_meta, row: str, key: str):
    """``rows_meta[row].key`` (attribute or dict key), None when absent."""
    entry = (rows_meta or {}).get(row)
    if entry is None:
        return None
    return entry.get(key) if isinstance(entry, dict) else getattr(entry, key, None)


def row_info(runs: list[dict], rows_meta=None) -> dict:
    """Label, preference and oracle flag of a group's runs: the runs' own record first, then
    ``rows_meta`` (row name -> a ``run.Row`` or a dict); the label falls back to the row name, the others
    to None (unknown: runs cached before the fields existed)."""
    row = runs[0]["row"]
    info = {}
    for key in ("label", "preference", "oracle"):
        recorded = [r.get(key) for r in runs if r.get(key) is not None]
        info[key] = recorded[0] if recorded else _meta(rows_meta, row, key)
    info["label"] = info["label"] or row
    return info


def served_curve(runs: list[dict], grid: list[int]) -> dict | None:
    """Mean, min and max over seeds of the score of the policy served after each number of conversations
    in ``grid`` (:func:`rate_after_conversations`: a step function, the last evaluation taken with at
    most that many conversations held), up to the last grid point every seed reached; None if none."""
    runs = [r for r in runs if r.get("rates") and r.get("conversations")]
    if not runs:
        return None
    values = [[rate_after_conversations(r, n) for r in runs] for n in grid]
    known = next((i for i, v in enumerate(values) if None in v), len(grid))
    if known == 0:
        return None
    return {
        "x": grid[:known],
        "mean": [statistics.fmean(v) for v in values[:known]],
        "min": [min(v) for v in values[:known]],
        "max": [max(v) for v in values[:known]],
    }


def plot_limit(runs: list[dict], rows_meta=None, cap: int = 120) -> int:
    """The x range of the plot: 1.25 x the most conversations any seed of a row without an oracle needed
    to reach :data:`TARGET` (at least 20, at most ``cap``; ``cap`` when none got there), and no further
    than the longest run."""
    oracle = {r["row"]: row_info([r], rows_meta)["oracle"] for r in runs}
    reach = [conversations_to(r, TARGET) for r in runs if oracle[r["row"]] is not True]
    reach = [c for c in reach if c is not None]
    limit = min(cap, max(20, 10 * -(-int(1.25 * max(reach)) // 10))) if reach else cap
    longest = max((r["conversations"][-1] for r in runs if r.get("conversations")), default=limit)
    return max(1, min(limit, longest))


def plot(report: dict, path, labels: dict[str, str] | None = None, rows_meta=None) -> None:
    """Score per conversation to ``path``: one panel per judge noise level, x = conversations held with the
    simulated user, y = the score of the policy being served then (:func:`served_curve`), a line per row
    (mean over seeds) with its min-max band; rows whose quick judge reads the hidden preference (oracle)
    are dashed and labelled "(upper bound)". Without matplotlib (the dev extra) it says so and draws
    nothing."""
    try:
        import matplotlib
    except ImportError:
        print(f"matplotlib is not installed: no plot at {path} (pip install matplotlib)")
        return

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = report["runs"]
    if not runs:
        print(f"no runs to draw: no plot at {path}")
        return
    noises = sorted({r["noise"] for r in runs})
    order = list(dict.fromkeys([*(rows_meta or {}), *(r["row"] for r in runs)]))
    limit = plot_limit(runs, rows_meta)
    grid = list(range(limit + 1))
    fig, axes = plt.subplots(1, len(noises), figsize=(5.6 * len(noises), 4.2), squeeze=False)
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    colors: dict[str, str] = {}
    for ax, noise in zip(axes[0], noises):
        for row in order:
            group = [r for r in runs if r["row"] == row and r["noise"] == noise]
            curve = served_curve(group, grid) if group else None
            if curve is None:
                continue
            info = row_info(group, rows_meta)
            color = colors.setdefault(row, cycle[len(colors) % len(cycle)])
            label = (labels or {}).get(row, info["label"]) + (" (upper bound)" if info["oracle"] else "")
            style = "--" if info["oracle"] else "-"
            ax.step(curve["x"], curve["mean"], where="post", color=color, ls=style, label=label)
            ax.fill_between(curve["x"], curve["min"], curve["max"], step="post", color=color, alpha=0.1)
        ax.axhline(report["base_rate"], color="grey", lw=0.8, ls=":")
        ax.axhline(TARGET, color="black", lw=0.6, ls=":")
        ax.set_xlim(0, limit)
        ax.set_ylim(0, 1.02)
        ax.set_xlabel("conversations with the simulated user (band: min-max over seeds)")
        ax.set_ylabel("score of the policy being served")
        ax.grid(alpha=0.3)
        ax.set_title(f"judge noise p = {noise:g}", fontsize=9)
        ax.legend(fontsize=7, loc="lower right")
    fig.suptitle("Toy world: learning a hidden preference from conversation (CPU)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
