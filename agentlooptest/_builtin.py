"""The harnesses for the stores that ship with agentloop."""

from __future__ import annotations

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


BUILTIN: dict[str, str] = {"agentloopmem": "agentlooptest._builtin:memory_harness"}
"""The targets ``agentlooptest certify`` runs when given none, by name."""
