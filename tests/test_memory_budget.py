"""Memory budgets that fit the machine: a cache asked for more than a share of the memory available is capped at
start, with one log line, and ``/v1/status`` reports what each budget holds."""

from __future__ import annotations

import logging

import httpx

from openclaw_trl.engines import create_engine
from openclaw_trl.engines import memory_budget as mb
from tests._server_helpers import running_stack

MiB = 2**20


def test_a_budget_within_the_share_is_granted_as_asked(caplog):
    with caplog.at_level(logging.WARNING):
        budget = mb.fit_budget("prefix_cache_mb", 100 * MiB, "cpu", available=1000 * MiB, where="test")
    assert (budget.requested, budget.granted, budget.capped_by) == (100 * MiB, 100 * MiB, None)
    assert not caplog.records


def test_a_budget_over_the_share_is_capped_with_one_line_saying_why(caplog):
    with caplog.at_level(logging.WARNING):
        budget = mb.fit_budget(
            "prefix_cache_mb", 4096 * MiB, "cpu", available=2000 * MiB, where="MemAvailable"
        )
    assert budget.granted == 500 * MiB and budget.requested == 4096 * MiB
    assert "25% of the 2000 MiB MemAvailable" in budget.capped_by
    [line] = [r.getMessage() for r in caplog.records]
    assert "prefix_cache_mb: 4096 MiB asked, 500 MiB granted" in line and "at most 500" in line


def test_zero_stays_off():
    assert mb.fit_budget("prefix_cache_mb", 0, "cpu", available=10 * MiB).granted == 0


def test_the_memory_available_is_the_smaller_of_meminfo_and_the_container_limit(tmp_path, monkeypatch):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       8000000 kB\nMemAvailable:   4000000 kB\n")
    limit = tmp_path / "memory.max"
    monkeypatch.setattr(mb, "MEMINFO", meminfo)
    monkeypatch.setattr(mb, "CGROUP_LIMITS", (limit,))
    limit.write_text("max\n")
    assert mb.available_memory("cpu") == (4000000 * 1024, "MemAvailable of the machine")
    limit.write_text(f"{1024 * MiB}\n")
    assert mb.available_memory("cpu") == (1024 * MiB, "cgroup limit of the machine")
    meminfo.unlink()
    limit.unlink()
    assert mb.available_memory("cpu") == (None, "unknown")
    assert mb.fit_budget("prefix_cache_mb", 4096 * MiB, "cpu").granted == 4096 * MiB  # unknown: as asked


def test_the_engine_caps_its_prefix_cache_and_the_status_reports_each_budget(
    tiny_model_dir, tmp_path, monkeypatch, caplog
):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemAvailable:   400000 kB\n")  # ~390 MiB available: a quarter is ~97 MiB
    monkeypatch.setattr(mb, "MEMINFO", meminfo)
    monkeypatch.setattr(mb, "CGROUP_LIMITS", ())
    with caplog.at_level(logging.WARNING, logger="openclaw_trl.engines.memory_budget"):
        engine = create_engine("hf", str(tiny_model_dir), prefix_cache_mb=4096)
    try:
        assert engine.prefix_cache.max_bytes == 400000 * 1024 // 4
        assert any(
            "prefix_cache_mb: 4096 MiB asked, 97 MiB granted" in r.getMessage() for r in caplog.records
        )
        with running_stack(engine, tmp_path / "s.db") as stack:
            memory = httpx.get(f"{stack.url}/v1/status", timeout=30).json()["memory"]
        cache = memory["prefix_cache"]
        assert cache["budget_bytes"] == 400000 * 1024 // 4 and cache["requested_bytes"] == 4096 * MiB
        assert 0 <= cache["bytes"] <= cache["budget_bytes"] and "MemAvailable" in cache["capped_by"]
        assert memory["adapter_copies"] == {"bytes": 0, "adapters": 0}  # nothing published yet
    finally:
        engine.close()
