"""Fixtures any test module can take by name, and which backend runs each async test.

An async test runs under trio (through pytest-trio) unless it is marked
``@pytest.mark.anyio``: then anyio's pytest plugin runs it once per
``anyio_backend`` (trio and asyncio), async fixtures included. This hook
replaces pytest-trio's ``trio_mode``, which would claim the anyio tests too.
"""

from __future__ import annotations

from inspect import iscoroutinefunction

import pytest
from _sql_support import postgres_dsn, sql_target

__all__ = ["anyio_backend", "postgres_dsn", "sql_target"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every async test without the ``anyio`` marker to run under trio."""
    for item in items:
        if not isinstance(item, pytest.Function) or item.get_closest_marker("anyio"):
            continue
        test = item.obj
        inner = getattr(getattr(test, "hypothesis", None), "inner_test", test)
        if iscoroutinefunction(inner):
            item.add_marker(pytest.mark.trio)


@pytest.fixture(params=["trio", "asyncio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Both backends, for tests marked ``@pytest.mark.anyio``."""
    return str(request.param)
