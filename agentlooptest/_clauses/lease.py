"""Session leases (capability ``lease``): one live lease per session, and writes fenced by it.

By family, in run order:

- ``session.lease.*``: one live lease per session (across handles too),
  growing tokens, expiry, renew and release, and random programs of lease
  calls against a model (``session.lease.model-based``, whose machine is in
  ``_machines.py``, imported when it runs: hypothesis is a heavy import);
- ``session.lease-clock.*``: expiry at its exact boundaries, on a clock the
  contract controls (``Harness.new_session_store_with_clock``; skipped without);
- ``session.lease-calls.*``: lease calls are not session writes, check their
  input, and a cancelled one did not happen;
- ``session.fenced.*``: writes through a lost lease's ``fenced`` view are
  refused, atomically with the write.

Expiry happens on the store's clock, in real time: the clauses take leases
with :data:`SHORT_TTL`, wait past it with :func:`outlive` and then poll for
the takeover for up to :data:`TAKEOVER_WAIT`, so a store whose clock runs a
little behind ours (a database server's) still passes.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any, cast

import anyio

from agentloop import (
    FinalizeSummary,
    Lease,
    LeaseLostError,
    RunStatus,
    Session,
    SessionInfo,
    SessionStore,
    StepStore,
    SupportsAppendMany,
    SupportsRevisions,
)
from agentlooptest._cancel import cancel_either, each_way, still_usable
from agentlooptest._clause import CAPABILITIES, Violation, clause, expect, expect_refused
from agentlooptest._data import expect_data, expect_exists, json_equal, seed_session, step
from agentlooptest._harness import Harness, Steps, open_clocked, open_sessions, reopened

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


EXCLUSIVE = (
    "two owners holding one session's lease run the session twice at once: duplicated "
    "step indices and interleaved runs that replay and compaction silently trust"
)

ACQUIRERS = 20
"""Owners racing for one session's lease in ``session.lease.exclusive``."""


async def _race_acquirers(first: Any, second: Any, sid: str, did: str) -> Lease:
    """``ACQUIRERS`` owners acquire ``sid`` at once, alternating handles; one must win."""
    results: dict[str, object] = {}

    async def one(k: int) -> None:
        owner = fresh_owner(f"racer{k}")
        results[owner] = await (first if k % 2 == 0 else second).acquire_lease(sid, owner, LONG_TTL)

    async with anyio.create_task_group() as tasks:
        for k in range(ACQUIRERS):
            tasks.start_soon(one, k)
    winners = {owner: got for owner, got in results.items() if got is not None}
    expect(
        len(winners) == 1,
        did=did,
        expected="exactly one Lease; None for every other owner",
        got=f"{len(winners)} leases: "
        + ", ".join(
            f"{o} got token {getattr(g, 'token', g)!r}" for o, g in sorted(winners.items())
        ),
    )
    [(owner, got)] = winners.items()
    return expect_lease(got, sid, owner, did)


@clause(
    "session.lease.exclusive",
    "many concurrent acquirers of one session's lease: exactly one wins, across handles too",
    capability="lease",
    why=EXCLUSIVE,
)
async def _exclusive(h: Harness) -> None:
    async with open_sessions(h) as store:
        did = f"{ACQUIRERS} owners called acquire_lease('x', <own owner>, 30) concurrently"
        won = await _race_acquirers(store, store, "x", did)
        again = await store.acquire_lease("x", won.owner, LONG_TTL)
        expect(
            isinstance(again, Lease) and again.token == won.token,
            did=f"{did}, then the winner acquired 'x' again",
            expected=f"its own lease back with the same token {won.token}",
            got=again,
            why="the loop's holder re-acquiring its live lease must stay the same holder",
        )
        await expect_held(store, "x", f"{did}; one won")
        if h.reopen is None:
            return
        async with reopened(h, store) as other:
            await expect_held(other, "x", "leased 'x' through one handle, then on reopen()")
            did = (
                f"{ACQUIRERS} owners called acquire_lease('y', <own owner>, 30) concurrently, "
                "half of them through a second handle from reopen()"
            )
            await _race_acquirers(store, other, "y", did)
            await expect_held(other, "y", did)
            await expect_held(store, "y", did)


