"""Front door 3: ``agentlooptest certify [TARGET]``, a table, a level and a verdict.

``TARGET`` (``module:attr``) is resolved to a ``Harness`` here (:func:`load`);
without one, the built-in stores are certified (:func:`builtin_targets`).
``agentlooptest clauses`` lists the clauses (``--where``: each one's pytest
test name and the ``file:line`` of its check).

Exit status: 0 when every clause that applies passed, 1 when one failed,
2 for a usage error or a target that cannot be loaded.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import os
import shutil
import sys
from pathlib import Path
from typing import TextIO
from xml.etree import ElementTree

import anyio

from agentloop._shared import check_seconds
from agentlooptest._backends import BACKENDS, run_in
from agentlooptest._cancel import spurious_cancel
from agentlooptest._certify import (
    CLAUSE_TIMEOUT,
    REPORT_VERSION,
    ClauseResult,
    Report,
    certify,
    matches,
)
from agentlooptest._clause import Clause
from agentlooptest._clauses import CLAUSES
from agentlooptest._harness import Harness

PG_DSN_VARIABLE = "AGENTLOOP_PG_DSN"

BUILTIN_NAMES = (
    "agentloopmem",
    "agentloopmem-combined",
    "sqlite",
    f"postgres (when {PG_DSN_VARIABLE} is set)",
)
"""How ``--help`` names what ``agentlooptest certify`` runs when given no target."""


def builtin_targets() -> dict[str, str]:
    """The targets ``agentlooptest certify`` runs when given none, by name.

    The in-memory stores (apart, and the one-object ``MemoryStore``) and a
    ``SqliteStore`` on a temporary file always; a ``PostgresStore`` in a
    throw-away schema when ``AGENTLOOP_PG_DSN`` is set.
    """
    targets = {
        "agentloopmem": "agentlooptest:memory_harness",
        "agentloopmem-combined": "agentlooptest:memory_store_harness",
        "sqlite": "agentloopsql.testing:sqlite",
    }
    if os.environ.get(PG_DSN_VARIABLE):
        targets["postgres"] = "agentloopsql.testing:postgres"
    return targets


def skipped_builtins() -> dict[str, str]:
    """The built-in stores ``agentlooptest certify`` leaves out, by name, and why."""
    if not os.environ.get(PG_DSN_VARIABLE):
        return {
            "postgres": f"{PG_DSN_VARIABLE} is not set (set it to a PostgreSQL DSN, e.g. "
            "postgresql://postgres@127.0.0.1/test, to certify PostgresStore)"
        }
    return {}


class TargetError(Exception):
    """The target could not be loaded; the message is one line for the user."""


async def load(target: str) -> Harness:
    """Import ``module:attr`` and return the ``Harness`` it names or builds.

    ``attr`` (dotted for nested attributes) is a ``Harness`` or a
    zero-argument callable (sync or async) returning one. The current
    directory is importable, as it is for ``python -m``.

    Raises:
        TargetError: the target is malformed, cannot be imported (whatever its
            import raised, ``SystemExit`` included; never ``KeyboardInterrupt``),
            or is not a Harness.
    """
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise TargetError(f"target must look like 'module:attr', got {target!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except BaseException as exc:  # SystemExit from a module's top level too
        if _propagates(exc):
            raise
        raise TargetError(
            f"cannot import {module_name!r} for target {target!r}: {_one_line(exc)}"
        ) from exc
    value: object = module
    for part in attr.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise TargetError(
                f"{module_name!r} has no attribute {attr!r} (target {target!r})"
            ) from None
    if not isinstance(value, Harness):
        if not callable(value):
            raise TargetError(
                f"{target!r} is neither a Harness nor a callable returning one: {value!r:.80}"
            )
        try:
            value = value()
            if inspect.isawaitable(value):
                value = await value
        except BaseException as exc:
            if _propagates(exc):
                raise
            raise TargetError(f"calling {target!r} raised {_one_line(exc)}") from exc
    if not isinstance(value, Harness):
        raise TargetError(f"{target!r} must give an agentlooptest.Harness, got {value!r:.80}")
    return value


def _propagates(exc: BaseException) -> bool:
    """Whether ``exc`` ends the run: a ``KeyboardInterrupt`` or a real cancellation.

    A ``CancelledError`` raised although nothing cancelled the run is the
    target's own error (see ``_cancel``).
    """
    if isinstance(exc, KeyboardInterrupt):
        return True
    return isinstance(exc, anyio.get_cancelled_exc_class()) and spurious_cancel(exc) is None


def _one_line(exc: BaseException) -> str:
    """``Type: message`` on one line: a multi-line message is folded with `` / ``."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return type(exc).__name__ + (": " + " / ".join(lines) if lines else "")


