"""The one list of clauses: importing the clause modules registers them."""

from __future__ import annotations

from agentlooptest import (  # noqa: F401 - imported to register their clauses
    _sessions_caps,
    _sessions_core,
    _sessions_life,
    _sessions_race,
    _sessions_stress,
    _stateful,
    _steps_caps,
    _steps_ids,
    _steps_order,
    _steps_stress,
    _steps_values,
)
from agentlooptest._clause import Clause, registered

_FAMILIES = (
    "_steps_order",
    "_steps_values",
    "_steps_ids",
    "_steps_stress",
    "_steps_caps",
    "_sessions_core",
    "_sessions_stress",
    "_sessions_race",
    "_sessions_caps",
    "_sessions_life",
    "_stateful",
)


def _rank(c: Clause) -> tuple[bool, int]:
    module = c.check.__module__.rpartition(".")[2]
    return (c.protocol != "step", _FAMILIES.index(module))


CLAUSES: tuple[Clause, ...] = tuple(sorted(registered(), key=_rank))
"""Every clause: step clauses first, then session clauses; base before capabilities."""