@clause(
    "session.lease.tokens-increase",
    "each acquisition gets a larger token: across release, expiry, delete_session and reopen",
    capability="lease",
    why=(
        "a fencing token that does not grow cannot tell the new holder's writes from the "
        "old holder's: a paused worker's late writes pass the fence"
    ),
)
async def _tokens(h: Harness) -> None:
    async with open_sessions(h) as store:
        owner = fresh_owner("a")
        first = await acquire(store, "t", owner, LONG_TTL, "acquire_lease('t') on a fresh store")
        await store.release_lease(first)
        did = "acquire_lease('t'), release_lease, then acquire_lease('t') by the same owner"
        last = await acquire(store, "t", owner, SHORT_TTL, did)
        expect_larger(last, first, did)
        await outlive()
        did = "let that lease (ttl 0.2s) expire, then acquire_lease('t') by another owner"
        newer = await take_over(store, "t", fresh_owner("b"), did)
        expect_larger(newer, last, did)
        last = newer
        if hasattr(store, "delete_session"):
            await store.update_data("t", '{"doomed": true}')
            await store.release_lease(last)
            await store.delete_session("t")
            did = "released 't', delete_session('t'), then acquire_lease('t')"
            newer = await acquire(store, "t", fresh_owner("c"), LONG_TTL, did)
            expect_larger(newer, last, did)
            last = newer
        if h.reopen is not None:
            await store.release_lease(last)
            async with reopened(h, store) as other:
                did = "released 't', then acquire_lease('t') through a second handle (reopen)"
                newer = await acquire(other, "t", fresh_owner("d"), LONG_TTL, did)
                expect_larger(newer, last, did)
                await other.release_lease(newer)
            did = "released it on the reopened handle, then acquire_lease('t') on the first"
            expect_larger(await acquire(store, "t", fresh_owner("e"), LONG_TTL, did), newer, did)


@clause(
    "session.lease.expiry",
    "a lease nobody renews expires after its ttl: another owner then gets it, with a larger token",
    capability="lease",
    why="a crashed or paused holder must not keep its session locked forever",
)
async def _expiry(h: Harness) -> None:
    async with open_sessions(h) as store:
        old = await acquire(store, "e", fresh_owner("a"), SHORT_TTL, "acquire_lease('e', a, 0.2)")
        await outlive()
        did = "acquire_lease('e', a, 0.2), waited 0.25s, then acquire_lease('e') by another owner"
        new = await take_over(store, "e", fresh_owner("b"), did)
        expect_larger(new, old, did)
        await expect_held(store, "e", f"{did} (ttl 30s)")


@clause(
    "session.lease.release",
    "release is idempotent, lets the next owner in at once, and a former holder's frees nothing",
    capability="lease",
    why=(
        "a finished run must hand its session to the next worker at once, and a late "
        "release by a former holder must not free the lease a running worker holds"
    ),
)
async def _release(h: Harness) -> None:
    async with open_sessions(h) as store:
        first = await acquire(store, "r", fresh_owner("a"), LONG_TTL, "acquire_lease('r', a, 30)")
        await store.release_lease(first)
        await store.release_lease(first)
        why = "a released lease that still blocks others holds the session for a whole TTL"
        did = "acquire_lease('r', a, 30), then release_lease(<a's lease>) twice"
        second = await expect_free(store, "r", did, why)
        expect_larger(second, first, did)
        await store.release_lease(first)
        await expect_held(
            store,
            "r",
            "another owner acquired 'r' after a released it, then a called release_lease "
            "(<a's old lease>) again",
            why="a former holder's late release must not free the lease someone else holds",
        )
        await store.release_lease(second)
        await expect_free(store, "r", "the new holder released 'r' too", why)


@clause(
    "session.lease.renew",
    "renew keeps the token and moves the expiry later, at the store",
    capability="lease",
    why=(
        "the loop renews in the background during long runs; a renewal the store does not "
        "keep lets another worker take the session mid-run"
    ),
)
async def _renew(h: Harness) -> None:
    async with open_sessions(h) as store:
        owner = fresh_owner("a")
        first = await acquire(store, "n", owner, SHORT_TTL, "acquire_lease('n', a, 0.2)")
        renewed = await store.renew_lease(first, LONG_TTL)
        did = "acquire_lease('n', a, 0.2), then renew_lease(<it>, 30)"
        expect(
            isinstance(renewed, Lease)
            and (renewed.session_id, renewed.owner, renewed.token) == ("n", owner, first.token)
            and renewed.expires_at > first.expires_at,
            did=did,
            expected=f"Lease('n', {owner!r}, token={first.token}, expires_at later than "
            f"{first.expires_at.isoformat()})",
            got=renewed,
        )
        await outlive()
        await expect_held(store, "n", f"{did}, then waited past the first ttl (0.25s)")
        again = await store.renew_lease(renewed, LONG_TTL)
        expect(
            isinstance(again, Lease) and again.token == first.token,
            did=f"{did}, then renew_lease(<the renewed lease>, 30)",
            expected=f"a Lease with the same token {first.token}",
            got=again,
        )


