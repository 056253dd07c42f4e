"""How long ``--help`` takes: ``python app.py --help`` and every ``openclaw-trl COMMAND --help``.

    .venv/bin/python benchmarks/help_bench.py              # 3 runs of each, the median
    .venv/bin/python benchmarks/help_bench.py --smoke      # 1 run of each

Each help runs in a fresh interpreter (``python app.py --help``, ``python -m openclaw_trl.cli COMMAND --help``),
as a person types it; the figure is its wall time, and the ratio is that time over the 2-second target (the
slowest command's ratio is the one checked). For comparison the script also times a bare ``python -c pass``
in the same run: the interpreter start that no help can avoid. Results go to
``benchmarks/results/help_bench_<time>.json`` (git-ignored) unless ``--out`` is given.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _results import write_results  # noqa: E402  (benchmarks/ is on sys.path from here on)
from _smoke import parse_args  # noqa: E402

from openclaw_trl.cli import COMMANDS  # noqa: E402

TARGET_S = 2.0


def helps() -> dict[str, list[str]]:
    """Label -> command line of every help."""
    cli = [sys.executable, "-m", "openclaw_trl.cli"]
    commands = {"python app.py --help": [sys.executable, "app.py", "--help"]}
    commands["openclaw-trl --help"] = [*cli, "--help"]
    for name in COMMANDS:
        commands[f"openclaw-trl {name} --help"] = [*cli, name, "--help"]
    return commands


def wall_time(cmd: list[str]) -> float:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="runs of each help; the median is reported")
    parser.add_argument("--out", default=None, help="JSON report path")
    args = parse_args(parser, argv, {"repeats": 1})
    python_start = statistics.median(wall_time([sys.executable, "-c", "pass"]) for _ in range(args.repeats))
    print(f"{'command':<36} {'seconds':>8} {'/ 2 s':>7}")
    print(f"{'(python -c pass)':<36} {python_start:>8.2f} {python_start / TARGET_S:>7.2f}")
    results = []
    for label, cmd in helps().items():
        seconds = statistics.median(wall_time(cmd) for _ in range(args.repeats))
        results.append({"command": label, "seconds": seconds, "ratio": seconds / TARGET_S})
        print(f"{label:<36} {seconds:>8.2f} {seconds / TARGET_S:>7.2f}")
    slowest = max(results, key=lambda r: r["seconds"])
    print(
        f"slowest: {slowest['command']} {slowest['seconds']:.2f} s, {slowest['ratio']:.2f} of the 2 s target"
    )
    report = {
        "target_s": TARGET_S,
        "repeats": args.repeats,
        "python_start_s": python_start,
        "results": results,
        "slowest_over_target": slowest["ratio"],
        "smoke": args.smoke,
    }
    write_results(report, "help_bench", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
