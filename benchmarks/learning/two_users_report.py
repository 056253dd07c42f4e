"""The two-user benchmark's verdict and report (``two_users.py``): the acceptance rule, the Markdown summary,
and ``--append``'s reading of an earlier report.

Acceptance (:func:`acceptance`), per user, on one set of evaluations (the version kept, or the last one):
the user's own-preference score must be >= :data:`OWN_MIN`, and their adapter's score on the *other* user's
preference must stay within :data:`LEAK_TOL` of the base model's on the same openings (``|other - base| <=
LEAK_TOL``): a rise would be the other's preference leaking in, a large fall a side effect of one's own.
"""

from __future__ import annotations

import json
from pathlib import Path

OWN_MIN = 0.9
"""A user's own-preference score the version kept must reach."""
LEAK_TOL = 0.15
"""How far a user's adapter may move the *other* user's preference score from the base model's."""


def acceptance(evals: dict, base: dict, prefs: dict) -> dict:
    """Per user: own score >= OWN_MIN and |other - base rate of other| <= LEAK_TOL (module docstring)."""
    out = {}
    for name, own in prefs.items():
        other = next(p for n, p in prefs.items() if n != name)
        own_score, other_score = evals[name][own], evals[name][other]
        shift = other_score - base[other]
        out[name] = {
            "own": own_score,
            "other": other_score,
            "other_base": base[other],
            "other_shift": round(shift, 4),
            "own_ok": own_score >= OWN_MIN,
            "no_leak": abs(shift) <= LEAK_TOL,
        }
        out[name]["pass"] = out[name]["own_ok"] and out[name]["no_leak"]
    return out | {"pass": all(v["pass"] for v in out.values())}


def markdown(report: dict) -> str:
    """The report's summary: the verdicts' table, then per user the learning curve in brief."""
    s, runs = report["settings"], report["runs"]
    lines = [
        "# Two users, one base: results",
        "",
        f"`{'`, then `'.join(report['commands'])}`: `recipes/toy_two_users.yaml` with the learning benchmark's "
        f"`combine+bo4+memory` settings (lr {s['learning_rate']:g}, max_grad_norm {s['max_grad_norm']:g}, "
        f"LoRA r {s['lora_r']}, batch {s['batch_size']}, {s['updates']} updates per user, judge noise 0); "
        f"model `{report['model']}`. Scores: fraction of answers meeting a preference on the evaluation "
        f"openings (per update: {s['eval_per_topic']} per topic; final: {2 * s['eval_per_topic']} per topic).",
        "",
        f"Acceptance rule: own score >= {OWN_MIN} and |score on the other's preference - base rate| <= "
        f"{LEAK_TOL} (the same openings), on the version kept (each user's best evaluated version: highest own "
        "score, then fidelity, then the earliest); the last version's verdict is given too. "
        f"Verdict over {len(runs)} seed(s): **{'PASS' if all(r['acceptance_kept']['pass'] for r in runs) else 'FAIL'}** "
        f"(last versions: {'PASS' if all(r['acceptance_last']['pass'] for r in runs) else 'FAIL'}).",
        "",
        "| seed | user | wants | kept | own | other's pref. | base rate of other's | fidelity | pass | "
        "last: own / other / fidelity | pass (last) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in runs:
        for name, u in r["users"].items():
            kept, last = r["final"]["kept"][name], r["final"]["last"][name]
            own, other = u["preference"], u["other_preference"]
            lines.append(
                f"| {r['seed']} | {name} | {own} | v{kept['version']} | {kept[own]:.2f} | {kept[other]:.2f} | "
                f"{r['final']['base'][other]:.2f} | {kept['fidelity']:.2f} | "
                f"{_yes(r['acceptance_kept'][name]['pass'])} | "
                f"{last[own]:.2f} / {last[other]:.2f} / {last['fidelity']:.2f} | "
                f"{_yes(r['acceptance_last'][name]['pass'])} |"
            )
    bases = sorted({_base_line(r["final"]["base"]) for r in runs})
    lines += ["", f"Base model (final openings): {'; '.join(bases)}.", ""]
    lines += [
        "Per user, from the evaluation after every update: first version at >= 0.9 (conversations used by "
        "then), the largest shift of the other's preference from version 0, the lowest fidelity; then the "
        "own score every 8 updates.",
        "",
    ]
    for r in runs:
        for name, u in r["users"].items():
            rates = u["own_rates"]
            first = next((i for i, x in enumerate(rates) if x >= OWN_MIN), None)
            reached = "never" if first is None else f"v{u['versions'][first]} ({u['conversations'][first]})"
            shift = max((x - u["other_rates"][0] for x in u["other_rates"]), key=abs)
            curve = " ".join(f"{x:.2f}" for x in rates[::8])
            lines.append(
                f"- seed {r['seed']} {name}: {u['policy_version']}/{s['updates']} updates; >= 0.9 at {reached}; "
                f"other's shift {shift:+.2f}; "
                f"lowest fidelity {min(u['fidelity']):.2f}; own {curve}"
            )
    lines.append("")
    for r in runs:
        order = "".join(n[0] for n in r["update_order"])
        lines.append(
            f"Seed {r['seed']}: wall time {r['seconds']:.0f} s (training {r['train_seconds']:.0f} s); "
            f"update order `{order}`."
        )
    return "\n".join(lines) + "\n"


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _base_line(base: dict) -> str:
    return ", ".join(f"{k} {v:.2f}" for k, v in base.items())


def earlier_runs(path: Path, report: dict, seeds: list[int]) -> tuple[list[dict], list[str]]:
    """The runs of the report at ``path`` of other seeds than ``seeds``, and the commands that made it
    (``--append``); none when there is no report there; ``ValueError`` when its settings or model differ
    from ``report``'s."""
    if not path.exists():
        return [], []
    old = json.loads(path.read_text())
    for key in ("settings", "model", "smoke", "rule"):
        if old.get(key) != report[key]:
            raise ValueError(f"--append: {path} was made with another {key}: {old.get(key)!r}")
    return [r for r in old["runs"] if r["seed"] not in seeds], old.get("commands", [])
