"""agentloopmem: each op against its floor, and last_n at a big vs a small history."""

from __future__ import annotations

from bench._report import Row


def rows() -> list[Row]:
    """Placeholder until the in-memory benchmark lands."""
    return []
