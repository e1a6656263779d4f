"""The loop benchmark section runs and reports its rows (at a tiny size)."""

from __future__ import annotations

import os

import pytest

from bench import __main__ as bench_main
from bench import loop


def test_loop_section_reports_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """bench.loop.rows() measures the overhead ratios and a leased vs unleased run per store."""
    monkeypatch.setattr(loop, "RUNS", 3)
    monkeypatch.setattr(loop, "REPEATS", 1)
    monkeypatch.setattr(loop, "LEASE_RUNS", 2)
    monkeypatch.setattr(loop, "LEASE_ROUNDS", 2)
    monkeypatch.setattr(loop, "STEP_RUNS", 2)
    monkeypatch.setattr(loop, "STEP_APPENDS", 10)
    monkeypatch.setattr(loop, "STEP_ROUNDS", 2)
    every = loop.rows()
    rows = [row for row in every if not row.name.endswith(" [asyncio]")]
    assert [row.name for row in every[len(rows) :]] == [f"{row.name} [asyncio]" for row in rows[:5]]
    overhead, (step,), lease = rows[:3], rows[3:4], rows[4:]
    assert all(row.ratio > 0 and "us/iteration" in row.detail for row in overhead)
    assert step.name.startswith("loop step vs in-memory append")
    assert step.limit == 25
    assert "regression guard" in step.name
    assert step.ratio > 0
    assert step.detail.endswith(" us (medians)")
    stores = ["memory", "sqlite"] + (["postgres"] if os.environ.get("AGENTLOOP_PG_DSN") else [])
    assert [row.name.split(",")[0] for row in lease] == [f"loop lease: {s}" for s in stores]
    assert all(row.ratio > 0 and row.detail.endswith(" us/run (medians)") for row in lease)
    assert bench_main.SECTIONS["loop"] is loop.rows