@clause(
    "session.lease.renew-lost",
    "renew after a takeover (or after release) raises LeaseLostError; the new holder keeps it",
    capability="lease",
    why=(
        "a paused worker that wakes up must learn it lost the session at its next renew, "
        "and must not extend the lease another worker now holds"
    ),
)
async def _renew_lost(h: Harness) -> None:
    async with open_sessions(h) as store:
        released = await acquire(store, "q", fresh_owner("a"), LONG_TTL, "acquire_lease('q')")
        await store.release_lease(released)
        await expect_refused(
            "acquire_lease('q', a, 30), release_lease(<it>), then renew_lease(<it>, 30)",
            lambda: store.renew_lease(released, LONG_TTL),
            LeaseLostError,
        )
        old = await acquire(store, "k", fresh_owner("a"), SHORT_TTL, "acquire_lease('k', a, 0.2)")
        await outlive()
        did = "acquire_lease('k', a, 0.2), waited 0.25s, another owner acquired 'k'"
        new = await take_over(store, "k", fresh_owner("b"), did)
        await expect_refused(
            f"{did}, then renew_lease(<a's lease>, 30)",
            lambda: store.renew_lease(old, LONG_TTL),
            LeaseLostError,
        )
        await expect_held(store, "k", f"{did}, a's renew was refused")
        kept = await store.renew_lease(new, LONG_TTL)
        expect(
            isinstance(kept, Lease) and kept.token == new.token,
            did=f"{did}, a's renew was refused, then the new holder's renew_lease",
            expected=f"a Lease with the new holder's token {new.token}",
            got=kept,
        )


class _Clock:
    """The time a clocked store reads: set by the clause, never moving by itself."""

    def __init__(self) -> None:
        self.now = datetime.now(UTC).replace(microsecond=0)
        self.start = self.now

    def __call__(self) -> datetime:
        return self.now

    def at(self, seconds: float) -> str:
        """``t0+Ns`` for messages: ``seconds`` after the clock's start."""
        return f"t0{seconds:+g}s"

    def set(self, seconds: float, micro: int = 0) -> None:
        """Move to ``seconds`` (and ``micro`` microseconds) after the start."""
        self.now = self.start + timedelta(seconds=seconds, microseconds=micro)


def _expires(lease: Lease, clock: _Clock, seconds: float, did: str) -> None:
    want = clock.start + timedelta(seconds=seconds)
    expect(
        lease.expires_at == want,
        did=did,
        expected=f"expires_at {want.isoformat()} ({clock.at(seconds)}: the store's clock, "
        "read at the call, plus the ttl)",
        got=f"expires_at {lease.expires_at.isoformat()}",
        hint="an expiry counted from the old expires_at, or from a clock other than the store's",
    )


_TICK = 1
"""Microseconds before ``expires_at`` at which a lease must still be live."""


@clause(
    "session.lease.owner-exact",
    "owners are compared exactly: another case, a prefix, spaces or a normalization form "
    "is another owner",
    capability="lease",
    why=(
        "owners name runs: a store that folds or cuts them lets a second run acquire the "
        "lease a live run holds, and both write the session"
    ),
    hint="owners compared case-insensitively, trimmed, normalized, or by a prefix (LIKE)",
)
async def _owner_exact(h: Harness) -> None:
    async with open_sessions(h) as store:
        for k, (holder, other) in enumerate(_LOOKALIKE_OWNERS):
            sid = f"o{k}"
            await acquire(store, sid, holder, LONG_TTL, f"acquire_lease({sid!r}, {holder!r}, 30)")
            got = await store.acquire_lease(sid, other, LONG_TTL)
            expect(
                got is None,
                did=f"acquire_lease({sid!r}, {holder!r}, 30), then "
                f"acquire_lease({sid!r}, {other!r}, 30)",
                expected=f"None: {holder!r} holds a live lease and {other!r} is another owner",
                got=got,
            )


_LOOKALIKE_OWNERS = (
    ("worker-10", "worker-1"),
    ("worker-1", "worker-10"),
    ("Worker", "worker"),
    ("worker ", "worker"),
    ("caf\u00e9", "cafe\u0301"),
)
"""Pairs of distinct owners a store that folds, trims, normalizes or cuts would merge."""


@clause(
    "session.lease.model-based",
    "random programs mixing acquire / renew / release / fenced writes / reopen with the "
    "session calls match a model of who holds each lease",
    capability="lease",
    why=(
        "the loop trusts a lease to make one run the only writer: a grant, token or fence "
        "that drifts from the rules in some sequence lets two runs write one session"
    ),
)
async def _lease_model(h: Harness) -> None:
    from agentlooptest._clauses._machines import LeaseMachine, run_machine  # late: heavy import

    await run_machine(LeaseMachine, h)


