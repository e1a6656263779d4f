"""Running one clause: its check, bounded in time, turned into a result or a failure."""

from __future__ import annotations

import time
import traceback
from typing import TYPE_CHECKING, TypeVar

from agentlooptest._backends import Backend, current, needs_other, wrong_backend_message
from agentlooptest._clause import Clause, Violation, format_violation
from agentlooptest._cleanup import run_cleanup
from agentlooptest._report import ClauseResult, Outcome
from agentlooptest._spurious import spurious_cancel
from agentlooptest._stall import Hung, StoreSpun, stalled_call, watched

if TYPE_CHECKING:
    from agentlooptest._harness import Harness


E = TypeVar("E", bound=BaseException)

CLAUSE_TIMEOUT = 300.0
"""Seconds one clause may run before it fails as hung (a deadlocked or spinning store)."""

SPIN_HINT = (
    "a loop that polls a cache or flag without awaiting, or blocking work (a sync driver, "
    "time.sleep) on the event-loop thread"
)
HANG_HINT = "a lock or connection never released, or an await on an event nobody sets"


class ClauseFailed(AssertionError):
    """A clause failed; the message names the clause and says what broke and why it matters."""


class WrongBackend(ClauseFailed):
    """The store cannot run on this backend; ``backend`` is the one it needs."""

    def __init__(self, message: str, backend: Backend) -> None:
        super().__init__(message)
        self.backend = backend


def wrong_backend(clause: Clause, exc: BaseException | None) -> WrongBackend | None:
    """The failure to raise when ``exc`` says the store needs the other backend, else ``None``."""
    running = current()
    found = needs_other(exc, running)
    if found is None:
        return None
    need, error = found
    return WrongBackend(wrong_backend_message(clause.id, clause.title, running, need, error), need)


def find(group: BaseExceptionGroup[BaseException], kind: type[E]) -> E | None:
    """The first exception of ``kind`` in a (nested) exception group from a nursery."""
    for exc in group.exceptions:
        if isinstance(exc, kind):
            return exc
        if isinstance(exc, BaseExceptionGroup):
            found = find(exc, kind)
            if found is not None:
                return found
    return None


def stall_violation(exc: BaseException, seconds: float, *, spun: bool) -> Violation:
    """The failure for a call that never returned (``spun=False``) or never yielded."""
    line, call = stalled_call(exc)
    did = f"`{line}`, in the clause's check" if line else "ran the clause's check"
    who = f"the store call {call}" if call else "a call into the store"
    if spun:
        return Violation(
            did,
            f"every store call to return, or at least yield to the event loop, within {seconds:g}s",
            f"{who} ran past {seconds:g}s without ever yielding to the event loop",
            "a call that spins without awaiting freezes every task of the loop's process; "
            "no timeout or cancellation can reach it",
            hint=SPIN_HINT,
        )
    return Violation(
        did,
        f"it to finish within {seconds:g}s",
        f"it was still running: {who} never returned",
        "a store call that hangs stalls the loop's run forever",
        hint=HANG_HINT,
    )


async def run_check(
    clause: Clause, harness: Harness, *, clause_timeout: float = CLAUSE_TIMEOUT
) -> None:
    """Run ``clause``'s check once, ended after ``clause_timeout`` even if the store spins.

    The harness's ``cleanup`` runs afterwards, whatever happened (cancellation included).

    Raises:
        ClauseFailed: the store broke the clause, hung or spun past ``clause_timeout``,
            or the harness's cleanup failed.
        Exception: whatever the store raised unexpectedly, with a note naming the clause.
    """
    try:
        await _check(clause, harness, clause_timeout)
    except ClauseFailed as failed:
        problem = await run_cleanup(harness)
        if problem is None:
            raise
        raise ClauseFailed(f"{failed}\n  also:     {problem}") from None
    except BaseException as exc:
        problem = await run_cleanup(harness)
        if problem is not None:
            exc.add_note(f"[{clause.id}] also: {problem}")
        raise
    problem = await run_cleanup(harness)
    if problem is not None:
        raise ClauseFailed(
            format_violation(
                clause,
                Violation(
                    "ran the clause's check (it passed), then the harness's cleanup()",
                    "cleanup() to finish",
                    problem,
                    "a cleanup that fails leaves every clause's stores behind in the backend",
                ),
            )
        )


