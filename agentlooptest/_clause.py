"""A clause: one promise a store makes to the loop, the check that proves it, and how it fails.

A check raises :class:`Violation` (usually through :func:`expect`) saying what
it did, what it expected and what came back; :func:`format_violation` turns
that into the failure message every front door shows. :func:`clause`
declares a check as a clause; the clause modules under ``_clauses/`` use it,
and ``agentlooptest._clauses`` orders what they declared into ``CLAUSES``.
"""

from __future__ import annotations

import contextlib
import inspect
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Literal, TypeVar

import attrs

from agentloop import (
    StepStore,
    StoreClosedError,
    SupportsAclose,
    SupportsAll,
    SupportsAppendMany,
    SupportsDeleteSession,
    SupportsExpire,
    SupportsFinal,
    SupportsFork,
    SupportsGetMany,
    SupportsLabels,
    SupportsLease,
    SupportsListSessions,
    SupportsPaging,
    SupportsPrune,
    SupportsPut,
    SupportsRestore,
    SupportsRevisions,
    SupportsStepsAfter,
)

E = TypeVar("E", bound=BaseException)

Protocol = Literal["step", "session"]
"""Which store a clause certifies: the ``StepStore`` or the ``SessionStore``."""

CAPABILITIES: dict[str, type] = {
    "put": SupportsPut,
    "final": SupportsFinal,
    "all": SupportsAll,
    "append_many": SupportsAppendMany,
    "get_many": SupportsGetMany,
    "revisions": SupportsRevisions,
    "list_sessions": SupportsListSessions,
    "delete_session": SupportsDeleteSession,
    "aclose": SupportsAclose,
    "combined": StepStore,
    "lease": SupportsLease,
    "page_sessions": SupportsPaging,
    "set_labels": SupportsLabels,
    "prune_steps": SupportsPrune,
    "steps_after": SupportsStepsAfter,
    "expire_sessions": SupportsExpire,
    "fork_session": SupportsFork,
    "restore_session": SupportsRestore,
}
"""Optional store capabilities, by name, and the protocol that detects each.

``combined`` is a session store that is a ``StepStore`` too (one object for
both, like the SQL stores): one session's steps, data and summary then live
together. ``lease`` is a session store that grants session leases and fenced
views (``acquire_lease``, ``renew_lease``, ``release_lease``, ``fenced``).
The session lifecycle's capabilities are named after their method
(``page_sessions`` for ``SupportsPaging``, ``prune_steps`` for ``SupportsPrune``...).
"""

REOPEN = "reopen"
"""The pseudo-capability of durability clauses: the harness must give ``reopen``."""

Check = Callable[[Any], Awaitable[None]]
"""A clause's check: awaited with the :class:`~agentlooptest.Harness` under test.

Typed ``Any`` here because the harness's module builds on this one (it raises
:class:`Violation`), and a module never imports one that imports it back.
"""

_SOURCE_ROOT = Path(__file__).resolve().parent.parent

_ID = re.compile(r"^(step|session)(\.[a-z0-9]+(-[a-z0-9]+)*)+$")


@attrs.frozen
class Clause:
    """One promise: a stable dotted ``id``, a one-line ``title``, and its ``check``.

    ``capability`` is ``None`` for the base protocol, the name of an optional
    capability (a key of :data:`CAPABILITIES`) or ``"reopen"``; a store
    without it has the clause skipped, with that reason. ``why`` is what
    breaks in the loop when the promise does; every failure message ends
    with it. ``check(harness)`` raises :class:`Violation` when the store
    breaks the promise. ``hint`` is the usual cause of a failure, when one is
    known; the failure message's last line says it.
    """

    id: str
    title: str
    protocol: Protocol
    capability: str | None
    why: str
    check: Check = attrs.field(repr=False, eq=False)
    hint: str = attrs.field(default="", kw_only=True)

    def __attrs_post_init__(self) -> None:
        if not _ID.match(self.id) or not self.id.startswith(self.protocol + "."):
            raise ValueError(f"clause id must be '{self.protocol}.<dotted-kebab>', got {self.id!r}")
        if self.capability not in (None, REOPEN, *CAPABILITIES):
            raise ValueError(f"unknown capability {self.capability!r} for clause {self.id!r}")

    @property
    def test_name(self) -> str:
        """The pytest method name: ``test_`` and the id with ``.``/``-`` as ``_``."""
        return "test_" + re.sub(r"[.-]", "_", self.id)

    @property
    def where(self) -> str:
        """``file:line`` of the check's ``@clause(`` line, the path from the package's parent.

        A check defined outside the directory holding ``agentlooptest`` keeps
        its absolute path.
        """
        code = inspect.unwrap(self.check).__code__
        path = Path(code.co_filename)
        with contextlib.suppress(ValueError):
            path = path.relative_to(_SOURCE_ROOT)
        return f"{path.as_posix()}:{code.co_firstlineno}"