@clause(
    "session.lease-clock.boundary",
    "a lease is live until just before expires_at, and expired at expires_at exactly",
    capability="lease",
    why=(
        "expires_at is the promise the holder renews by: live one microsecond less and a "
        "takeover can cut a renewing holder off, live at expires_at and two owners hold it"
    ),
    hint="`now <= expires_at` instead of `now < expires_at` (or a rounded timestamp)",
)
async def _clock_boundary(h: Harness) -> None:
    clock = _Clock()
    async with open_clocked(h, clock) as store:
        did = "at t0, acquire_lease('b', a, 10)"
        old = await acquire(store, "b", fresh_owner("a"), 10, did)
        _expires(old, clock, 10, did)
        clock.set(10, -_TICK)
        await expect_held(store, "b", f"{did}; the clock at expires_at - 1µs")
        clock.set(10)
        new = await expect_free(
            store,
            "b",
            f"{did}; the clock at expires_at exactly",
            "a lease whose expires_at has come is expired: another owner gets it",
        )
        expect_larger(new, old, f"{did}; at expires_at another owner acquired 'b'")


@clause(
    "session.lease-clock.renew-expired",
    "renew by a holder whose lease expired, nobody having taken it over, succeeds, from now",
    capability="lease",
    why=(
        "a lease that expired while nobody acquired it was never lost: a holder paused past "
        "its ttl renews and carries on; refusing it aborts a run nobody displaced"
    ),
    hint="renew refusing any expired lease instead of only one acquired again since",
)
async def _clock_renew_expired(h: Harness) -> None:
    clock = _Clock()
    async with open_clocked(h, clock) as store:
        owner = fresh_owner("a")
        lease = await acquire(store, "x", owner, 10, "at t0, acquire_lease('x', a, 10)")
        clock.set(60)
        did = "at t0, acquire_lease('x', a, 10); at t0+60s (expired, nobody acquired it since)"
        await store.fenced(lease).update_data("x", '{"late": 1}')
        await expect_data(store, "x", '{"late": 1}', f"{did}, a's fenced update_data; then get")
        renewed = await store.renew_lease(lease, 10)
        expect(
            isinstance(renewed, Lease) and renewed.token == lease.token,
            did=f"{did}, renew_lease(<a's lease>, 10)",
            expected=f"a Lease with the same token {lease.token}",
            got=renewed,
        )
        _expires(renewed, clock, 70, f"{did}, renew_lease(<a's lease>, 10)")
        clock.set(70, -_TICK)
        await expect_held(store, "x", f"{did}, renewed for 10s; at t0+70s - 1µs")


@clause(
    "session.lease-clock.renew-from-now",
    "renew and re-acquire extend from now; a refused renew leaves the new holder's expiry alone",
    capability="lease",
    why=(
        "the loop renews every ttl/3 and sizes ttl to its pauses: an expiry counted from the "
        "old one drifts, and a former holder's refused renew must not extend the new one's"
    ),
)
async def _clock_renew_from_now(h: Harness) -> None:
    clock = _Clock()
    async with open_clocked(h, clock) as store:
        a = fresh_owner("a")
        lease = await acquire(store, "w", a, 10, "at t0, acquire_lease('w', a, 10)")
        clock.set(5)
        did = "at t0, acquire_lease('w', a, 10); at t0+5s renew_lease(<it>, 10)"
        _expires(await store.renew_lease(lease, 10), clock, 15, did)
        clock.set(7)
        did = (
            "at t0, acquire_lease('w', a, 10), renewed at t0+5s; at t0+7s acquire_lease('w', a, 2)"
        )
        again = expect_lease(await store.acquire_lease("w", a, 2), "w", a, did)
        expect(again.token == lease.token, did=did, expected=f"token {lease.token}", got=again)
        _expires(again, clock, 9, did)
        clock.set(9)
        did = "a's lease of 'w' expired at t0+9s; at t0+9s"
        new = await expect_free(store, "w", did, "an expired lease is free")
        _expires(new, clock, 9 + LONG_TTL, f"{did}, another owner acquired it for {LONG_TTL:g}s")
        clock.set(12)
        await expect_refused(
            f"{did}, another owner acquired it; at t0+12s renew_lease(<a's lease>, 1000)",
            lambda: store.renew_lease(lease, 1000),
            LeaseLostError,
        )
        clock.set(9 + LONG_TTL)
        await expect_free(
            store,
            "w",
            f"{did}, another owner acquired it for {LONG_TTL:g}s, a's renew was refused; at "
            f"the new lease's expires_at (t0+{9 + LONG_TTL:g}s)",
            "a refused renew must change nothing: the new holder's lease expires when its "
            "own acquire or renew said",
        )


