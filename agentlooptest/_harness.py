"""What the contract runs against: the ``Harness``, the stores it opens, and its cleanup.

:class:`Harness` is how a store's author tells the contract to open, prepare
and reopen the stores under test. The rest opens them for a clause (a fresh
store per :func:`open_steps` / :func:`open_sessions`, closed on the way out),
probes what they can do (:func:`probe`, :func:`skip_reason`) and runs the
harness's ``cleanup`` after each clause (:func:`run_cleanup`).
"""

from __future__ import annotations

import asyncio
import difflib
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from datetime import datetime
from functools import partial
from typing import Any

import anyio
import attrs

from agentloop import RunStep, SessionStore, StepStore, SupportsAclose, SupportsLease
from agentloop._shared import preview
from agentlooptest._cancel import SpuriousCancel, spurious_cancel
from agentlooptest._clause import (
    CAPABILITIES,
    REOPEN,
    Clause,
    Violation,
    first_in_group,
    registered,
)
from agentlooptest._stall import Hung, StoreSpun, stall_violation, watched

StoreFactory = Callable[[], Awaitable[Any]]
"""A zero-argument async callable returning a fresh, empty store."""

EnsureSession = Callable[[Any, str], Awaitable[None]]
"""``async (step_store, session_id) -> None``: make appends to ``session_id`` legal."""

Reopen = Callable[[Any], Awaitable[Any]]
"""``async (store) -> store``: a second handle onto the same backend."""

Cleanup = Callable[[], Awaitable[None]]
"""``async () -> None``: remove what the stores opened so far left in a shared backend."""

Clock = Callable[[], datetime]
"""A zero-argument callable returning the time, a timezone-aware ``datetime``."""

ClockedFactory = Callable[[Clock], Awaitable[Any]]
"""``async (clock) -> store``: a fresh, empty session store reading the time from ``clock``."""

CLOCKED_FAMILY = "session.lease-clock"
"""The clauses that need ``Harness.new_session_store_with_clock`` (skipped without it)."""


def is_async_callable(value: object) -> bool:
    """Whether calling ``value`` is known to return a coroutine.

    An ``async def`` function or method, a ``functools.partial`` of one, or an
    object whose ``__call__`` is ``async def``. A class or a plain function is
    not, even one that returns an awaitable: that cannot be told without
    calling it.
    """
    if inspect.isclass(value) or not callable(value):
        return False
    if inspect.iscoroutinefunction(value):
        return True
    return inspect.iscoroutinefunction(type(value).__call__)


