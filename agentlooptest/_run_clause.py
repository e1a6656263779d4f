"""Running one clause: its check, bounded in time, turned into a result or a failure."""

from __future__ import annotations

import time
import traceback
from typing import TYPE_CHECKING

import trio

from agentlooptest._clause import Clause, Violation, format_violation
from agentlooptest._report import ClauseResult, Outcome

if TYPE_CHECKING:
    from agentlooptest._harness import Harness

CLAUSE_TIMEOUT = 300.0
"""Seconds one clause may run before it fails as hung (a deadlocked store)."""


class ClauseFailed(AssertionError):
    """A clause failed; the message names the clause and says what broke and why it matters."""


def _find_violation(group: BaseExceptionGroup[BaseException]) -> Violation | None:
    """The first :class:`Violation` in a (nested) exception group from a nursery."""
    for exc in group.exceptions:
        if isinstance(exc, Violation):
            return exc
        if isinstance(exc, BaseExceptionGroup):
            found = _find_violation(exc)
            if found is not None:
                return found
    return None


async def run_check(
    clause: Clause, harness: Harness, *, clause_timeout: float = CLAUSE_TIMEOUT
) -> None:
    """Run ``clause``'s check once.

    Raises:
        ClauseFailed: the store broke the clause, or hung past ``clause_timeout``.
        Exception: whatever the store raised unexpectedly, with a note naming the clause.
    """
    try:
        with trio.fail_after(clause_timeout):
            try:
                await clause.check(harness)
            except BaseExceptionGroup as group:
                violation = _find_violation(group)
                if violation is None:
                    raise
                raise violation from None
    except Violation as violation:
        raise ClauseFailed(format_violation(clause, violation)) from None
    except trio.TooSlowError:
        raise ClauseFailed(
            format_violation(
                clause,
                Violation(
                    "ran the clause's check",
                    f"it to finish within {clause_timeout:g}s",
                    "it was still running: a call into the store never returned",
                    "a store call that hangs stalls the loop's run forever",
                ),
            )
        ) from None
    except Exception as exc:
        exc.add_note(f"[{clause.id}] the store raised unexpectedly while checking: {clause.title}")
        raise


async def run_clause(
    clause: Clause, harness: Harness, *, clause_timeout: float = CLAUSE_TIMEOUT
) -> ClauseResult:
    """Run ``clause`` and record its outcome; never raises for a store's failure."""
    start = time.perf_counter()
    outcome: Outcome = "passed"
    message = ""
    try:
        await run_check(clause, harness, clause_timeout=clause_timeout)
    except ClauseFailed as failed:
        outcome, message = "failed", str(failed)
    except Exception as exc:
        outcome = "failed"
        message = (
            f"[{clause.id}] {clause.title}\n"
            f"  the store raised {type(exc).__name__}: {exc}\n"
            f"  why:      {clause.why}\n" + "".join(traceback.format_exception(exc)).rstrip()
        )
    return ClauseResult(
        id=clause.id,
        title=clause.title,
        protocol=clause.protocol,
        capability=clause.capability,
        outcome=outcome,
        message=message,
        duration=time.perf_counter() - start,
    )