@clause(
    "session.lease-calls.not-a-write",
    "lease calls create no session and move no revision, updated_at or list_sessions order",
    capability="lease",
    why=(
        "a worker that only probes a session's lease must not create it or bump it to the "
        "top of 'recent conversations'; leases are bookkeeping, not session writes"
    ),
)
async def _not_a_write(h: Harness) -> None:
    async with open_sessions(h) as store:
        await store.update_data("older", '{"w": 1}')
        await store.update_data("newer", '{"w": 2}')
        before = (await listing(store), [await session_state(store, s) for s in ("older", "ghost")])
        for sid in ("older", "ghost"):
            lease = await acquire(store, sid, fresh_owner("a"), LONG_TTL, f"acquire_lease({sid!r})")
            lease = await store.renew_lease(lease, LONG_TTL)
            await store.release_lease(lease)
            held = await acquire(store, sid, fresh_owner("b"), LONG_TTL, f"acquire_lease({sid!r})")
            store.fenced(held)
        did = (
            "wrote 'older' then 'newer', then acquire/renew/release/acquire and fenced() on "
            "'older' and on the unknown 'ghost'"
        )
        await expect_exists(store, "ghost", False, f"{did}, then exists('ghost')")
        await expect_data(store, "ghost", None, f"{did}, then get('ghost')")
        after = (await listing(store), [await session_state(store, s) for s in ("older", "ghost")])
        expect(
            after == before,
            did=f"{did}, then list_sessions() and read 'older' and 'ghost' back",
            expected=f"the listing and both sessions (revisions too) as before: {before!r:.400}",
            got=after,
        )


_BAD_TTLS: tuple[object, ...] = (0, 0.0, -1.0, float("nan"), float("inf"), "30", None)


@clause(
    "session.lease-calls.bad-input",
    "a bad ttl, owner, session id or lease is refused; nothing is granted or extended",
    capability="lease",
    why=(
        "a lease with a zero or negative ttl is no lease at all, and an infinite one "
        "outlives a crashed holder; either must fail loudly instead"
    ),
)
async def _bad_input(h: Harness) -> None:
    async with open_sessions(h) as store:
        live = await acquire(store, "b", fresh_owner("a"), LONG_TTL, "acquire_lease('b', a, 30)")
        calls: list[tuple[str, Callable[[], Awaitable[object]]]] = []
        for ttl in _BAD_TTLS:
            calls += [
                (
                    f"acquire_lease('free', 'z', {ttl!r})",
                    partial(store.acquire_lease, "free", "z", ttl),
                ),
                (
                    f"renew_lease(<live lease of 'b'>, {ttl!r})",
                    partial(store.renew_lease, live, ttl),
                ),
            ]
        for owner in ("", None, 7):
            calls.append(
                (
                    f"acquire_lease('free', {owner!r}, 30)",
                    partial(store.acquire_lease, "free", owner, 30),
                )
            )
        for sid in ("", "a\x00b", None):
            calls.append(
                (f"acquire_lease({sid!r}, 'z', 30)", partial(store.acquire_lease, sid, "z", 30))
            )
        for lease in (None, "b", ("b", 1)):
            calls += [
                (f"renew_lease({lease!r}, 30)", partial(store.renew_lease, lease, 30)),
                (f"release_lease({lease!r})", partial(store.release_lease, lease)),
            ]
        for did, call in calls:
            await expect_refused(f"called {did}", call, TypeError, ValueError)
        await expect_free(
            store,
            "free",
            "refused acquire_lease('free', ...) calls",
            "a refused call must grant nothing: the session would be locked by nobody",
        )
        await expect_held(store, "b", "refused renew_lease calls of the live lease of 'b'")


_CANCEL_WHY = (
    "the loop takes and releases leases in runs that may be cancelled; a cancelled "
    "acquire that still took the lease locks the session for a whole TTL with no holder "
    "to release it, and a cancelled release that freed it lets a second run in"
)


async def _probe(store: Any, sid: str) -> object:
    """Another owner's ``acquire_lease(sid)`` after a cancelled call (a hang fails)."""
    owner = fresh_owner("prober")
    return await still_usable(
        f"acquire_lease({sid!r}, {owner!r}, 30)",
        partial(store.acquire_lease, sid, owner, LONG_TTL),
    )


def _expect_probe(got: object, held: bool, did: str) -> None:
    expect(
        (got is None) is held,
        did=f"{did}, then acquire_lease by another owner",
        expected="None: the lease is held" if held else "a Lease: nobody holds the lease",
        got=got,
    )


