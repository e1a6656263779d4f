"""Fail early, in one line, when the ``contract`` extra is not installed."""

from __future__ import annotations

import importlib.util

_NEEDED = ("pytest", "trio", "hypothesis")


def missing() -> list[str]:
    """The distributions ``agentlooptest`` imports that cannot be found."""
    return [name for name in _NEEDED if importlib.util.find_spec(name) is None]


def require() -> None:
    """Raise ``ImportError`` naming the extra to install when a dependency is missing.

    ``pytest_trio`` is checked too: without it the pytest base classes would
    collect but never run their async tests.
    """
    absent = missing()
    if importlib.util.find_spec("pytest_trio") is None:
        absent.append("pytest-trio")
    if absent:
        raise ImportError(
            f"agentlooptest needs {', '.join(absent)}: "
            "install it with pip install 'agentloop[contract]'"
        )
