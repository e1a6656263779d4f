"""The lifecycle benchmark section runs and reports its rows (at a tiny size)."""

from __future__ import annotations

import pytest

from bench import __main__ as bench_main
from bench import lifecycle


def test_lifecycle_section_reports_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """bench.lifecycle.rows() measures every lifecycle row on the in-memory store, registered."""
    for name, size in {
        "SESSIONS": 3_000,
        "DEEP_PAGES": 20,
        "PRUNE_STEPS": 200,
        "EXPIRE_SESSIONS": 50,
        "STALL_SESSIONS": 2_000,
        "EXPORT_STEPS": 300,
    }.items():
        monkeypatch.setattr(lifecycle, name, size)
    monkeypatch.delenv("AGENTLOOP_PG_DSN", raising=False)
    # A full collection before each timed call costs more than the call in a test
    # process's heap; the rows, not their numbers, are what this test checks.
    monkeypatch.setattr(lifecycle, "settle", lambda: None)
    rows = lifecycle.rows()
    names = [row.name for row in rows if row.name.startswith("mem: ")]
    assert names == [
        "mem: prune / append",
        "mem: expire / delete_session",
        "mem: longest append stall during expire / median append",
        "mem: export_sessions / all() + json.dumps per step",
        "mem: import_sessions / json.loads + append_many",
        "mem: deep page / page 1",
        "mem: deep page / page 1",
    ]
    assert all(row.ratio > 0 for row in rows)
    assert bench_main.SECTIONS["lifecycle"] is lifecycle.rows