def _tag(native: bool) -> str:
    return "task-" if native else ""


def _how(native: bool, point: int) -> str:
    if native:
        return f"in a task cancelled with Task.cancel() at its suspension #{point + 1}"
    return f"cancelled after {point} checkpoint(s)"


async def _cancel_acquire(store: Any) -> None:
    for points, point, native in each_way():
        sid, owner = f"acquire-{_tag(native)}{point}", fresh_owner("a")
        did = f"acquire_lease({sid!r}, {owner!r}, 30)"
        op = partial(store.acquire_lease, sid, owner, LONG_TTL)
        done = await cancel_either(op, point, native, did)
        points.finished(done)
        outcome = "it returned" if done else "it raised Cancelled"
        _expect_probe(await _probe(store, sid), done, f"{did} {_how(native, point)} ({outcome})")


async def _cancel_release(store: Any) -> None:
    for points, point, native in each_way():
        sid = f"release-{_tag(native)}{point}"
        lease = await acquire(store, sid, fresh_owner("a"), LONG_TTL, f"acquire_lease({sid!r})")
        did = f"release_lease(<lease of {sid!r}>)"
        done = await cancel_either(partial(store.release_lease, lease), point, native, did)
        points.finished(done)
        outcome = "it returned" if done else "it raised Cancelled"
        _expect_probe(
            await _probe(store, sid), not done, f"{did} {_how(native, point)} ({outcome})"
        )


async def _cancel_renew(store: Any) -> None:
    tried: list[tuple[str, bool, str]] = []
    for points, point, native in each_way():
        sid = f"renew-{_tag(native)}{point}"
        lease = await acquire(store, sid, fresh_owner("a"), SHORT_TTL, f"acquire_lease({sid!r})")
        call = f"renew_lease(<lease of {sid!r}>, 30)"
        done = await cancel_either(partial(store.renew_lease, lease, LONG_TTL), point, native, call)
        points.finished(done)
        did = (
            f"acquire_lease({sid!r}, a, 0.2), {call} {_how(native, point)} "
            f"({'it returned' if done else 'it raised Cancelled'}), waited 0.25s"
        )
        tried.append((sid, done, did))
    await outlive()
    for sid, done, did in tried:
        if done:
            await expect_held(store, sid, did, why=_CANCEL_WHY)
        else:
            await take_over(
                store,
                sid,
                fresh_owner("b"),
                f"{did}, then acquire_lease by another owner",
                got="the cancelled renew extended the lease",
                why=_CANCEL_WHY,
            )


async def _cancel_fenced(store: Any) -> None:
    """A fenced write cancelled at each point is whole or absent, and keeps the lease held."""
    for points, point, native in each_way():
        sid = f"fenced-{_tag(native)}{point}"
        await store.update_data(sid, '{"before": 1}')
        lease = await acquire(store, sid, fresh_owner("a"), LONG_TTL, f"acquire_lease({sid!r})")
        did = f"fenced(<lease of {sid!r}>).update_data({sid!r}, '{{\"after\": 1}}')"
        op = partial(store.fenced(lease).update_data, sid, '{"after": 1}')
        done = await cancel_either(op, point, native, did)
        points.finished(done)
        did = f"{did} {_how(native, point)} ({'it returned' if done else 'it raised Cancelled'})"
        got = await still_usable(f"get({sid!r})", partial(store.get, sid))
        allowed = [{"after": 1}] if done else [{"before": 1}, {"after": 1}]
        data = None if got.data is None else json.loads(got.data)
        expect(
            data in allowed,
            did=f"{did}, then get({sid!r}).data",
            expected=" or ".join(repr(a) for a in allowed) + " (whole)",
            got=data,
            why="a fenced write is the one writer's: half of it is a session no run wrote",
        )
        _expect_probe(await _probe(store, sid), True, did)


@clause(
    "session.lease-calls.cancel",
    "acquire, renew, release and fenced writes cancelled at each checkpoint (and, under "
    "asyncio, by Task.cancel()): a cancelled lease call did not happen, a fenced write is whole",
    capability="lease",
    why=_CANCEL_WHY,
)
async def _cancel(h: Harness) -> None:
    async with open_sessions(h) as store:
        await _cancel_acquire(store)
        await _cancel_release(store)
        await _cancel_renew(store)
        await _cancel_fenced(store)


LATE = '{"writer": "old holder"}'
"""What the old holder writes after (or while) losing its lease."""

LOST = (
    "a worker paused past its lease (GC, SIGSTOP, a slow network) wakes up and keeps "
    "writing: unless the store refuses those writes atomically, two runs interleave and "
    "step indices repeat in the trace replay and compaction trust"
)


