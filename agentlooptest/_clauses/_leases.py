"""Helpers of the lease families (``session.lease.*``, ``session.fenced.*``); not a clause module.

Expiry happens on the store's clock, in real time: the clauses take leases
with :data:`SHORT_TTL`, wait past it with :func:`outlive` and then poll for
the takeover for up to :data:`TAKEOVER_WAIT`, so a store whose clock runs a
little behind ours (a database server's) still passes.
"""

from __future__ import annotations

import itertools
import json
import time
from typing import Any, cast

import anyio

from agentloop import Lease, Session, SessionInfo, StepStore, SupportsRevisions
from agentlooptest._clause import Violation, expect

SHORT_TTL = 0.2
"""Seconds a lease the clauses mean to see expire is taken for."""

LONG_TTL = 30.0
"""Seconds a lease the clauses mean to stay live is taken for (no clause runs that long)."""

TAKEOVER_WAIT = 2.0
"""Seconds past :data:`SHORT_TTL` a takeover may keep returning ``None`` (clock skew)."""

_owners = itertools.count()


def fresh_owner(role: str) -> str:
    """An owner name no other call of this process used (the loop makes one per run)."""
    return f"{role}-{next(_owners)}"


async def real_sleep(seconds: float) -> None:
    """Sleep ``seconds`` of wall-clock time, whatever the loop's clock (leases expire in it)."""
    deadline = time.monotonic() + seconds
    await anyio.sleep(seconds)
    left = deadline - time.monotonic()
    if left > 0:  # trio runs on a fake clock (MockClock): the store's clock has not moved
        await anyio.to_thread.run_sync(time.sleep, left)


async def outlive() -> None:
    """Wait until every lease taken with :data:`SHORT_TTL` before the call has expired."""
    await real_sleep(SHORT_TTL + 0.05)


def expect_lease(got: object, session_id: str, owner: str, did: str) -> Lease:
    """``got`` must be a ``Lease`` of ``session_id`` for ``owner``; returns it."""
    expect(
        isinstance(got, Lease) and got.session_id == session_id and got.owner == owner,
        did=did,
        expected=f"a Lease(session_id={session_id!r}, owner={owner!r}, ...)",
        got=got,
    )
    return cast("Lease", got)


async def acquire(store: Any, session_id: str, owner: str, ttl: float, did: str) -> Lease:
    """``acquire_lease`` on a lease that must be free: the granted ``Lease``."""
    got = await store.acquire_lease(session_id, owner, ttl)
    if got is None:
        raise Violation(
            did,
            f"a Lease for {owner!r}: no live lease of {session_id!r} is held by another owner",
            "None (the store says another owner holds a live lease)",
            "a free session that cannot be leased blocks every run of it until the TTL "
            "of a lease nobody holds",
        )
    return expect_lease(got, session_id, owner, did)


async def take_over(
    store: Any,
    session_id: str,
    owner: str,
    did: str,
    *,
    got: str = "expiry is ignored",
    why: str = (
        "a crashed or paused holder keeps the session locked forever; no later run of it can start"
    ),
) -> Lease:
    """Acquire ``session_id``'s expired lease for ``owner``, polling up to :data:`TAKEOVER_WAIT`.

    ``got`` and ``why`` say what a lease that never frees means where it is called.
    """
    deadline = time.monotonic() + TAKEOVER_WAIT
    while (lease := await store.acquire_lease(session_id, owner, LONG_TTL)) is None:
        if time.monotonic() > deadline:
            raise Violation(
                did,
                f"a Lease for {owner!r}: the last lease expired {SHORT_TTL:g}s after it "
                "was taken and nobody renewed it",
                f"None for {SHORT_TTL + 0.05 + TAKEOVER_WAIT:g}s after that lease was taken: {got}",
                why,
            )
        await real_sleep(0.02)
    return expect_lease(lease, session_id, owner, did)


async def expect_held(store: Any, session_id: str, did: str, why: str | None = None) -> None:
    """A new owner's ``acquire_lease`` must return ``None``: the lease is live and held."""
    prober = fresh_owner("prober")
    got = await store.acquire_lease(session_id, prober, LONG_TTL)
    expect(
        got is None,
        did=f"{did}, then acquire_lease({session_id!r}, {prober!r}) by another owner",
        expected="None: the lease is live and held by someone else",
        got=got,
        why=why,
    )


async def expect_free(store: Any, session_id: str, did: str, why: str) -> Lease:
    """A new owner's ``acquire_lease`` must succeed at once; returns (and keeps) its lease."""
    prober = fresh_owner("prober")
    got = await store.acquire_lease(session_id, prober, LONG_TTL)
    expect(
        got is not None,
        did=f"{did}, then acquire_lease({session_id!r}, {prober!r}) by another owner",
        expected=f"a Lease for {prober!r}: nobody holds the lease",
        got=got,
        why=why,
    )
    return expect_lease(got, session_id, prober, did)


def expect_larger(newer: Lease, older: Lease, did: str) -> None:
    """``newer.token`` must be strictly larger than ``older.token``."""
    expect(
        newer.token > older.token,
        did=did,
        expected=f"a token larger than {older.token} (the earlier lease's)",
        got=f"token {newer.token}",
        why=(
            "a fencing token that does not grow cannot tell the new holder's writes "
            "from the old holder's: a paused worker's late writes pass the fence"
        ),
    )


async def listing(store: Any) -> list[tuple[object, ...]]:
    """Every ``list_sessions`` row (all fields) in order; ``[]`` without the capability."""
    if not hasattr(store, "list_sessions"):
        return []
    rows: list[SessionInfo] = await store.list_sessions(limit=1000)
    return [(r.id, r.status, r.step_count, r.created_at, r.updated_at) for r in rows]


async def session_state(store: Any, sid: str, steps: Any = None) -> dict[str, object]:
    """What a plain handle shows of ``sid``: ``exists``, ``get``, ``final``, its revision, steps.

    The steps are read from ``steps`` (reads are never fenced), else from
    ``store`` when it is a ``StepStore`` too.
    """
    got: Session = await store.get(sid)
    state: dict[str, object] = {
        "exists": await store.exists(sid),
        "settings": (got.model, got.system_prompt),
        "data": None if got.data is None else json.loads(got.data),
    }
    if hasattr(store, "final"):
        state["final"] = await store.final(sid)
    if isinstance(store, SupportsRevisions):
        state["revision"] = await store.revision(sid)
    steps = steps if steps is not None else store if isinstance(store, StepStore) else None
    if steps is not None:
        state["steps"] = [(s.step_index, s.content) for s in await steps.last_n(sid, 100)]
    return state
