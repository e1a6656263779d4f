"""A batch while a worker runs it: what a cancelled caller's interrupt needs.

Imported only once psycopg is known to be installed.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import psycopg

    from agentloopsql._worker import Job

    Conn = psycopg.Connection[Any]
    PgJob = Job[Conn]

# How often a running statement whose callers were all cancelled is asked again
# to stop (a request that reaches the server between statements is ignored).
CANCEL_EVERY = 0.2


class Running:
    """The jobs of one batch while a worker runs them: what :meth:`PgExecutor.interrupt` needs."""

    __slots__ = ("cancelling", "conn", "done", "interruptible", "jobs", "wait")

    def __init__(self, jobs: list[PgJob]) -> None:
        self.jobs = jobs
        self.conn: Conn | None = None  # set while the first attempt runs a statement
        self.interruptible = True  # False once a retry begins: the outcome could be unknown
        self.cancelling: threading.Thread | None = None
        self.done: threading.Event | None = None  # made when cancelling starts, not per batch
        self.wait: float | None = None  # the first attempt's bound on waiting for a connection

    def all_cancelled(self) -> bool:
        return all(job.cancel_requested for job in self.jobs)


def send_cancels(done: threading.Event, cancel: Callable[[], object]) -> None:
    """Call ``cancel`` (one cancel request) every ``CANCEL_EVERY`` s until ``done`` is set."""
    while True:
        with contextlib.suppress(Exception):  # best effort; the next round tries again
            cancel()
        if done.wait(CANCEL_EVERY):
            return


def cancel_of(conn: Conn) -> Callable[[], object]:
    """One bounded cancel request for ``conn``'s running statement (blocking: not on a loop)."""
    safe = getattr(conn, "cancel_safe", None)  # psycopg >= 3.2
    return partial(safe, timeout=2.0) if safe is not None else conn.cancel
