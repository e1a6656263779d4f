"""agentloopmem: mutex-guarded in-memory stores.

For eval suites (ephemeral, deterministic state that starts empty), local
development, and as a stub while an application's real schema is designed.

**Never a system of record.** Everything lives in this process's memory: it is
gone when the process exits or the store is closed, and no other process can
see it. Use ``agentloopsql`` for state that must survive.

Every store call runs under trio or asyncio alike (the caller's loop, found
per call): it is a checkpoint, a cancelled call changed nothing, and a call
that returned is never reported as cancelled.

Leases (``SessionStore.acquire_lease`` and ``fenced``) make one owner the only
writer of a session among the tasks and threads of this process; a
``SessionStore(steps=step_store)`` fences that step store's appends too.
"""

from __future__ import annotations

from agentloopmem._stores import FencedSessionStore, FencedStore, SessionStore, StepStore

__all__ = ["FencedSessionStore", "FencedStore", "SessionStore", "StepStore"]
