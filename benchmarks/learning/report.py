"""The learning benchmark's report: the runs grouped per row and noise level, and the files written from it."""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict
from pathlib import Path

from headline import update_readme
from results_json import summary_json, write_summary_json
from rows import LABELS, ROWS, BenchSettings
from summary import aggregate, group_name, plot, summary_markdown

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"


def build_report(runs: list[dict], settings: BenchSettings, skipped: list[str]) -> dict:
    groups: dict[str, list[dict]] = {}
    for run in runs:
        groups.setdefault(group_name(run["row"], run["noise"]), []).append(run)
    return {
        "settings": asdict(settings),
        "runs": runs,
        "aggregate": {
            name: aggregate(rs)
            | {"row": rs[0]["row"], "noise": rs[0]["noise"], "seeds": [r["seed"] for r in rs]}
            for name, rs in groups.items()
        },
        "base_rate": statistics.fmean(r["rates"][0] for r in runs),
        "seconds": round(sum(r["seconds"] for r in runs), 1),
        "skipped": skipped,
    }


def write_report(report: dict, out: Path, stem: str) -> str:
    """``<stem>.json`` (the whole report), ``<stem>_summary.json`` (one entry per row and noise level, the
    goals), ``<stem>.png`` and ``<stem>_summary.md``; the table of docs/benchmarks.md when this is
    the committed report."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.json").write_text(json.dumps(report, indent=1))
    results = summary_json(report, ROWS)
    write_summary_json(results, out / f"{stem}_summary.json")
    plot(report, out / f"{stem}.png", LABELS, ROWS)
    summary = summary_markdown(report, LABELS, results)
    (out / f"{stem}_summary.md").write_text(summary)
    if stem == "learning" and out.resolve() == RESULTS.resolve():
        update_readme(ROOT / "docs" / "benchmarks.md", results)
    return summary