async def _check(clause: Clause, harness: Harness, clause_timeout: float) -> None:
    try:
        with watched(clause_timeout):
            try:
                await clause.check(harness)
            except BaseExceptionGroup as group:
                found = find(group, Violation) or find(group, StoreSpun)
                if found is None:
                    raise
                raise found from None
    except Violation as violation:
        wrong = wrong_backend(clause, violation.__context__)
        raise wrong or ClauseFailed(format_violation(clause, violation)) from None
    except StoreSpun as spun:
        stalled = stall_violation(spun, clause_timeout, spun=True)
        raise ClauseFailed(format_violation(clause, stalled)) from None
    except Hung as slow:
        hung = stall_violation(slow.stuck or slow, clause_timeout, spun=False)
        raise ClauseFailed(format_violation(clause, hung)) from None
    except BaseException as exc:
        if not isinstance(exc, Exception):
            if spurious_cancel(exc) is None:
                raise
            raise ClauseFailed(format_violation(clause, cancel_violation(exc))) from None
        wrong = wrong_backend(clause, exc)
        if wrong is not None:
            raise wrong from None
        exc.add_note(f"[{clause.id}] the store raised unexpectedly while checking: {clause.title}")
        raise


def cancel_violation(exc: BaseException) -> Violation:
    """The failure for a store call that raised ``CancelledError`` nobody asked for."""
    line, call = stalled_call(exc)
    did = f"`{line}`, in the clause's check" if line else "ran the clause's check"
    who = f"the store call {call}" if call else "a call into the store"
    return Violation(
        did,
        "a result or an Exception: CancelledError only when the caller is cancelled",
        f"{who} raised CancelledError, although nothing cancelled it",
        "a caller takes CancelledError for its own cancellation: an asyncio app (and the "
        "loop) would stop the task, and no `except Exception` can report it",
        hint="a cancellation leaked from a task or future of the store's own, or a bare "
        "`raise asyncio.CancelledError()`",
    )


async def run_clause(
    clause: Clause, harness: Harness, *, clause_timeout: float = CLAUSE_TIMEOUT
) -> ClauseResult:
    """Run ``clause`` and record its outcome; never raises for a store's failure."""
    result, _ = await run_clause_telling_backend(clause, harness, clause_timeout=clause_timeout)
    return result


async def run_clause_telling_backend(
    clause: Clause, harness: Harness, *, clause_timeout: float = CLAUSE_TIMEOUT
) -> tuple[ClauseResult, Backend | None]:
    """:func:`run_clause`, and the backend the store needs if it failed for running on this one."""
    start = time.perf_counter()
    outcome: Outcome = "passed"
    message = ""
    need: Backend | None = None
    try:
        await run_check(clause, harness, clause_timeout=clause_timeout)
    except ClauseFailed as failed:
        outcome, message = "failed", str(failed)
        need = failed.backend if isinstance(failed, WrongBackend) else None
    except Exception as exc:
        outcome = "failed"
        message = (
            f"[{clause.id}] {clause.title}\n"
            f"  the store raised {type(exc).__name__}: {exc}\n"
            f"  why:      {clause.why}\n" + "".join(traceback.format_exception(exc)).rstrip()
        )
    result = ClauseResult(
        id=clause.id,
        title=clause.title,
        protocol=clause.protocol,
        capability=clause.capability,
        outcome=outcome,
        message=message,
        duration=time.perf_counter() - start,
    )
    return result, need