_MARK = {
    "passed": "pass",
    "failed": "FAIL",
    "skipped": "skipped",
    "not run": "not run",
    "xfailed": "xfail",
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agentlooptest",
        description="Certify StepStore / SessionStore implementations against the contract.",
    )
    sub = parser.add_subparsers(dest="command")
    run = sub.add_parser("certify", help="run the contract against a store (the default command)")
    run.add_argument(
        "target",
        nargs="?",
        help="module:attr naming a Harness or a zero-argument callable returning one; "
        f"without it, the built-in stores ({', '.join(BUILTIN_NAMES)})",
    )
    run.add_argument(
        "--backend",
        choices=BACKENDS,
        default="trio",
        help="the event loop to run the contract in (default trio); a store built on "
        "asyncio (redis.asyncio, asyncpg...) is certified with --backend asyncio",
    )
    run.add_argument("--json", metavar="PATH", type=Path, help="write the report as JSON")
    run.add_argument("--junit-xml", metavar="PATH", type=Path, help="write the report as JUnit XML")
    run.add_argument(
        "-k",
        metavar="PATTERN",
        dest="pattern",
        help="only clauses whose id contains PATTERN (a glob if it has * ? [)",
    )
    run.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="print each clause as it finishes, with its title and time",
    )
    run.add_argument(
        "--clause-timeout",
        metavar="SECONDS",
        type=_seconds,
        default=CLAUSE_TIMEOUT,
        help=f"fail a clause still running after SECONDS as hung (default {CLAUSE_TIMEOUT:g})",
    )
    lst = sub.add_parser("clauses", help="list the clauses")
    lst.add_argument("--markdown", action="store_true", help="as a markdown table (as in the docs)")
    lst.add_argument(
        "--where",
        action="store_true",
        help="with each clause's pytest test name and the file:line of its check (in the "
        "module its family, the id's first two parts, lives in: step_all.py, lease.py, ...)",
    )
    lst.add_argument(
        "-k",
        metavar="PATTERN",
        dest="pattern",
        help="only clauses whose id contains PATTERN (a glob if it has * ? [); "
        "a PATTERN starting with test_ matches pytest test names instead",
    )
    return parser


def _seconds(text: str) -> float:
    """Seconds as ``check_seconds`` allows them, for argparse (its errors are usage errors)."""
    try:
        return check_seconds(float(text), "seconds")
    except ValueError as exc:  # not a number, or outside the rule
        # argparse names the option itself, so only the rule is kept from the message
        rule = str(exc).partition("seconds must ")[2].partition(", got")[0]
        raise argparse.ArgumentTypeError(
            f"must {rule or 'be a number of seconds'}, got {text!r}"
        ) from None


def _writable(path: Path | None, option: str) -> str | None:
    """Why the report cannot be written to ``path``, checked before the run; ``None`` if it can."""
    if path is None:
        return None
    existed = path.exists()
    try:
        with path.open("a", encoding="utf-8"):
            pass
    except OSError as exc:
        return f"cannot write {option} {str(path)!r}: {exc.strerror or exc}"
    if not existed:
        path.unlink()
    return None


def clause_table(clauses: tuple[Clause, ...] = CLAUSES) -> str:
    """The markdown table of clause ids, capability and title (docs/howto/certify.md carries it)."""
    lines = ["| clause | needs | promise |", "|---|---|---|"]
    for c in clauses:
        lines.append(f"| `{c.id}` | {c.capability or 'base'} | {c.title} |")
    return "\n".join(lines)


class _Progress:
    """One status line on a terminal, rewritten per clause; silent elsewhere."""

    def __init__(self, stream: TextIO, verbose: bool) -> None:
        self.stream = stream
        self.live = stream.isatty()
        self.verbose = verbose
        self.width = shutil.get_terminal_size().columns - 1

    def start(self, clause: Clause, i: int, total: int) -> None:
        if self.live:
            line = f"[{i + 1}/{total}] {clause.id} ..."
            self.stream.write("\r" + line[: self.width].ljust(self.width))
            self.stream.flush()

    def result(self, r: ClauseResult) -> None:
        if self.verbose:
            self.clear()
            self.stream.write(f"{_MARK[r.outcome]:7} {r.id} ({r.duration:.2f}s) {r.title}\n")
            self.stream.flush()

    def clear(self) -> None:
        if self.live:
            self.stream.write("\r" + " " * self.width + "\r")
            self.stream.flush()


