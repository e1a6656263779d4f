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
``MemoryStore`` is one object holding both, as the SQL stores are: it also
deletes, expires, restores and forks whole sessions, steps included.
"""

from __future__ import annotations

from agentloopmem._combined import FencedMemoryStore, MemoryStore
from agentloopmem._sessions import FencedSessionStore, FencedStore, SessionStore
from agentloopmem._steps import StepStore

__all__ = [
    "FencedMemoryStore",
    "FencedSessionStore",
    "FencedStore",
    "MemoryStore",
    "SessionStore",
    "StepStore",
]
