"""Fail early, in one line, when the ``contract`` extra is not installed."""

from __future__ import annotations

import importlib.util

_NEEDED = ("pytest", "trio", "hypothesis")


def missing() -> list[str]:
    """The distributions ``agentlooptest`` imports that cannot be found."""
    return [name for name in _NEEDED if importlib.util.find_spec(name) is None]


def require() -> None:
    """Raise ``ImportError`` naming the extra to install when a dependency is missing.

    pytest-trio is not needed: each generated clause test is a plain function
    that starts its own event loop, on whichever backend its class names.
    """
    absent = missing()
    if absent:
        raise ImportError(
            f"agentlooptest needs {', '.join(absent)}: "
            "install it with pip install 'agentloop-seam[contract]'"
        )
