"""agentloopmem: mutex-guarded in-memory stores.

For eval suites (ephemeral, deterministic state that starts empty), local
development, and as a stub while an application's real schema is designed.

**Never a system of record.** Everything lives in this process's memory: it is
gone when the process exits or the store is closed, and no other process can
see it. Use ``agentloopsql`` for state that must survive.
"""

from __future__ import annotations

from agentloopmem._sessions import SessionStore
from agentloopmem._steps import StepStore

__all__ = ["SessionStore", "StepStore"]