def _reason(r: ClauseResult) -> str:
    if r.outcome == "skipped":
        return r.message
    if r.outcome == "not run":
        return r.message.splitlines()[-1].strip() if r.message else ""
    if r.outcome == "xfailed":
        return f"expected failure: {r.expected_failure}"
    if r.outcome == "failed":
        for line in r.message.splitlines():
            if line.strip().startswith(("got:", "the store raised")):
                return line.strip()
        return r.message.splitlines()[0] if r.message else ""
    return ""


def render(name: str, report: Report, width: int = 120) -> str:
    """The table of results, the failures in full, the conformance level and the verdict."""
    id_width = max([len(r.id) for r in report.results] + [6])
    rows = [f"{'clause':{id_width}}  {'result':7}  reason", f"{'-' * id_width}  -------  ------"]
    for r in report.results:
        reason = _reason(r)
        room = max(width - id_width - 11, 20)
        if len(reason) > room:
            reason = reason[: room - 3] + "..."
        rows.append(f"{r.id:{id_width}}  {_MARK[r.outcome]:7}  {reason}".rstrip())
    out = [f"agentlooptest certify {name}", "", *rows, ""]
    if report.failed:
        out.append("failures:")
        for r in report.failed:
            out += ["", r.message]
        out.append("")
    if report.xfailed:
        out.append("expected failures (the harness's known divergences):")
        out += [f"  {r.id}: {r.expected_failure}" for r in report.xfailed]
        out.append("")
    out += [f"note: {note}" for note in report.notes]
    out += [f"conformance level: {report.level}", report.verdict]
    return "\n".join(out)


async def _run(args: argparse.Namespace) -> int:
    for path, option in ((args.json, "--json"), (args.junit_xml, "--junit-xml")):
        problem = _writable(path, option)
        if problem is not None:
            print(f"agentlooptest: {problem}", file=sys.stderr)
            return 2
    targets = {args.target: args.target} if args.target else builtin_targets()
    harnesses = {}
    for name, target in targets.items():
        try:
            harnesses[name] = await load(target)
        except TargetError as exc:
            print(f"agentlooptest: {exc}", file=sys.stderr)
            return 2
    if args.pattern and not any(matches(c, args.pattern) for c in CLAUSES):
        print(f"agentlooptest: no clause id matches -k {args.pattern!r}", file=sys.stderr)
        return 2
    for name, why in ({} if args.target else skipped_builtins()).items():
        print(f"skipped {name}: {why}\n")
    reports: dict[str, Report] = {}
    width = shutil.get_terminal_size().columns if sys.stdout.isatty() else 160
    for name, harness in harnesses.items():
        progress = _Progress(sys.stderr, args.verbose)
        on = "" if args.backend == "trio" else f" under {args.backend}"
        print(f"certifying {name}{on} ...", file=sys.stderr, flush=True)
        report = await certify(
            harness,
            pattern=args.pattern,
            on_start=progress.start,
            on_result=progress.result,
            clause_timeout=args.clause_timeout,
        )
        progress.clear()
        reports[name] = report
        print(render(name, report, width))
        print()
    ok = all(r.ok for r in reports.values())
    if args.json:
        doc = {
            "version": REPORT_VERSION,
            "ok": ok,
            "targets": [{"target": n, **r.to_dict()} for n, r in reports.items()],
        }
        args.json.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    if args.junit_xml:
        root = ElementTree.Element("testsuites")
        for n, r in reports.items():
            root.append(r.junit_suite(n))
        args.junit_xml.write_text(
            ElementTree.tostring(root, encoding="unicode", xml_declaration=True) + "\n",
            encoding="utf-8",
        )
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit status."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in ("certify", "clauses", "-h", "--help"):
        argv = ["certify", *argv]  # certify is the default command
    args = _parser().parse_args(argv)
    if args.command == "clauses":
        chosen = tuple(c for c in CLAUSES if matches(c, args.pattern))
        if args.pattern and not chosen:
            print(f"agentlooptest: no clause matches -k {args.pattern!r}", file=sys.stderr)
            return 2
        if args.markdown:
            print(clause_table(chosen))
        elif args.where:
            for c in chosen:
                print(f"{c.id:40} {c.test_name:45} {c.where}")
        else:
            for c in chosen:
                print(f"{c.id:40} {c.capability or 'base':15} {c.title}")
        return 0
    return run_in(args.backend, _run, args)
