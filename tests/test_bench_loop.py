"""The loop benchmark section runs and reports its rows (at a tiny size)."""

from __future__ import annotations

import pytest

from bench import __main__ as bench_main
from bench import loop


def test_loop_section_reports_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """bench.loop.rows() measures three positive ratios and is registered as 'loop'."""
    monkeypatch.setattr(loop, "RUNS", 3)
    monkeypatch.setattr(loop, "REPEATS", 1)
    rows = loop.rows()
    assert len(rows) == 3
    assert all(row.ratio > 0 and "us/iteration" in row.detail for row in rows)
    assert bench_main.SECTIONS["loop"] is loop.rows
