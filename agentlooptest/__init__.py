"""agentlooptest: the conformance contract for ``StepStore`` / ``SessionStore`` implementations.

One list of clauses (:data:`CLAUSES`), each a promise the loop relies on,
exposed three ways:

- pytest base classes :class:`StepStoreContract` / :class:`SessionStoreContract`;
- ``report = await certify(harness)``, without pytest;
- the CLI ``agentlooptest certify [module:attr]`` (also ``python -m agentlooptest``).

Each runs the contract under trio (the default) or asyncio: ``certify`` under
whichever backend awaits it, the CLI with ``--backend asyncio``, the pytest
classes with their ``backend`` class attribute.

``certify()`` and the CLI never import pytest: the two base classes are
loaded on first use (``from agentlooptest import StepStoreContract`` works as
usual). Needs the ``contract`` extra: ``pip install 'agentloop-seam[contract]'``.
"""

from __future__ import annotations

import importlib.util as _importlib_util
import sys as _sys
import typing as _typing


def _require_the_contract_extra() -> None:
    """Raise ``ImportError`` naming the extra to install when a dependency is missing.

    pytest-trio is not needed: each generated clause test is a plain function
    that starts its own event loop, on whichever backend its class names.
    """
    absent = [n for n in ("pytest", "trio", "hypothesis") if _importlib_util.find_spec(n) is None]
    if absent:
        raise ImportError(
            f"agentlooptest needs {', '.join(absent)}: "
            "install it with pip install 'agentloop-seam[contract]'"
        )


_require_the_contract_extra()

if "pytest" in _sys.modules:  # under pytest: failing clause asserts show their values
    _sys.modules["pytest"].register_assert_rewrite("agentlooptest._clauses")

from agentlooptest._certify import ClauseFailed, ClauseResult, Report, certify  # noqa: E402
from agentlooptest._clause import CAPABILITIES, Clause, Violation  # noqa: E402
from agentlooptest._clauses import CLAUSES  # noqa: E402
from agentlooptest._harness import Harness, memory_harness, memory_store_harness  # noqa: E402

if _typing.TYPE_CHECKING:
    from agentlooptest._pytest import SessionStoreContract, StepStoreContract

__all__ = [
    "CAPABILITIES",
    "CLAUSES",
    "Clause",
    "ClauseFailed",
    "ClauseResult",
    "Harness",
    "Report",
    "SessionStoreContract",
    "StepStoreContract",
    "Violation",
    "certify",
    "memory_harness",
    "memory_store_harness",
]

_PYTEST_CLASSES = frozenset({"SessionStoreContract", "StepStoreContract"})


def __getattr__(name: str) -> object:
    """Load the pytest base classes, and pytest with them, only when asked for."""
    if name in _PYTEST_CLASSES:
        from agentlooptest import _pytest  # late on purpose: pytest on demand only

        return getattr(_pytest, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_PYTEST_CLASSES})
