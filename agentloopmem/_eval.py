"""The store the pytest plugin gives each test, and the transcripts of what it holds.

Imported by ``agentloopmem._pytest_plugin`` only when a test asks for one of its
fixtures, so a pytest run that never uses them never imports the stores.
"""

from __future__ import annotations

from collections.abc import Sequence

import trio

from agentloop import RunStep, SupportsPaging, Transcript
from agentloopmem._combined import MemoryStore

_PAGE = 100


class EvalStore(MemoryStore):
    """A ``MemoryStore`` that remembers the sessions appended to through it directly.

    A run of ``Loop`` always writes a session row (its ``finalize``), which
    ``page_sessions`` finds; steps a test appends itself create no row, so they
    are remembered here, and a failed test's report shows those sessions too.
    Otherwise exactly a ``MemoryStore``.
    """

    def __init__(self) -> None:
        super().__init__()
        self._appended: dict[str, None] = {}  # insertion-ordered set

    async def append(self, step: RunStep) -> None:
        """As ``MemoryStore.append``; the session is remembered for the report."""
        if isinstance(step, RunStep):
            self._appended.setdefault(step.session_id)
        await super().append(step)

    async def append_many(self, steps: Sequence[RunStep]) -> None:
        """As ``MemoryStore.append_many``; the sessions are remembered for the report."""
        for step in steps if isinstance(steps, list | tuple) else ():
            if isinstance(step, RunStep):
                self._appended.setdefault(step.session_id)
        await super().append_many(steps)


async def _session_ids(store: EvalStore) -> list[str]:
    """Every session the store was written for: session rows by creation, then step-only ones."""
    ids: dict[str, None] = {}
    if isinstance(store, SupportsPaging):
        cursor: str | None = None
        while True:
            page = await store.page_sessions(limit=_PAGE, cursor=cursor, order="created")
            ids.update(dict.fromkeys(info.id for info in page.sessions))
            cursor = page.cursor
            if cursor is None:
                break
    ids.update(store._appended)
    return list(ids)


async def _read(store: EvalStore) -> list[tuple[str, str]]:
    shown = []
    for session_id in await _session_ids(store):
        transcript = await Transcript.read(store, store, session_id)
        if transcript.found:
            shown.append((session_id, transcript.text()))
    return shown


def transcripts(store: EvalStore) -> list[tuple[str, str]]:
    """``(session id, transcript text)`` for every session written through ``store``.

    Runs its own trio event loop (the in-memory store answers any loop), so it is
    called from a synchronous pytest hook once the test's own loop has ended.
    The transcript is the text ``agentloop show`` prints. A store that cannot be
    read (closed by the test, say) gives one entry saying why instead.
    """
    try:
        return trio.run(_read, store)
    except Exception as error:
        return [("(unreadable)", f"the transcripts could not be read: {error!r}")]
