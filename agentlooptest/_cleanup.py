"""Running the harness's ``cleanup``: shielded, bounded, its failure told, never raised."""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio

from agentlooptest._spurious import spurious_cancel
from agentlooptest._stall import Hung, StoreSpun, watched

if TYPE_CHECKING:
    from agentlooptest._harness import Harness

CLEANUP_TIMEOUT = 30.0
"""Seconds the harness's ``cleanup`` may take before the contract gives up on it."""


async def run_cleanup(harness: Harness) -> str | None:
    """Await ``harness.cleanup()`` if there is one, even in a cancelled scope.

    Returns ``None`` when it finished, else one line saying how it failed
    (raised, hung or spun past :data:`CLEANUP_TIMEOUT`).
    """
    if harness.cleanup is None:
        return None
    try:
        with anyio.CancelScope(shield=True), watched(CLEANUP_TIMEOUT):
            await harness.cleanup()
    except (Hung, StoreSpun):
        return f"the harness's cleanup() did not finish within {CLEANUP_TIMEOUT:g}s"
    except BaseException as exc:
        if isinstance(exc, Exception):
            return f"the harness's cleanup() raised {type(exc).__name__}: {exc}"
        if spurious_cancel(exc) is None:
            raise
        return "the harness's cleanup() raised CancelledError, although nothing cancelled it"
    return None
