"""``certify(harness)``: every clause against the harness's stores, without pytest."""

from __future__ import annotations

import fnmatch
import time
import traceback
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from agentlooptest._backends import Backend, current, needs_other, wrong_backend_message
from agentlooptest._clause import CAPABILITIES, REOPEN, Clause, Violation, format_violation
from agentlooptest._cleanup import run_cleanup
from agentlooptest._registry import CLAUSES
from agentlooptest._report import ClauseResult, Outcome, Report
from agentlooptest._run_clause import CLAUSE_TIMEOUT, run_clause_telling_backend
from agentlooptest._stores import probe, skip_reason

if TYPE_CHECKING:
    from agentlooptest._harness import Harness

_PROTOCOLS = {"step": "StepStore", "session": "SessionStore"}


def matches(clause: Clause, pattern: str | None) -> bool:
    """Whether ``pattern`` selects ``clause``: a substring of its id, or a glob with ``*?[``.

    A pattern starting with ``test_`` is matched the same way against the
    clause's pytest test name (``test_step_order_oldest_first``) instead.
    """
    if not pattern:
        return True
    name = clause.test_name if pattern.startswith("test_") else clause.id
    if any(ch in pattern for ch in "*?["):
        return fnmatch.fnmatchcase(name, pattern)
    return pattern in name


async def certify(
    harness: Harness,
    *,
    pattern: str | None = None,
    on_start: Callable[[Clause, int, int], None] | None = None,
    on_result: Callable[[ClauseResult], None] | None = None,
    clause_timeout: float = CLAUSE_TIMEOUT,
) -> Report:
    """Run every clause the harness's stores can be held to and report how each fared.

    ``pattern`` keeps only clauses whose id contains it (or matches it, as a
    glob, when it holds ``*``, ``?`` or ``[``). ``on_start(clause, i, total)``
    and ``on_result(result)`` are called around each clause (progress
    display). A clause that runs longer than ``clause_timeout`` seconds fails as
    hung, also when the store spins without awaiting (see the README's
    "Timeouts" for what is out of reach). The harness's ``cleanup`` runs after
    each clause and once at the end, also when the run is interrupted; a
    failure of that last one is in the report's ``notes``.

    Runs under trio or asyncio, whichever awaits it. A store that cannot
    run on that backend (it needs asyncio's running loop, or calls trio
    directly) fails once, with a message naming the backend to use; every
    other clause is then failed as not run, referring to that one.

    Never raises for a broken store: its failures are in the report.
    """
    start = time.perf_counter()
    chosen = [c for c in CLAUSES if matches(c, pattern)]
    results: list[ClauseResult] = []
    try:
        run = await _probe(harness, chosen, clause_timeout)
        for i, clause in enumerate(chosen):
            if on_start is not None:
                on_start(clause, i, len(chosen))
            result = await _one(clause, harness, run, clause_timeout)
            results.append(result)
            if on_result is not None:
                on_result(result)
    finally:
        cleanup_problem = await run_cleanup(harness)  # once at the end, interrupted or not
    return Report(
        results=tuple(results),
        level=conformance_level(harness, results)
        + (f" (only clauses matching {pattern!r} ran)" if pattern else ""),
        duration=time.perf_counter() - start,
        capabilities={k: tuple(sorted(v)) for k, v in run.capabilities.items()},
        pattern=pattern or None,
        notes=(f"at the end: {cleanup_problem}",) if cleanup_problem else (),
    )


def _factory(harness: Harness, protocol: str) -> object:
    return harness.new_step_store if protocol == "step" else harness.new_session_store


def factory_error(protocol: str, exc: Exception) -> str:
    """The message for a factory (or a fresh store's ``aclose``) that raised: once, in full."""
    return (
        f"[{protocol}.factory] opening a store with the harness failed: "
        f"{type(exc).__name__}: {exc}\n" + "".join(traceback.format_exception(exc)).rstrip()
    )


def factory_failure(protocol: str, violation: Violation) -> str:
    """The message for a factory that gave no usable store in time."""
    fake = Clause(
        f"{protocol}.factory",
        f"the harness opens a {_PROTOCOLS[protocol]}",
        protocol,  # type: ignore[arg-type]
        None,
        "",
        _never,
    )
    return format_violation(fake, violation)


async def _never(harness: Harness) -> None:
    raise AssertionError("never run")  # pragma: no cover


