"""The soak benchmark's parts that need no server: the replayed OpenClaw requests stay what they were (a heartbeat
is still told apart as one once cut to the toy model's context), and the targets read the windows right."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import _soak_traffic  # noqa: E402
import run_all  # noqa: E402
import soak_bench  # noqa: E402

from openclaw_trl.sessions.side_calls import side_call_kind  # noqa: E402


def test_replayed_requests_keep_their_kind_and_are_cut_short():
    bodies = _soak_traffic.replay_bodies(max_tokens=16)
    assert len(bodies) == len(_soak_traffic.REPLAY)
    for name, body in zip(_soak_traffic.REPLAY, bodies):
        recorded = json.loads((_soak_traffic.RECORDED / f"{name}.json").read_text())["body"]
        assert side_call_kind(body["messages"], body.get("tools")) == side_call_kind(
            recorded["messages"], recorded.get("tools")
        ), name
        assert len(json.dumps(body["messages"])) <= 1500 and body["max_completion_tokens"] == 16
        assert all(isinstance(t, dict) and t["function"]["name"] for t in body.get("tools") or [])
    kinds = {side_call_kind(b["messages"], b.get("tools")) for b in bodies}
    assert kinds == {"heartbeat", "compaction", None}


def _window(t, rss, p95, errors=0, wal=4 << 20, cache=0):
    return {
        "t_s": t,
        "rss_mb": rss,
        "p95_s": p95,
        "errors": errors,
        "wal_bytes": wal,
        "prefix_cache_bytes": cache,
    }


def test_targets_pass_and_fail_on_what_the_windows_say():
    disk = {"checkpoints": 3, "checkpoint_limit": 3}
    steady = [_window(300, 1000, 2.0), _window(600, 1000, 2.0), _window(900, 1005, 2.2)]
    rows = {r["target"].split(",")[0].split(" (")[0]: r for r in soak_bench.targets(steady, disk, 300 / 3600)}
    assert rows["RSS growth per hour after the first window"]["result"] == "PASS"  # 0.5% in 10 min: 3%/h
    assert rows["p95 latency"]["result"] == "PASS" and rows["errors"]["result"] == "PASS"
    growing = [
        _window(300, 1000, 2.0),
        _window(600, 1050, 2.0),
        _window(900, 1100, 3.0, errors=2, wal=32 << 20),
    ]
    rows = {
        r["target"]: r
        for r in soak_bench.targets(growing, {"checkpoints": 4, "checkpoint_limit": 3}, 300 / 3600)
    }
    assert [r["result"] for r in rows.values() if r["result"] != "info"] == ["FAIL"] * 5


def test_soak_is_a_stage_of_run_all(tmp_path):
    import argparse

    args = argparse.Namespace(smoke=True, gpu=False, quick=False, full=False, no_vllm=True)
    stages = {name: cmd for name, cmd, _out, _timeout in run_all.plan(args, tmp_path)}
    assert stages["soak"][-3:-2] == ["--smoke"] and stages["soak"][1].endswith("soak_bench.py")
