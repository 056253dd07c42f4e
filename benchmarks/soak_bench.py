"""Soak: does a server that learns stay the same size and speed when an agent calls it day and night?

    python benchmarks/soak_bench.py                        # 30 minutes, one window every 300 s
    python benchmarks/soak_bench.py --minutes 600          # ten hours
    python benchmarks/soak_bench.py --smoke                # ~2.5 minutes, 30-second windows: that it runs

``app.py`` serves the toy model (``recipes/toy_offline.yaml``, shipped with the package, offline) in its own
process, learning on: the rule judge reads each reply's verdict from the person's next message, Best-of-4 with
the memory quick judge picks the served answer, every update is checkpointed and the last ``--adapter-history``
kept, the prompt KV cache bounded by ``--prefix-cache-mb`` (it fills up to its budget with the agent's long
prompts, and RSS with it: a small budget lets the first window reach that plateau). Eight simulated people
(``--sessions``) talk to it without pause, and one agent replays recorded OpenClaw traffic (heartbeats, main
turns, a compaction: ``_soak_traffic.py``).

Every window (``--window-s``) records the server process's resident memory (RSS: the median of readings every
``--rss-every-s``, and the largest; ``anon_mb``: the anonymous part, the heap, without mapped files), its open files
(``/proc/<pid>/fd``) and threads, the prompt KV cache's bytes (``/v1/status``), the store file and its
write-ahead log (WAL), the latency p50/p95 of the requests that ended in the window, the updates done (policy
version), the samples waiting for an update (``queue``: at most ``max_samples_waiting``) and the errors (any
answer but 200, or none). At the end: the disk used per stored turn (the store)
and per update (checkpoints), the checkpoints kept against their limit, and how the server ended on SIGTERM.

Targets (PASS/FAIL with their ratio): after the first window RSS grows at most 5% per hour; the last window's
p95 at most 1.2x the second's; no error; the WAL at most the store's bound (``journal_size_limit``) at every
window; no more checkpoints than ``adapter_history``. A smoke run's windows are too short for the growth and
latency ratios to mean much. Result: ``benchmarks/results/soak_<time>.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
from _results import write_results
from _smoke import parse_args
from _soak_traffic import RequestLog, agent, person

from openclaw_trl.store.db import WAL_LIMIT_BYTES

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "toy_offline.yaml"
TARGETS = {"rss_growth_per_hour": 0.05, "p95_last_over_second": 1.2}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(run_dir: Path, port: int, args) -> subprocess.Popen:
    cmd = [
        sys.executable,
        str(ROOT / "app.py"),
        "--config",
        str(RECIPE),
        "--judge_backend",
        "callable",
        "--judge_callable",
        "openclaw_trl.simulation:rule_judge",
        "--best_of_n",
        str(args.best_of_n),
        "--quick_judge_backend",
        "memory",
        "--adapter_history",
        str(args.adapter_history),
        "--output_dir",
        str(run_dir),
        "--port",
        str(port),
        "--prefix_cache_mb",
        str(args.prefix_cache_mb),
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    log = (run_dir.parent / "server.log").open("w")
    return subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env)


def wait_ready(url: str, proc: subprocess.Popen, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the server ended with exit code {proc.returncode} before it served")
        try:
            if httpx.get(url + "/v1/status", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise SystemExit(f"the server did not answer within {timeout_s:.0f}s")


def _proc_status(pid: int) -> dict:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()

    def mb(key: str) -> float:
        return int(fields.get(key, "0 kB").split()[0]) / 1024

    # RssAnon is the process's own heap; RssFile and RssShmem are file pages it maps (libraries, SQLite's
    # WAL index), which the kernel can drop and which do not grow with a leak.
    return {
        "rss_mb": mb("VmRSS"),
        "anon_mb": mb("RssAnon"),
        "file_mb": mb("RssFile"),
        "shmem_mb": mb("RssShmem"),
        "threads": int(fields["Threads"]),
    }


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _tree_bytes(path: Path) -> int:
    return sum(_size(p) for p in path.rglob("*") if p.is_file())


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def sample(
    pid: int,
    url: str,
    run_dir: Path,
    log: RequestLog,
    start: float,
    end: float,
    t0: float,
    rss: list[float],
    anon: list[float] | None = None,
) -> dict:
    """One window's figures (the process, the store, the requests that ended in [start, end)); ``rss``: the
    resident memory read every few seconds through the window (MB), whose median stands for the window (one
    reading swings by tens of MB with the update or batch in flight at that instant)."""
    requests = log.between(start, end)
    latencies = [r.latency_s for r in requests if r.status == 200]
    errors = [r for r in requests if r.status != 200]
    try:
        status = httpx.get(url + "/v1/status", timeout=30).json()
    except (httpx.HTTPError, ValueError):
        status = {}
    store = run_dir / "openclaw.sqlite"
    return {
        "t_s": round(end - t0, 1),
        **_proc_status(pid),
        "rss_mb": statistics.median(rss) if rss else _proc_status(pid)["rss_mb"],
        "rss_max_mb": max(rss, default=None),
        "rss_readings": len(rss),
        "anon_mb": statistics.median(anon) if anon else _proc_status(pid)["anon_mb"],
        "open_files": len(os.listdir(f"/proc/{pid}/fd")),
        "store_bytes": _size(store),
        "wal_bytes": _size(store.with_name(store.name + "-wal")),
        "requests": len(requests),
        "p50_s": _percentile(latencies, 50),
        "p95_s": _percentile(latencies, 95),
        "updates": status.get("policy_version"),
        "samples_waiting": status.get("samples_waiting"),
        "samples_dropped_backlog": status.get("samples_dropped_backlog"),
        "prefix_cache_bytes": ((status.get("memory") or {}).get("prefix_cache") or {}).get("bytes"),
        "errors": len(errors),
        "error_examples": sorted({f"{r.source} {r.status}: {r.error}" for r in errors})[:3],
    }


def disk_use(run_dir: Path, updates: int, adapter_history: int) -> dict:
    store = run_dir / "openclaw.sqlite"
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as conn:
        turns = conn.execute("SELECT COUNT(*) FROM turns").fetchone()[0]
    checkpoints = sorted(p for p in run_dir.glob("checkpoint-*") if p.is_dir())
    checkpoint_bytes = sum(_tree_bytes(p) for p in checkpoints)
    store_bytes = sum(_size(store.with_name(store.name + s)) for s in ("", "-wal", "-shm"))
    return {
        "turns_stored": turns,
        "store_bytes": store_bytes,
        "bytes_per_turn": store_bytes / turns if turns else None,
        "checkpoints": len(checkpoints),
        "checkpoint_limit": adapter_history,
        "checkpoint_bytes": checkpoint_bytes,
        "bytes_per_checkpoint": checkpoint_bytes / len(checkpoints) if checkpoints else None,
        "run_dir_bytes": _tree_bytes(run_dir),
        "updates": updates,
        # what the run folder holds beyond the store, spread over the updates (checkpoints, metrics, ...)
        "bytes_per_update": (_tree_bytes(run_dir) - store_bytes) / updates if updates else None,
    }


def _fmt_s(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.2f} s"


def targets(windows: list[dict], disk: dict, hours_per_window: float) -> list[dict]:
    rows = []

    def row(name, value, bound, ok, note=""):
        rows.append(
            {"target": name, "value": value, "bound": bound, "result": "PASS" if ok else "FAIL", "note": note}
        )

    first, last = windows[0], windows[-1]
    span_h = hours_per_window * (len(windows) - 1)
    growth = (last["rss_mb"] - first["rss_mb"]) / first["rss_mb"] / span_h if span_h > 0 else None
    row(
        "RSS growth per hour after the first window",
        growth,
        f"<= {TARGETS['rss_growth_per_hour']}",
        growth is not None and growth <= TARGETS["rss_growth_per_hour"],
        f"{first['rss_mb']:.0f} -> {last['rss_mb']:.0f} MB over {span_h * 60:.1f} min",
    )
    net = [w["rss_mb"] - (w["prefix_cache_bytes"] or 0) / 2**20 for w in (first, last)]
    net_growth = (net[1] - net[0]) / net[0] / span_h if span_h > 0 else None
    rows.append(
        {
            "target": "RSS beyond the prompt KV cache, growth per hour (info)",
            "value": net_growth,
            "bound": "-",
            "result": "info",
            "note": f"{net[0]:.0f} -> {net[1]:.0f} MB: what grows besides the bounded cache",
        }
    )
    if first.get("anon_mb") and last.get("anon_mb"):
        anon_growth = (last["anon_mb"] - first["anon_mb"]) / first["anon_mb"] / span_h if span_h > 0 else None
        rows.append(
            {
                "target": "anonymous RSS (the heap) growth per hour (info)",
                "value": anon_growth,
                "bound": "-",
                "result": "info",
                "note": f"{first['anon_mb']:.0f} -> {last['anon_mb']:.0f} MB; the rest of RSS is mapped files",
            }
        )
    second = windows[1] if len(windows) > 1 else first
    ratio = last["p95_s"] / second["p95_s"] if last["p95_s"] and second["p95_s"] else None
    row(
        "p95 latency, last window over the second",
        ratio,
        f"<= {TARGETS['p95_last_over_second']}",
        ratio is not None and ratio <= TARGETS["p95_last_over_second"],
        f"{_fmt_s(second['p95_s'])} -> {_fmt_s(last['p95_s'])}",
    )
    errors = sum(w["errors"] for w in windows)
    row("errors", errors, "== 0", errors == 0)
    wal = max(w["wal_bytes"] for w in windows)
    row(
        "WAL bounded (largest seen / bound)",
        wal / WAL_LIMIT_BYTES,
        "<= 1",
        wal <= WAL_LIMIT_BYTES,
        f"{wal} bytes",
    )
    n, limit = disk["checkpoints"], disk["checkpoint_limit"]
    row("checkpoints kept / adapter_history", n / limit, "<= 1", n <= limit, f"{n} of {limit}")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="how long the traffic runs")
    parser.add_argument("--window-s", type=float, default=300.0, help="seconds per measured window")
    parser.add_argument("--sessions", type=int, default=8, help="simulated people talking without pause")
    parser.add_argument("--best-of-n", type=int, default=4)
    parser.add_argument("--adapter-history", type=int, default=3, help="checkpoints kept (adapter_history)")
    parser.add_argument("--max-tokens", type=int, default=48, help="max_tokens of each request")
    parser.add_argument(
        "--prefix-cache-mb",
        type=int,
        default=64,
        help="the prompt KV cache's budget: it fills up to it with the agent's prompts (RSS grows until then)",
    )
    parser.add_argument(
        "--rss-every-s", type=float, default=5.0, help="seconds between RSS readings (a window: their median)"
    )
    parser.add_argument(
        "--out", default=None, help="JSON report path (default: benchmarks/results/soak_<time>.json)"
    )
    args = parse_args(parser, argv, {"minutes": 2.5, "window_s": 30.0, "prefix_cache_mb": 32})

    tmp = Path(tempfile.mkdtemp(prefix="openclaw-soak-"))
    run_dir = tmp / "run"
    run_dir.mkdir()
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    proc = start_server(run_dir, port, args)
    try:
        wait_ready(url, proc)
        print(f"server pid {proc.pid} at {url}; run folder {run_dir}; log {tmp / 'server.log'}", flush=True)
        log, stop = RequestLog(), threading.Event()
        threads = [
            threading.Thread(target=person, args=(url, i, log, stop, args.max_tokens), daemon=True)
            for i in range(args.sessions)
        ]
        threads.append(threading.Thread(target=agent, args=(url, log, stop, 16), daemon=True))
        t0 = time.monotonic()
        for t in threads:
            t.start()
        windows, n_windows = [], max(2, round(args.minutes * 60 / args.window_s))
        header = f"{'t_s':>6} {'rss_mb':>7} {'max_mb':>7} {'anon_mb':>7} {'fds':>4} {'thr':>4} {'store_kb':>8} {'wal_kb':>7} "
        print(
            header + f"{'kv_mb':>6} {'reqs':>5} {'p50_s':>6} {'p95_s':>6} {'upd':>4} {'queue':>5} {'err':>4}",
            flush=True,
        )
        for i in range(n_windows):
            start = t0 + i * args.window_s
            rss, anon = [], []
            while (left := start + args.window_s - time.monotonic()) > 0:
                time.sleep(min(args.rss_every_s, left))
                if proc.poll() is not None:
                    raise SystemExit(f"the server ended with exit code {proc.returncode} during the soak")
                reading = _proc_status(proc.pid)
                rss.append(reading["rss_mb"])
                anon.append(reading["anon_mb"])
            w = sample(proc.pid, url, run_dir, log, start, start + args.window_s, t0, rss, anon)
            windows.append(w)
            p50 = f"{w['p50_s']:.2f}" if w["p50_s"] is not None else "-"
            p95 = f"{w['p95_s']:.2f}" if w["p95_s"] is not None else "-"
            kv = f"{w['prefix_cache_bytes'] / 2**20:.0f}" if w["prefix_cache_bytes"] is not None else "-"
            print(
                f"{w['t_s']:>6.0f} {w['rss_mb']:>7.1f} {w['rss_max_mb'] or w['rss_mb']:>7.1f} {w['anon_mb']:>7.1f} {w['open_files']:>4} {w['threads']:>4} "
                f"{w['store_bytes'] // 1024:>8} {w['wal_bytes'] // 1024:>7} {kv:>6} {w['requests']:>5} {p50:>6} {p95:>6} "
                f"{w['updates']!s:>4} {w['samples_waiting']!s:>5} {w['errors']:>4}",
                flush=True,
            )
            for example in w["error_examples"]:
                print(f"       error: {example}", flush=True)
        stop.set()
        for t in threads:
            t.join(timeout=120)
        updates = windows[-1]["updates"] or 0
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=180)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    disk = disk_use(run_dir, updates, args.adapter_history)
    rows = targets(windows, disk, args.window_s / 3600)
    print()
    for key, value in disk.items():
        print(f"{key}: {value:.0f}" if isinstance(value, float) else f"{key}: {value}")
    print(f"server exit code on SIGTERM: {proc.returncode}")
    for r in rows:
        value = f"{r['value']:.3f}" if isinstance(r["value"], float) else r["value"]
        print(f"{r['result']}  {r['target']}: {value} (target {r['bound']}) {r['note']}")
    report = {
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
        "windows": windows,
        "disk": disk,
        "targets": rows,
        "server_exit_code": proc.returncode,
        "requests": len(log.all()),
    }
    write_results(report, "soak", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
