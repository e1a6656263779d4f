"""``certify(harness)``: every clause against the harness's stores, without pytest, and the
``Report`` it hands back.

Running one clause (:func:`run_check`) bounds it in time (``_stall``), runs
the harness's cleanup afterwards, and turns what went wrong into one
message: a :class:`~agentlooptest.Violation`, a hang or spin, a
``CancelledError`` nobody asked for, or a store that needs the other
backend. :func:`certify` probes each protocol's store once, skips what does
not apply, runs the rest in ``CLAUSES`` order and reports the conformance
level. :class:`Report` and :class:`ClauseResult` are the result, with their
JSON (:meth:`Report.to_dict`) and JUnit XML forms.
"""

from __future__ import annotations

import fnmatch
import re
import time
import traceback
from collections.abc import Callable, Iterable
from typing import Any, Literal
from xml.etree import ElementTree

import attrs

from agentlooptest._backends import Backend, current, needs_other, wrong_backend_message
from agentlooptest._cancel import cancel_violation, spurious_cancel
from agentlooptest._clause import (
    CAPABILITIES,
    REOPEN,
    Clause,
    Violation,
    first_in_group,
    format_violation,
)
from agentlooptest._clauses import CLAUSES
from agentlooptest._harness import Harness, probe, run_cleanup, skip_reason
from agentlooptest._stall import Hung, StoreSpun, stall_violation, watched

Outcome = Literal["passed", "failed", "skipped", "not run", "xfailed"]
"""``"not run"``: the clause could not run because of a failure another clause reports
(the harness could not open a store, or the store needs the other backend).
``"xfailed"``: the clause failed and the harness lists it in ``expected_failures``."""

REPORT_VERSION = 1
"""The version of the JSON report shape; raised when a key changes meaning or goes away."""