class Violation(Exception):
    """A store broke a clause: what was done, what was expected, what came back.

    ``why`` overrides the clause's own consequence when one check covers
    several; ``hint`` (the usual cause of this failure) overrides the clause's.
    """

    def __init__(
        self, did: str, expected: str, got: str, why: str | None = None, *, hint: str = ""
    ) -> None:
        super().__init__(did, expected, got, why)
        self.did = did
        self.expected = expected
        self.got = got
        self.why = why
        self.hint = hint


def expect(
    condition: bool,
    *,
    did: str,
    expected: str,
    got: object,
    why: str | None = None,
    hint: str = "",
) -> None:
    """Raise :class:`Violation` unless ``condition`` (``got`` is shown as ``repr`` unless a str)."""
    if not condition:
        raise Violation(did, expected, got if isinstance(got, str) else _show(got), why, hint=hint)


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 600 else f"{text[:600]}... ({len(text)} chars)"


async def expect_refused(
    did: str, call: Callable[[], Awaitable[object]], *errors: type[Exception]
) -> None:
    """Await ``call`` and raise :class:`Violation` unless it raises one of ``errors``."""
    names = " or ".join(e.__name__ for e in errors)
    try:
        got = await call()
    except errors:
        return
    except Exception as exc:
        raise Violation(did, names, f"{type(exc).__name__}: {exc}") from None
    raise Violation(did, names, f"no error; it returned {_show(got)}")


async def expect_closed(what: str, call: Callable[[], Awaitable[object]]) -> None:
    """Await ``call`` on a closed store; a Violation unless it raises ``StoreClosedError``."""
    await expect_refused(
        f"closed the store with aclose(), then called {what}", call, StoreClosedError
    )


def format_violation(clause: Clause, violation: Violation) -> str:
    """The failure message: clause id and title, did / expected / got / why, and a hint.

    The ``hint:`` line (the usual cause) is there when the violation or the
    clause knows one.
    """
    hint = violation.hint or clause.hint
    return (
        f"[{clause.id}] {clause.title}\n"
        f"  did:      {violation.did}\n"
        f"  expected: {violation.expected}\n"
        f"  got:      {violation.got}\n"
        f"  why:      {violation.why or clause.why}" + (f"\n  hint:     {hint}" if hint else "")
    )


def first_in_group(group: BaseExceptionGroup[BaseException], kind: type[E]) -> E | None:
    """The first exception of ``kind`` in a (nested) exception group from a nursery."""
    for exc in group.exceptions:
        if isinstance(exc, kind):
            return exc
        if isinstance(exc, BaseExceptionGroup):
            found = first_in_group(exc, kind)
            if found is not None:
                return found
    return None


_REGISTRY: list[Clause] = []


def clause(
    id: str,
    title: str,
    *,
    why: str,
    capability: str | None = None,
    hint: str = "",
) -> Callable[[Check], Check]:
    """Register the decorated check as a clause, in definition order.

    Raises:
        ValueError: the id is malformed or taken, or the capability unknown.
    """

    def register(check: Check) -> Check:
        protocol: Protocol = "step" if id.startswith("step.") else "session"
        if any(c.id == id for c in _REGISTRY):
            raise ValueError(f"duplicate clause id {id!r}")
        _REGISTRY.append(Clause(id, title, protocol, capability, why, check, hint=hint))
        return check

    return register


def registered() -> tuple[Clause, ...]:
    """Every clause registered so far, in registration order."""
    return tuple(_REGISTRY)