class _Run:
    """What one ``certify`` learned so far: capabilities, factory failures, a wrong backend."""

    def __init__(self) -> None:
        self.capabilities: dict[str, frozenset[str]] = {}
        self.broken: dict[str, str] = {}  # protocol -> why its factory failed
        self.told: dict[str, str] = {}  # protocol -> the clause whose result tells that
        self.wrong: tuple[Backend, str] | None = None  # the backend needed, and the message
        self.wrong_told = ""  # the clause whose result tells the wrong backend


async def _probe(harness: Harness, chosen: list[Clause], clause_timeout: float) -> _Run:
    """Open a store per protocol: its capabilities, or why the factory failed."""
    run = _Run()
    for protocol in _PROTOCOLS:
        if _factory(harness, protocol) is None or not any(c.protocol == protocol for c in chosen):
            continue
        if run.wrong is not None:
            break
        try:
            caps = await probe(harness, protocol, clause_timeout=clause_timeout)
            run.capabilities[protocol] = caps
        except Violation as violation:
            run.broken[protocol] = factory_failure(protocol, violation)
            run.wrong = _wrong_factory(protocol, violation.__context__)
        except Exception as exc:
            run.broken[protocol] = factory_error(protocol, exc)
            run.wrong = _wrong_factory(protocol, exc)
    return run


def _wrong_factory(protocol: str, exc: BaseException | None) -> tuple[Backend, str] | None:
    running = current()
    found = needs_other(exc, running)
    if found is None:
        return None
    need, error = found
    title = f"the harness opens a {_PROTOCOLS[protocol]}"
    return need, wrong_backend_message(f"{protocol}.factory", title, running, need, error)


async def _one(clause: Clause, harness: Harness, run: _Run, clause_timeout: float) -> ClauseResult:
    def result(outcome: Outcome, message: str) -> ClauseResult:
        return ClauseResult(
            clause.id,
            clause.title,
            clause.protocol,
            clause.capability,
            outcome,
            message,
        )

    if run.wrong is not None:
        need, message = run.wrong
        if run.wrong_told:
            return result(
                "failed",
                f"[{clause.id}] {clause.title}\n  not run: the store needs {need} "
                f"({run.wrong_told} says why)",
            )
        run.wrong_told = clause.id  # the factory told it: in full here, once
        return result("failed", f"[{clause.id}] {clause.title}\n  not run:\n{message}")
    broken, told, capabilities = run.broken, run.told, run.capabilities
    if clause.protocol in broken:
        message, first = broken[clause.protocol], told.get(clause.protocol)
        cannot = f"not run: the harness could not open a {_PROTOCOLS[clause.protocol]}"
        if first is None:  # told in full once, then referred to
            told[clause.protocol] = clause.id
            return result("failed", f"[{clause.id}] {clause.title}\n  {cannot}:\n{message}")
        return result("failed", f"[{clause.id}] {clause.title}\n  {cannot} ({first} says why)")
    reason = skip_reason(clause, harness, capabilities.get(clause.protocol, frozenset()))
    if reason is not None:
        return result("skipped", reason)
    outcome, needed = await run_clause_telling_backend(
        clause, harness, clause_timeout=clause_timeout
    )
    if needed is not None:
        run.wrong, run.wrong_told = (needed, outcome.message), clause.id
    return outcome


def conformance_level(harness: Harness, results: Iterable[ClauseResult]) -> str:
    """What the results certify, per protocol: base, plus each capability whose clauses all passed.

    ``"step: base + all, aclose; session: not certified (no factory)"``; a
    protocol with a failing base clause is ``"not conformant"``. Durability
    is listed as ``reopen`` when its clauses ran and passed.
    """
    results = list(results)
    parts = []
    for protocol in _PROTOCOLS:
        if _factory(harness, protocol) is None:
            parts.append(f"{protocol}: not certified (no factory)")
            continue
        mine = [r for r in results if r.protocol == protocol]
        if not mine:
            parts.append(f"{protocol}: not checked")
            continue
        if any(r.outcome == "failed" and r.capability is None for r in mine):
            parts.append(f"{protocol}: not conformant")
            continue
        held = []
        for cap in (*CAPABILITIES, REOPEN):
            ran = [r for r in mine if r.capability == cap and r.outcome != "skipped"]
            if ran and all(r.outcome == "passed" for r in ran):
                held.append(cap)
        parts.append(f"{protocol}: base" + (f" + {', '.join(held)}" if held else " only"))
    return "; ".join(parts)
