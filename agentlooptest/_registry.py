"""The one list of clauses, built from :data:`agentlooptest._clauses.FAMILIES`."""

from __future__ import annotations

import importlib

from agentlooptest._clause import Clause, registered
from agentlooptest._clauses import FAMILIES

PACKAGE = "agentlooptest._clauses"
"""The package of the clause modules (pytest rewrites the asserts of all of it)."""

for _family in FAMILIES:
    importlib.import_module(f"{PACKAGE}.{_family}")  # importing a module registers its clauses
del _family


def _rank(c: Clause) -> int:
    return FAMILIES.index(c.check.__module__.rpartition(".")[2])


CLAUSES: tuple[Clause, ...] = tuple(sorted(registered(), key=_rank))
"""Every clause, family by family in :data:`~agentlooptest._clauses.FAMILIES` order,
each family's clauses in the order its module defines them."""