def _late_writes(view: Any, sid: str) -> list[tuple[str, Callable[[], Awaitable[object]]]]:
    """Every fenced write of ``view`` to ``sid``, as (description, call)."""
    summary = FinalizeSummary(RunStatus.completed, step_count=9)
    writes: list[tuple[str, Callable[[], Awaitable[object]]]] = [
        (f"update_data({sid!r}, {LATE!r})", partial(view.update_data, sid, LATE)),
        (f"finalize({sid!r}, <completed summary>)", partial(view.finalize, sid, summary)),
    ]
    if hasattr(view, "put"):
        late = Session(sid, "late-model", "late prompt", LATE)
        writes.append((f"put(Session({sid!r}, 'late-model', ...))", partial(view.put, late)))
    if isinstance(view, SupportsRevisions):
        writes.append(
            (
                f"update_data_if({sid!r}, {LATE!r}, <its current revision>)",
                partial(_update_current, view, sid),
            )
        )
    if isinstance(view, StepStore):
        writes.append((f"append(<step 7 of {sid!r}>)", partial(view.append, step(sid, 7))))
    if isinstance(view, SupportsAppendMany):
        batch = [step(sid, 8), step(sid, 9)]
        writes.append((f"append_many(<steps 8, 9 of {sid!r}>)", partial(view.append_many, batch)))
    return writes


async def _update_current(view: Any, sid: str) -> object:
    """``update_data_if`` at the session's current revision: only the lease can refuse it."""
    return await view.update_data_if(sid, LATE, await view.revision(sid))


def _capabilities(store: object) -> set[str]:
    protocols = {**CAPABILITIES, "combined": StepStore, "SessionStore": SessionStore}
    found = {name for name, proto in protocols.items() if isinstance(store, proto)}
    return {"StepStore" if name == "combined" else name for name in found}


def _expect_whole_view(store: object, view: object) -> None:
    """``view`` has every protocol and capability ``store`` has: the loop writes only through it."""
    missing = sorted(_capabilities(store) - _capabilities(view))
    expect(
        not missing,
        did="acquire_lease('f', a, 0.2), then fenced(<the lease>)",
        expected=f"a view with every protocol and capability of the store: "
        f"{sorted(_capabilities(store))}",
        got=f"a {type(view).__name__} without {missing}",
        why="the loop makes every write of a leased run through the view; a view without "
        "append (or another write) leaves those writes unfenced or the run unable to make them",
    )


@clause(
    "session.fenced.writes",
    "a fenced view is the whole store; after a takeover it refuses every write, changing nothing",
    capability="lease",
    why=LOST,
)
async def _fenced_writes(h: Harness) -> None:
    async with open_sessions(h) as store:
        await seed_session(store, "f")
        if isinstance(store, StepStore):
            await Steps(h, store).append(step("f", 0, content="seeded"))
        old = await acquire(store, "f", fresh_owner("a"), SHORT_TTL, "acquire_lease('f', a, 0.2)")
        view = store.fenced(old)
        _expect_whole_view(store, view)
        await view.update_data("f", '{"holder": "a"}')
        await expect_data(
            store, "f", '{"holder": "a"}', "update_data('f') through a's fenced view, then get('f')"
        )
        await outlive()
        did = "a's lease of 'f' (ttl 0.2s) expired, another owner acquired it"
        new = await take_over(store, "f", fresh_owner("b"), did)
        steps = view if isinstance(view, StepStore) else None
        before = await session_state(store, "f", steps)
        for what, write in _late_writes(view, "f"):
            await expect_refused(
                f"{did}, then {what} through a's fenced view", write, LeaseLostError
            )
        after = await session_state(store, "f", steps)
        expect(
            after == before,
            did=f"{did}, a's fenced writes were refused, then read 'f' back through the store",
            expected=f"'f' as before a's refused writes: {before!r:.400}",
            got=after,
        )
        await store.fenced(new).update_data("f", '{"holder": "b"}')
        await expect_data(
            store, "f", '{"holder": "b"}', f"{did}, then update_data through the new holder's view"
        )


DELAYS = range(-4, 4)
"""The races per fenced write in ``session.fenced.race``: at delay ``d >= 0`` the takeover
starts ``d`` checkpoints after the write, at ``d < 0`` the write ``-d`` after the takeover."""


async def _checkpoints(count: int) -> None:
    for _ in range(count):
        await anyio.lowlevel.checkpoint()


_RACED = ("update_data", "append", "put", "update_data_if", "append_many")
"""The fenced writes ``session.fenced.race`` races against a takeover (each the view has)."""