def _optional_callable(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is None or is_async_callable(value):
        return
    if not callable(value):
        raise TypeError(f"{attribute.name} must be an async callable or None, got {preview(value)}")
    kind = "a class" if inspect.isclass(value) else "a plain (sync) callable"
    raise TypeError(
        f"{attribute.name} must be an async callable or None, got {preview(value)}: {kind}; "
        f"write it as `async def {attribute.name}(...): ...` "
        "(the contract awaits what it returns)"
    )


def _copied(value: Any) -> Any:
    """A mapping as a dict of its own, so a later change to the caller's has no effect."""
    return dict(value) if isinstance(value, Mapping) else value


def _expected_failures(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, Mapping):
        raise TypeError(
            f"expected_failures must be a mapping of clause id -> reason, got {preview(value)}"
        )
    known = {c.id for c in registered()}
    for clause_id, reason in value.items():
        if clause_id not in known:
            close = difflib.get_close_matches(str(clause_id), sorted(known), n=1)
            also = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(
                f"expected_failures names no clause of the contract: {clause_id!r}{also}; "
                "`agentlooptest clauses` lists their ids"
            )
        if not isinstance(reason, str) or not reason.strip():
            raise TypeError(
                f"expected_failures[{clause_id!r}] must be a non-empty reason (a str), "
                f"got {preview(reason)}"
            )


@attrs.frozen
class Harness:
    """Everything the contract needs to open, prepare and reopen the stores under test.

    ``new_step_store`` / ``new_session_store`` are zero-argument async callables
    returning a **fresh, empty** store each call (a new temporary database, a
    new schema, a truncated table...). Every clause opens its own stores and
    the contract ``aclose``s each one afterwards when it has ``aclose``. Either
    factory may be ``None``: only the other protocol is then certified. For a
    store that is both (one object, like the SQL stores), give both factories.

    ``ensure_session(step_store, session_id)`` is awaited before every append
    to ``session_id`` (so again after a ``delete_session`` removed the row),
    for stores whose steps need a session row first (a foreign key, with or
    without a cascading delete). It must be idempotent, also when two tasks
    call it for one id at once.

    ``reopen(store)`` returns a second handle onto the same backend as
    ``store`` (the same file, the same database). The durability clauses need
    it and are skipped, with that reason, when it is ``None``. The contract
    ``aclose``s the handle it returns unless it is ``store`` itself.

    ``cleanup()`` is awaited after each clause, once every store the clause
    opened is closed, whether the clause passed, failed or was cancelled; and
    once more when :func:`agentlooptest.certify` ends (also when it is
    interrupted). It removes what those stores left behind in a shared
    backend (their keys, schemas or files) so a failing or killed run leaves
    nothing. It is shielded from cancellation and bounded: it may take up to
    30 seconds. A cleanup that raises fails the clause it follows, saying so.

    ``new_session_store_with_clock(clock)`` is optional, for a store that
    accepts a clock: it returns a fresh, empty session store (with leases)
    that reads the time only from ``clock()``, a zero-argument callable the
    contract controls, returning an aware ``datetime``. With it the
    ``session.lease-clock.*`` clauses check lease expiry at its exact
    boundaries (expired at ``expires_at`` exactly, renewals counted from now);
    without it they are skipped, saying so.

    ``expected_failures`` maps clause ids to a reason: known divergences an
    author certifies with while tracking them. A listed clause that fails is
    reported as an expected failure (outcome ``"xfailed"``, its message kept,
    the reason shown), which does not fail the report; a listed clause that
    passes fails, "expected to fail but passed", so the list cannot go
    stale. A listed clause that is skipped stays skipped.

    Every field is checked at construction: an ``async def`` function or
    method, a ``functools.partial`` of one, or an object with an ``async def
    __call__``. A class or a plain function (even one returning an awaitable,
    like ``lambda: open_store()``) is refused: write an ``async def``.

    Raises:
        TypeError: a field is neither an async callable nor ``None``, both
            factories are ``None``, or ``expected_failures`` is not a mapping of
            clause ids to non-empty reasons.
        ValueError: ``expected_failures`` names a clause the contract does not have.
    """

    new_step_store: StoreFactory | None = attrs.field(
        default=None, validator=_optional_callable, kw_only=True
    )
    new_session_store: StoreFactory | None = attrs.field(
        default=None, validator=_optional_callable, kw_only=True
    )
    ensure_session: EnsureSession | None = attrs.field(
        default=None, validator=_optional_callable, kw_only=True
    )
    reopen: Reopen | None = attrs.field(default=None, validator=_optional_callable, kw_only=True)
    cleanup: Cleanup | None = attrs.field(default=None, validator=_optional_callable, kw_only=True)
    new_session_store_with_clock: ClockedFactory | None = attrs.field(
        default=None, validator=_optional_callable, kw_only=True
    )
    expected_failures: Mapping[str, str] = attrs.field(
        factory=dict,
        converter=_copied,
        validator=_expected_failures,
        kw_only=True,
        hash=False,
    )

    def __attrs_post_init__(self) -> None:
        if self.new_step_store is None and self.new_session_store is None:
            raise TypeError("Harness needs new_step_store, new_session_store or both; got neither")


async def _memory_steps() -> object:
    from agentloopmem import StepStore

    return StepStore()


async def _memory_sessions() -> object:
    from agentloopmem import SessionStore

    return SessionStore()


async def _memory_sessions_on(clock: Clock) -> object:
    from agentloopmem import SessionStore

    return SessionStore(clock)


def memory_harness() -> Harness:
    """A ``Harness`` for the ``agentloopmem`` stores (no ``reopen``: nothing outlives a store).

    Their sessions store takes the contract's clock too, so lease expiry is
    checked at its exact boundaries.
    """
    return Harness(
        new_step_store=_memory_steps,
        new_session_store=_memory_sessions,
        new_session_store_with_clock=_memory_sessions_on,
    )


async def _memory_store() -> object:
    from agentloopmem import MemoryStore

    return MemoryStore()


async def _memory_store_on(clock: Clock) -> object:
    from agentloopmem import MemoryStore

    return MemoryStore(clock)


def memory_store_harness() -> Harness:
    """A ``Harness`` for ``agentloopmem.MemoryStore``: one object for both protocols, so the
    one-object clauses (forks, whole-session deletes) run too; no ``reopen``. It takes the
    contract's clock, so lease expiry is checked at its exact boundaries."""
    return Harness(
        new_step_store=_memory_store,
        new_session_store=_memory_store,
        new_session_store_with_clock=_memory_store_on,
    )


CLOSE_TIMEOUT = 30.0
"""Seconds ``aclose`` may take before the contract gives up on it."""


class Steps:
    """A step store under test, with ``append`` calling ``ensure_session`` first, every time.

    Every append of a clause goes through :meth:`append` (or, for a call that
    is cancelled or raced on purpose, follows :meth:`ensure` for its id), so a
    store whose steps need a session row gets one again after a
    ``delete_session`` removed it (a foreign key with cascading delete).
    """

    def __init__(self, harness: Harness, store: Any) -> None:
        self.harness = harness
        self.store = store

    async def ensure(self, session_id: str) -> None:
        """Run the harness's ``ensure_session`` for ``session_id`` (it is idempotent)."""
        if self.harness.ensure_session is not None:
            await self.harness.ensure_session(self.store, session_id)

    async def append(self, step: RunStep) -> None:
        """Append ``step`` after making its session legal."""
        await self.ensure(step.session_id)
        await self.store.append(step)

    async def append_all(self, steps: list[RunStep]) -> None:
        """Append each of ``steps``, one after another."""
        for step in steps:
            await self.append(step)

    async def last_n(self, session_id: str, n: int) -> list[RunStep]:
        """``store.last_n``, typed."""
        result: list[RunStep] = await self.store.last_n(session_id, n)
        return result


async def aclose_quietly(store: object) -> None:
    """``aclose`` ``store`` if it can, shielded and bounded, whatever happened before."""
    if isinstance(store, SupportsAclose):
        with anyio.CancelScope(shield=True), anyio.move_on_after(CLOSE_TIMEOUT):
            await store.aclose()


async def _new(factory: StoreFactory | None, what: str, protocol: type) -> Any:
    if factory is None:
        raise RuntimeError(f"the harness has no {what} factory")  # callers check first
    made = factory()
    if not inspect.isawaitable(made):
        await aclose_quietly(made)
        raise Violation(
            f"called the harness's {what} factory",
            "an awaitable: factories are zero-argument async callables "
            "(`async def new_store(): return MyStore()`)",
            f"{made!r:.200} returned directly: a plain (sync) callable",
            "the contract awaits the factory for every store it opens",
        )
    store = await made
    if not isinstance(store, protocol):
        await aclose_quietly(store)
        raise Violation(
            f"called the harness's {what} factory",
            f"a {protocol.__name__} (methods {_methods(protocol)})",
            f"{store!r}",
            "the loop calls these methods on every run; a store without them cannot be used",
        )
    return store


def _methods(protocol: type) -> str:
    names = [n for n in vars(protocol) if not n.startswith("_")]
    return ", ".join(names)


@asynccontextmanager
async def open_steps(harness: Harness) -> AsyncIterator[Steps]:
    """A fresh step store from the harness, closed on the way out."""
    store = await _new(harness.new_step_store, "new_step_store", StepStore)
    try:
        yield Steps(harness, store)
    finally:
        await aclose_quietly(store)


@asynccontextmanager
async def open_sessions(harness: Harness) -> AsyncIterator[Any]:
    """A fresh session store from the harness, closed on the way out."""
    store = await _new(harness.new_session_store, "new_session_store", SessionStore)
    try:
        yield store
    finally:
        await aclose_quietly(store)


@asynccontextmanager
async def open_clocked(harness: Harness, clock: Clock) -> AsyncIterator[Any]:
    """A fresh session store reading ``clock``, from the harness, closed on the way out."""
    factory = harness.new_session_store_with_clock
    if factory is None:
        raise RuntimeError("the harness has no new_session_store_with_clock")  # callers check
    store = await _new(partial(factory, clock), "new_session_store_with_clock", SessionStore)
    try:
        if not isinstance(store, SupportsLease):
            raise Violation(
                "called the harness's new_session_store_with_clock",
                "a store with leases (agentloop.SupportsLease): the clock is for lease expiry",
                f"{store!r:.200}",
                "the lease-clock clauses check leases against the contract's clock",
            )
        yield store
    finally:
        await aclose_quietly(store)


@asynccontextmanager
async def reopened(harness: Harness, store: object) -> AsyncIterator[Any]:
    """A second handle onto ``store``'s backend, closed on the way out unless it is ``store``."""
    if harness.reopen is None:
        raise RuntimeError("the harness has no reopen")  # callers check first
    other = await harness.reopen(store)
    try:
        yield other
    finally:
        if other is not store:
            await aclose_quietly(other)


async def probe(harness: Harness, protocol: str, *, clause_timeout: float) -> frozenset[str]:
    """The optional capabilities of a store the ``protocol`` factory returns.

    Opening (and closing) the store may take up to ``clause_timeout`` seconds.

    Raises:
        Violation: the factory returned something that is not the protocol, is
            not async, or did not return (or the store did not close) in time.
        SpuriousCancel: the factory (or the store's ``aclose``) raised
            ``CancelledError`` although nothing cancelled it (asyncio).
    """
    what = "new_step_store" if protocol == "step" else "new_session_store"
    try:
        with watched(clause_timeout):
            if protocol == "step":
                async with open_steps(harness) as steps:
                    store = steps.store
                    return frozenset(n for n, p in CAPABILITIES.items() if isinstance(store, p))
            async with open_sessions(harness) as store:
                return frozenset(n for n, p in CAPABILITIES.items() if isinstance(store, p))
    except Hung:
        raise Violation(
            f"called the harness's {what} factory to open a store",
            f"a store within {clause_timeout:g}s",
            "it was still running: the factory never returned (a database it waits for?)",
            "every clause opens a store this way; none of them can run",
        ) from None
    except StoreSpun as spun:
        stalled = stall_violation(spun, clause_timeout, spun=True)
        raise Violation(
            f"called the harness's {what} factory to open (and close) a store",
            stalled.expected,
            stalled.got,
            "every clause opens a store this way; none of them can run",
            hint=stalled.hint,
        ) from None
    except BaseExceptionGroup as group:  # a factory's own nursery
        found = first_in_group(group, StoreSpun)
        if found is None:
            raise
        raise Violation(
            f"called the harness's {what} factory to open (and close) a store",
            f"a store within {clause_timeout:g}s",
            stall_violation(found, clause_timeout, spun=True).got,
            "every clause opens a store this way; none of them can run",
        ) from None
    except asyncio.CancelledError as exc:
        error: SpuriousCancel | None = spurious_cancel(exc)
        if error is None:
            raise
        raise error from exc


def skip_reason(clause: Clause, harness: Harness, capabilities: frozenset[str]) -> str | None:
    """Why ``clause`` cannot run against this harness and store, or ``None`` when it can."""
    if clause.protocol == "step" and harness.new_step_store is None:
        return "no new_step_store in the harness: the StepStore protocol is not certified"
    if clause.protocol == "session" and harness.new_session_store is None:
        return "no new_session_store in the harness: the SessionStore protocol is not certified"
    if clause.id.startswith(CLOCKED_FAMILY + ".") and harness.new_session_store_with_clock is None:
        return (
            "no new_session_store_with_clock in the harness (a store whose leases read a "
            "clock the contract sets): expiry to the microsecond is not checked; the other "
            "lease clauses check it with real waits"
        )
    if clause.capability == REOPEN:
        if harness.reopen is None:
            return "no reopen in the harness: durability across handles is not checked"
        return None
    if clause.capability == "combined" and "combined" not in capabilities:
        return "the session store is not also a StepStore: the one-object clauses do not apply"
    if clause.capability == "lease" and "lease" not in capabilities:
        return "the store has no leases (agentloop.SupportsLease): optional capability"
    if clause.capability is not None and clause.capability not in capabilities:
        proto = CAPABILITIES[clause.capability].__name__
        return f"the store has no {clause.capability}() (agentloop.{proto}): optional capability"
    return None


CLEANUP_TIMEOUT = 30.0
"""Seconds the harness's ``cleanup`` may take before the contract gives up on it."""


async def run_cleanup(harness: Harness) -> str | None:
    """Await ``harness.cleanup()`` if there is one, even in a cancelled scope.

    Returns ``None`` when it finished, else one line saying how it failed
    (raised, hung or spun past :data:`CLEANUP_TIMEOUT`).
    """
    if harness.cleanup is None:
        return None
    try:
        with anyio.CancelScope(shield=True), watched(CLEANUP_TIMEOUT):
            await harness.cleanup()
    except (Hung, StoreSpun):
        return f"the harness's cleanup() did not finish within {CLEANUP_TIMEOUT:g}s"
    except BaseException as exc:
        if isinstance(exc, Exception):
            return f"the harness's cleanup() raised {type(exc).__name__}: {exc}"
        if spurious_cancel(exc) is None:
            raise
        return "the harness's cleanup() raised CancelledError, although nothing cancelled it"
    return None
