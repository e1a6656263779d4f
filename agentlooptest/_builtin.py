"""The harnesses for the stores that ship with agentloop."""

from __future__ import annotations

import os

from agentlooptest._harness import Harness


async def _memory_steps() -> object:
    from agentloopmem import StepStore

    return StepStore()


async def _memory_sessions() -> object:
    from agentloopmem import SessionStore

    return SessionStore()


def memory_harness() -> Harness:
    """A ``Harness`` for the ``agentloopmem`` stores (no ``reopen``: nothing outlives a store)."""
    return Harness(new_step_store=_memory_steps, new_session_store=_memory_sessions)


PG_DSN_VARIABLE = "AGENTLOOP_PG_DSN"

BUILTIN_NAMES = ("agentloopmem", "sqlite", f"postgres (when {PG_DSN_VARIABLE} is set)")
"""How ``--help`` names what ``agentlooptest certify`` runs when given no target."""


def builtin_targets() -> dict[str, str]:
    """The targets ``agentlooptest certify`` runs when given none, by name.

    The in-memory stores and a ``SqliteStore`` on a temporary file always; a
    ``PostgresStore`` in a throw-away schema when ``AGENTLOOP_PG_DSN`` is set.
    """
    targets = {
        "agentloopmem": "agentlooptest._builtin:memory_harness",
        "sqlite": "agentloopsql.testing:sqlite",
    }
    if os.environ.get(PG_DSN_VARIABLE):
        targets["postgres"] = "agentloopsql.testing:postgres"
    return targets
