"""The batches benchmark section runs and reports its rows (at a tiny size)."""

from __future__ import annotations

import pytest

from bench import __main__ as bench_main
from bench import batches


def test_batches_section_reports_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """bench.batches.rows() measures mem and SQLite (PostgreSQL with a DSN), registered."""
    monkeypatch.setattr(batches, "ROUNDS", {"mem": 3, "sqlite": 2, "postgres": 2})
    monkeypatch.setattr(batches, "REPEATS", 1)
    monkeypatch.delenv("AGENTLOOP_PG_DSN", raising=False)
    rows = batches.rows()
    assert [row.name for row in rows] == [
        "mem append_many(10) vs 10 appends",
        "sqlite append_many(10) vs 10 appends",
    ]
    assert all(row.ratio > 0 and "per 10 steps" in row.detail for row in rows)
    assert bench_main.SECTIONS["batches"] is batches.rows
