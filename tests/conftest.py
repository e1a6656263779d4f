"""Fixtures any test module can take by name."""

from __future__ import annotations

from _sql_support import postgres_dsn, sql_target

__all__ = ["postgres_dsn", "sql_target"]
