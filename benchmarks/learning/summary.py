"""The learning benchmark's report: per-group aggregates, the markdown summary and the plot.

A *group* is one method row at one judge-noise level (``combine+baseline@p0.2``), over its seeds. Each run
(a dict of ``run.RunResult``) has ``rates[i]`` (the evaluation score after update ``i``),
``conversations[i]`` (conversations the simulated user had held by then), ``served_rates`` (the same
evaluation through the row's serving selection: best-of-N picks by the quick judge; equal to ``rates`` for
N = 1) and ``online_first_ok[1]`` (first answers served in the conversations before the first update).
"""

from __future__ import annotations

import statistics

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


def summary_markdown(report: dict, labels: dict[str, str] | None = None) -> str:
    """The markdown summary: per noise level, the per-update table and the per-conversation table."""
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


def _signed(x: float | None) -> str:
    """``+0.12``; ``-`` where the model drew no answer of that kind (nothing to average)."""
    return "-" if x is None else f"{x:+.2f}"


def plot(report: dict, path, labels: dict[str, str] | None = None) -> None:
    """Draw the curves to ``path``; without matplotlib (the dev extra) say so and draw nothing."""
    try:
        import matplotlib
    except ImportError:
        print(f"matplotlib is not installed: no plot at {path} (pip install matplotlib)")
        return

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    noises = sorted({a["noise"] for a in report["aggregate"].values()})
    fig, axes = plt.subplots(len(noises), 2, figsize=(11, 3.9 * len(noises)), squeeze=False)
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    colors: dict[str, str] = {}
    for (left, right), noise in zip(axes, noises):
        groups = {n: a for n, a in report["aggregate"].items() if a["noise"] == noise}
        for a in groups.values():
            color = colors.setdefault(a["row"], cycle[len(colors) % len(cycle)])
            x = list(range(len(a["mean"])))
            label = (labels or {}).get(a["row"], a["row"])
            left.plot(x, a["mean"], marker="o", ms=2.5, color=color, label=label)
            left.fill_between(x, a["min"], a["max"], color=color, alpha=0.08)
            right.plot(a["conversations"], a["mean"], marker="o", ms=2.5, color=color)
        for ax in (left, right):
            ax.axhline(report["base_rate"], color="grey", lw=0.8, ls=":")
            ax.axhline(TARGET, color="black", lw=0.6, ls=":")
            ax.set_ylim(0, 1.02)
            ax.set_ylabel("first answers in the preferred style")
            ax.grid(alpha=0.3)
            ax.set_title(f"judge noise p = {noise:g}", fontsize=9)
        right.axvline(60, color="black", lw=0.6, ls=":")
        finals = sorted(a["conversations"][-1] for a in groups.values())
        if finals and finals[-1] > 2.5 * finals[0] > 0:  # OPD's long tail would squash the others
            right.set_xlim(0, 2.5 * finals[0])
        left.set_xlabel("updates (band: min-max over seeds)")
        right.set_xlabel("conversations with the simulated user (mean over seeds)")
        left.legend(fontsize=7, loc="lower right")
    fig.suptitle("Toy world: learning a hidden style preference from conversation (CPU)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