@attrs.frozen
class ClauseResult:
    """How one clause fared: ``outcome`` and, unless it passed, ``message`` says why.

    ``"not run"`` clauses name, in ``message``, the clause whose failure says why.
    ``expected_failure`` is the reason the harness's ``expected_failures`` gives
    for this clause (``""`` when it is not listed).
    """

    id: str
    title: str
    protocol: str
    capability: str | None
    outcome: Outcome
    message: str = ""
    duration: float = 0.0
    expected_failure: str = ""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every field."""
        return attrs.asdict(self)


@attrs.frozen
class Report:
    """The result of :func:`agentlooptest.certify`.

    ``ok`` is true when no clause failed or was not run and at least one
    passed (skipped clauses cover capabilities the store does not have).
    ``level`` names what was certified, e.g.
    ``"step: base + all, delete_session; session: not certified"``.
    ``duration`` is in seconds. ``pattern`` is the ``-k`` selection when only
    some clauses ran: such a report never says "certified". ``notes`` are
    problems outside any clause (the harness's final cleanup failed).
    """

    results: tuple[ClauseResult, ...]
    level: str
    duration: float
    capabilities: dict[str, tuple[str, ...]] = attrs.field(factory=dict)
    pattern: str | None = None
    notes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """Whether every clause that applies passed (none failed or was not run), and one ran."""
        return not self.failed and not self.not_run and bool(self.passed)

    @property
    def passed(self) -> tuple[ClauseResult, ...]:
        """The clauses that passed."""
        return tuple(r for r in self.results if r.outcome == "passed")

    @property
    def failed(self) -> tuple[ClauseResult, ...]:
        """The clauses that failed."""
        return tuple(r for r in self.results if r.outcome == "failed")

    @property
    def xfailed(self) -> tuple[ClauseResult, ...]:
        """The clauses that failed as the harness's ``expected_failures`` said they would."""
        return tuple(r for r in self.results if r.outcome == "xfailed")

    @property
    def not_run(self) -> tuple[ClauseResult, ...]:
        """The clauses a failure of another clause kept from running (that one says why)."""
        return tuple(r for r in self.results if r.outcome == "not run")

    @property
    def skipped(self) -> tuple[ClauseResult, ...]:
        """The clauses that did not apply, each with its reason in ``message``."""
        return tuple(r for r in self.results if r.outcome == "skipped")

    def result(self, clause_id: str) -> ClauseResult:
        """The result of one clause.

        Raises:
            KeyError: no clause with that id ran.
        """
        for r in self.results:
            if r.id == clause_id:
                return r
        raise KeyError(clause_id)

    @property
    def verdict(self) -> str:
        """One line: certified or not, and the counts."""
        not_run = f"{len(self.not_run)} not run, " if self.not_run else ""
        xfailed = f"{_failures(len(self.xfailed))}, " if self.xfailed else ""
        counts = (
            f"{len(self.passed)} passed, {len(self.failed)} failed, {xfailed}{not_run}"
            f"{len(self.skipped)} skipped in {self.duration:.1f}s"
        )
        if not self.failed and not self.passed and not self.not_run:
            return f"NOTHING CERTIFIED: every selected clause was skipped: {counts}"
        if self.ok and self.pattern:
            return f"PASSED the clauses matching {self.pattern!r} (a partial run): {counts}"
        if self.ok and self.xfailed:
            known = ", ".join(r.id for r in self.xfailed)
            return f"CERTIFIED ({self.level}) with known divergences ({known}): {counts}"
        if self.ok:
            return f"CERTIFIED ({self.level}): {counts}"
        ids = ", ".join(r.id for r in self.failed[:5])
        more = f" and {len(self.failed) - 5} more" if len(self.failed) > 5 else ""
        return f"NOT CERTIFIED: {counts}; broken: {ids}{more}"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict, the shape docs/howto/certify.md's "Report formats" documents.

        ``version`` (:data:`REPORT_VERSION`), ``ok``, ``level``, ``pattern``,
        ``verdict``, ``duration``, ``capabilities``, ``notes`` and ``results``
        (each a :meth:`ClauseResult.to_dict`). The CLI's ``--json`` writes one
        such dict per target, each with a ``target`` key added.
        """
        return {
            "version": REPORT_VERSION,
            "ok": self.ok,
            "level": self.level,
            "pattern": self.pattern,
            "verdict": self.verdict,
            "duration": self.duration,
            "capabilities": {k: list(v) for k, v in self.capabilities.items()},
            "notes": list(self.notes),
            "results": [r.to_dict() for r in self.results],
        }

    def to_junit_xml(self, name: str = "agentlooptest") -> str:
        """The report as a JUnit XML document (one ``testcase`` per clause)."""
        root = ElementTree.Element("testsuites")
        root.append(self.junit_suite(name))
        return ElementTree.tostring(root, encoding="unicode", xml_declaration=True)

    def junit_suite(self, name: str) -> ElementTree.Element:
        """One JUnit ``testsuite`` element named ``name``, one ``testcase`` per clause."""
        suite = ElementTree.Element(
            "testsuite",
            name=_xml_text(name),
            tests=str(len(self.results)),
            failures=str(len(self.failed)),
            skipped=str(len(self.skipped) + len(self.not_run) + len(self.xfailed)),
            errors="0",
            time=f"{self.duration:.3f}",
        )
        for r in self.results:
            case = ElementTree.SubElement(
                suite,
                "testcase",
                classname=_xml_text(f"{name}.{r.protocol}"),
                name=r.id,
                time=f"{r.duration:.3f}",
            )
            if r.outcome == "failed":
                first = r.message.splitlines()[0] if r.message else ""
                failure = ElementTree.SubElement(case, "failure", message=_xml_text(first))
                failure.text = _xml_text(r.message)
            elif r.outcome == "skipped":
                ElementTree.SubElement(case, "skipped", message=_xml_text(r.message))
            elif r.outcome == "xfailed":  # as pytest's JUnit writes an xfail
                reason = f"expected failure: {r.expected_failure}"
                skipped = ElementTree.SubElement(
                    case, "skipped", message=_xml_text(reason), type="pytest.xfail"
                )
                skipped.text = _xml_text(r.message)
            elif r.outcome == "not run":  # JUnit has no such outcome; the suite still fails
                reason = r.message.splitlines()[-1].strip() if r.message else "not run"
                ElementTree.SubElement(case, "skipped", message=_xml_text(reason), type="not run")
        return suite


# XML 1.0 cannot carry these at all, not even as character references.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _xml_text(text: str) -> str:
    """``text`` with the characters XML 1.0 forbids written as ``\\xNN`` escapes.

    Failure messages quote what a store returned, NUL and control characters included.
    """
    return _NOT_XML.sub(lambda m: ascii(m.group())[1:-1], text)


CLAUSE_TIMEOUT = 300.0
"""Seconds one clause may run before it fails as hung (a deadlocked or spinning store)."""


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
                found = first_in_group(group, Violation) or first_in_group(group, StoreSpun)
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


async def run_clause(
    clause: Clause, harness: Harness, *, clause_timeout: float = CLAUSE_TIMEOUT
) -> tuple[ClauseResult, Backend | None]:
    """Run ``clause`` and record its outcome; never raises for a store's failure.

    Also returns the backend the store needs when it failed for running on
    this one (``None`` otherwise).
    """
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
    hung, also when the store spins without awaiting (see docs/howto/certify.md's
    "Timeouts" for what is out of reach). The harness's ``cleanup`` runs after
    each clause and once at the end, also when the run is interrupted; a
    failure of that last one is in the report's ``notes``.

    Runs under trio or asyncio, whichever awaits it. A store that cannot
    run on that backend (it needs asyncio's running loop, or calls trio
    directly) fails once, with a message naming the backend to use; every
    other clause is then ``"not run"``, referring to that one. So is every
    clause of a protocol whose store the harness could not open, after the first.

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
                "not run",
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
        return result("not run", f"[{clause.id}] {clause.title}\n  {cannot} ({first} says why)")
    reason = skip_reason(clause, harness, capabilities.get(clause.protocol, frozenset()))
    if reason is not None:
        return result("skipped", reason)
    outcome, needed = await run_clause(clause, harness, clause_timeout=clause_timeout)
    if needed is not None:
        run.wrong, run.wrong_told = (needed, outcome.message), clause.id
        return outcome
    return as_expected(outcome, harness.expected_failures.get(clause.id))


def _failures(count: int) -> str:
    return f"{count} expected failure" + ("s" if count != 1 else "")


def as_expected(result: ClauseResult, reason: str | None) -> ClauseResult:
    """``result`` judged by the harness's ``expected_failures`` (``reason`` when listed).

    A listed clause that failed is ``"xfailed"``; one that passed fails, "expected
    to fail but passed". Other outcomes, and unlisted clauses, are unchanged.
    """
    if reason is None:
        return result
    if result.outcome == "failed":
        return attrs.evolve(result, outcome="xfailed", expected_failure=reason)
    if result.outcome == "passed":
        message = (
            f"[{result.id}] {result.title}\n"
            f"  expected to fail but passed: the harness lists it in expected_failures "
            f"({reason!r})\n"
            "  why:      a known divergence that is fixed must leave the list, or the list "
            "hides the next one; remove it from expected_failures"
        )
        return attrs.evolve(result, outcome="failed", message=message, expected_failure=reason)
    return attrs.evolve(result, expected_failure=reason)


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
        if any(r.outcome in ("failed", "not run") and r.capability is None for r in mine):
            parts.append(f"{protocol}: not conformant")
            continue
        held = []
        for cap in (*CAPABILITIES, REOPEN):
            ran = [r for r in mine if r.capability == cap and r.outcome != "skipped"]
            if ran and all(r.outcome == "passed" for r in ran):
                held.append(cap)
        known = sum(r.outcome == "xfailed" for r in mine)
        parts.append(
            f"{protocol}: base"
            + (f" + {', '.join(held)}" if held else " only")
            + (f" ({_failures(known)})" if known else "")
        )
    return "; ".join(parts)
