"""``session.lease.*``: one live lease per session, growing tokens, expiry, renew and release."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio

from agentloop import Lease, LeaseLostError
from agentlooptest._clause import clause, expect, expect_refused
from agentlooptest._clauses._leases import (
    LONG_TTL,
    SHORT_TTL,
    acquire,
    expect_free,
    expect_held,
    expect_larger,
    expect_lease,
    fresh_owner,
    outlive,
    take_over,
)
from agentlooptest._stores import open_sessions, reopened

if TYPE_CHECKING:
    from agentlooptest._harness import Harness

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