async def _late_write(view: Any, sid: str, op: str) -> None:
    """The old holder's write ``op`` of :data:`LATE` to ``sid`` through its ``view``."""
    if op == "append":
        await view.append(step(sid, 1, content=LATE))
    elif op == "append_many":
        await view.append_many([step(sid, 1, content=LATE), step(sid, 2, content=LATE)])
    elif op == "put":
        await view.put(Session(sid, "model-late", "", LATE))
    elif op == "update_data_if":
        await view.update_data_if(sid, LATE, await view.revision(sid))
    else:
        await view.update_data(sid, LATE)


async def _shows_late(store: Any, view: Any, sid: str, op: str) -> bool:
    if op in (
        "append",
        "append_many",
    ):  # steps read through the view when the store is not a StepStore
        steps = store if isinstance(store, StepStore) else view
        return any(s.content == LATE for s in await steps.last_n(sid, 10))
    return json_equal(LATE, (await store.get(sid)).data)


def _head_start(delay: int) -> str:
    if delay >= 0:
        return f"the takeover started {delay} checkpoint(s) after the write"
    return f"the write started {-delay} checkpoint(s) after the takeover"


async def _race_once(store: Any, view: Any, sid: str, op: str, delay: int) -> None:
    """The old holder's late ``op`` races another owner's takeover and first read."""
    outcome: list[str] = []
    first_read: list[bool] = []

    async def old_holder() -> None:
        await _checkpoints(-delay)
        try:
            await _late_write(view, sid, op)
        except LeaseLostError:
            outcome.append("raised LeaseLostError")
        else:
            outcome.append("returned")

    async def new_holder() -> None:
        await _checkpoints(delay)
        await take_over(store, sid, fresh_owner("b"), f"the takeover of {sid!r}")
        first_read.append(await _shows_late(store, view, sid, op))

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(old_holder)
        tasks.start_soon(new_holder)
    landed = outcome == ["returned"]
    later = await _shows_late(store, view, sid, op)
    expect(
        first_read == [landed] and later == landed,
        did=f"a's lease of {sid!r} expired; a's fenced {op} raced another owner's "
        f"acquire_lease and first read ({_head_start(delay)})",
        expected="the write landed before the takeover (the new holder's first read shows it) "
        "or it raised LeaseLostError and no read ever shows it",
        got=f"the write {outcome[0]}; the new holder's first read "
        f"{'shows' if first_read == [True] else 'does not show'} it, a later read "
        f"{'shows' if later else 'does not show'} it",
    )


@clause(
    "session.fenced.by-token",
    "a fence checks the token, not the owner: the same owner's older lease is refused too",
    capability="lease",
    why=(
        "a run's owner may lease a session again (a retry, the same worker name): the older "
        "lease's view belongs to a run that may still be writing, and must be refused"
    ),
    hint="the fence comparing lease.owner with the holder instead of lease.token",
)
async def _fenced_by_token(h: Harness) -> None:
    async with open_sessions(h) as store:
        owner = fresh_owner("a")
        first = await acquire(store, "t", owner, LONG_TTL, "acquire_lease('t', a, 30)")
        await store.release_lease(first)
        did = "acquire_lease('t', a, 30), release_lease(<it>), acquire_lease('t', a, 30) again"
        second = await acquire(store, "t", owner, LONG_TTL, did)
        expect_larger(second, first, did)
        await store.fenced(second).update_data("t", '{"by": "second"}')
        await expect_refused(
            f"{did}; update_data('t') through the second lease's view, then through the first's",
            lambda: store.fenced(first).update_data("t", '{"by": "first"}'),
            LeaseLostError,
        )
        await expect_data(
            store, "t", '{"by": "second"}', f"{did}; the first view refused; get('t')"
        )


@clause(
    "session.fenced.race",
    "a fenced write racing a takeover lands before it or is refused, never after it",
    capability="lease",
    why=(
        "a fence checked outside the write's transaction lets a write checked just before "
        "the takeover land just after it, under the new holder's feet"
    ),
)
async def _fenced_race(h: Harness) -> None:
    async with open_sessions(h) as store:
        trials: list[tuple[Any, str, str, int]] = []
        for delay in DELAYS:
            for op in _RACED:
                sid = f"race-{op}-{delay}"
                await store.update_data(sid, '{"writer": "seed"}')
                lease = await acquire(store, sid, fresh_owner("a"), SHORT_TTL, "acquire_lease")
                view = store.fenced(lease)
                if not hasattr(view, op):
                    continue
                if op in ("append", "append_many"):
                    if not isinstance(view, StepStore):
                        continue
                    await Steps(h, store).ensure(sid)
                trials.append((view, sid, op, delay))
        await outlive()
        for view, sid, op, delay in trials:
            await _race_once(store, view, sid, op, delay)
