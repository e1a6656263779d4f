"""``session.lease-calls.*``: lease calls are not session writes, check their input, and cancel."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from agentlooptest._cancel import Points, cancel_at, still_usable
from agentlooptest._clause import clause, expect, expect_refused
from agentlooptest._clauses._leases import (
    LONG_TTL,
    SHORT_TTL,
    acquire,
    expect_free,
    expect_held,
    fresh_owner,
    listing,
    outlive,
    session_state,
    take_over,
)
from agentlooptest._clauses._shared import expect_data, expect_exists
from agentlooptest._stores import open_sessions

if TYPE_CHECKING:
    from agentlooptest._harness import Harness


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


async def _cancel_acquire(store: Any) -> None:
    points = Points()
    for point in points:
        sid, owner = f"acquire-{point}", fresh_owner("a")
        done = await cancel_at(partial(store.acquire_lease, sid, owner, LONG_TTL), point)
        points.finished(done)
        did = f"acquire_lease({sid!r}, {owner!r}, 30) cancelled after {point} checkpoint(s)"
        outcome = "it returned" if done else "it raised Cancelled"
        _expect_probe(await _probe(store, sid), done, f"{did} ({outcome})")


async def _cancel_release(store: Any) -> None:
    points = Points()
    for point in points:
        sid = f"release-{point}"
        lease = await acquire(store, sid, fresh_owner("a"), LONG_TTL, f"acquire_lease({sid!r})")
        done = await cancel_at(partial(store.release_lease, lease), point)
        points.finished(done)
        did = f"release_lease(<lease of {sid!r}>) cancelled after {point} checkpoint(s)"
        outcome = "it returned" if done else "it raised Cancelled"
        _expect_probe(await _probe(store, sid), not done, f"{did} ({outcome})")


async def _cancel_renew(store: Any) -> None:
    points = Points()
    tried: list[tuple[str, bool, str]] = []
    for point in points:
        sid = f"renew-{point}"
        lease = await acquire(store, sid, fresh_owner("a"), SHORT_TTL, f"acquire_lease({sid!r})")
        done = await cancel_at(partial(store.renew_lease, lease, LONG_TTL), point)
        points.finished(done)
        did = (
            f"acquire_lease({sid!r}, a, 0.2), renew_lease(<it>, 30) cancelled after {point} "
            f"checkpoint(s) ({'it returned' if done else 'it raised Cancelled'}), waited 0.25s"
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


@clause(
    "session.lease-calls.cancel",
    "acquire, renew and release cancelled at each checkpoint: a cancelled call did not happen",
    capability="lease",
    why=_CANCEL_WHY,
)
async def _cancel(h: Harness) -> None:
    async with open_sessions(h) as store:
        await _cancel_acquire(store)
        await _cancel_release(store)
        await _cancel_renew(store)
