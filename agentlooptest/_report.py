"""What ``certify`` hands back: one result per clause, the conformance level, the verdict."""

from __future__ import annotations

import re
from typing import Any, Literal
from xml.etree import ElementTree

import attrs

Outcome = Literal["passed", "failed", "skipped"]

REPORT_VERSION = 1
"""The version of the JSON report shape; raised when a key changes meaning or goes away."""


@attrs.frozen
class ClauseResult:
    """How one clause fared: ``outcome`` and, unless it passed, ``message`` says why."""

    id: str
    title: str
    protocol: str
    capability: str | None
    outcome: Outcome
    message: str = ""
    duration: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every field."""
        return attrs.asdict(self)


@attrs.frozen
class Report:
    """The result of :func:`agentlooptest.certify`.

    ``ok`` is true when no clause failed and at least one passed (skipped
    clauses cover capabilities the store does not have). ``level`` names what was certified, e.g.
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
        """Whether every clause that ran passed, and at least one ran."""
        return not self.failed and bool(self.passed)

    @property
    def passed(self) -> tuple[ClauseResult, ...]:
        """The clauses that passed."""
        return tuple(r for r in self.results if r.outcome == "passed")

    @property
    def failed(self) -> tuple[ClauseResult, ...]:
        """The clauses that failed."""
        return tuple(r for r in self.results if r.outcome == "failed")

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
        counts = (
            f"{len(self.passed)} passed, {len(self.failed)} failed, "
            f"{len(self.skipped)} skipped in {self.duration:.1f}s"
        )
        if not self.failed and not self.passed:
            return f"NOTHING CERTIFIED: every selected clause was skipped: {counts}"
        if self.ok and self.pattern:
            return f"PASSED the clauses matching {self.pattern!r} (a partial run): {counts}"
        if self.ok:
            return f"CERTIFIED ({self.level}): {counts}"
        ids = ", ".join(r.id for r in self.failed[:5])
        more = f" and {len(self.failed) - 5} more" if len(self.failed) > 5 else ""
        return f"NOT CERTIFIED: {counts}; broken: {ids}{more}"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict, the shape the README's "Report formats" documents.

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
            skipped=str(len(self.skipped)),
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
        return suite


# XML 1.0 cannot carry these at all, not even as character references.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _xml_text(text: str) -> str:
    """``text`` with the characters XML 1.0 forbids written as ``\\xNN`` escapes.

    Failure messages quote what a store returned, NUL and control characters included.
    """
    return _NOT_XML.sub(lambda m: ascii(m.group())[1:-1], text)
