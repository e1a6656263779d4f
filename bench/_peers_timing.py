"""Sizes, timed blocks and ratio rows shared by the peer comparisons.

Ours runs under trio and a peer under asyncio, in the same process: every
block is one ``trio.run`` or one run of an asyncio event loop (on PostgreSQL,
one call into a trio run or an asyncio loop kept for the whole comparison),
whose setup is excluded from the clock. Rounds interleave ours and the peers, so machine
drift hits all alike; a row's ratio is the median of the per-round ratios,
shown with their min-max.
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import attrs
import trio

from bench._report import SpreadRow

INFO_ONLY = float("inf")

T = TypeVar("T")
Block = Callable[[], Awaitable[float]]


@attrs.frozen
class Sizes:
    """How much work each comparison does; the defaults are the reported run."""

    small: int = 100
    history: int = 1_000
    big: int = 20_000
    ops: int = 100
    rounds: int = 5
    durable_ops: int = 100
    durable_pairs: int = 5
    tasks: int = 16
    task_ops: int = 25
    # PostgreSQL: histories small, history and pg_big; pg_ops per block; pg_rounds
    # rounds; each of pg_tasks concurrent appenders does its share of pg_task_appends.
    pg_big: int = 10_000
    pg_ops: int = 20
    pg_rounds: int = 7
    pg_tasks: tuple[int, ...] = (16, 64, 256)
    pg_task_appends: int = 512
    # The floor rows (bench._floor_pg): reads per block. A read costs 0.2-0.6 ms,
    # so a block of pg_ops is a few milliseconds, which one scheduler delay of
    # another process can double; a block of this many is tens.
    pg_floor_ops: int = 100


def run_trio(work: Callable[[], Awaitable[T]]) -> T:
    """``work`` in a fresh trio run (ours)."""
    return trio.run(work)


def run_asyncio(work: Callable[[], Awaitable[T]]) -> T:
    """``work`` in a fresh asyncio event loop (a peer)."""
    return asyncio.run(_as_coroutine(work))


async def _as_coroutine(work: Callable[[], Awaitable[T]]) -> T:
    return await work()


class TrioLoop:
    """One trio run kept for a whole comparison, on a thread of its own; each block is
    one call into it (``trio.from_thread.run``), timed inside the run.

    A store's first call in a fresh ``trio.run`` pays for setting up that run's
    machinery; kept for the comparison, ours pays it once, as a peer does on its
    kept asyncio loop (:class:`AsyncioLoop`). The caller's thread only waits.
    """

    def __init__(self) -> None:
        self._started = threading.Event()
        self._thread = threading.Thread(target=trio.run, args=(self._serve,), daemon=True)
        self._thread.start()
        self._started.wait()

    async def _serve(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._stop = trio.Event()
        self._started.set()
        await self._stop.wait()

    def run(self, work: Callable[[], Awaitable[T]]) -> T:
        return trio.from_thread.run(work, trio_token=self._token)

    async def together(self, works: Sequence[Callable[[], Awaitable[object]]]) -> None:
        """Every one of ``works`` at once, in a nursery; returns when all are done."""
        async with trio.open_nursery() as nursery:
            for work in works:
                nursery.start_soon(work)

    def close(self) -> None:
        """Ends the run and its thread."""
        trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
        self._thread.join()


class AsyncioLoop:
    """One asyncio event loop kept for a whole comparison; each block is one run of it.

    A peer's database engine, connections and locks belong to the loop that
    made them, so its blocks all run on that one loop.
    """

    def __init__(self) -> None:
        self._runner = asyncio.Runner()

    def run(self, work: Callable[[], Awaitable[T]]) -> T:
        return self._runner.run(_as_coroutine(work))

    async def together(self, works: Sequence[Callable[[], Awaitable[object]]]) -> None:
        """Every one of ``works`` at once, in a task group; returns when all are done."""
        async with asyncio.TaskGroup() as group:
            for work in works:
                group.create_task(_as_coroutine(work))

    def close(self) -> None:
        """Closes the loop (after the subject's own resources were closed on it)."""
        self._runner.close()


async def per_op_us(ops: int, op: Callable[[], Awaitable[object]]) -> float:
    """Microseconds per call of ``op``, called ``ops`` times back to back.

    The cyclic garbage collector is paused while the clock runs (as ``timeit``
    does): the heap holds every store's items, so a collection would bill one
    store for the objects of another. Allocation itself is still timed; what
    the block leaves behind is collected after the clock stops.
    """
    gc.disable()
    try:
        start = time.perf_counter()
        for _ in range(ops):
            await op()
        return (time.perf_counter() - start) / ops * 1e6
    finally:
        gc.enable()


@attrs.frozen
class Series:
    """One subject's per-round timings (µs per op) of one measure."""

    us: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.us)


def speedup_row(name: str, peer_label: str, ours: Series, peer: Series, limit: float) -> SpreadRow:
    """Peer time / our time per round (> 1: ours is faster), as a row with its spread."""
    ratios = [p / o for o, p in zip(ours.us, peer.us, strict=True)]
    detail = f"vs {peer_label}: {ours.median:.1f} vs {peer.median:.1f} us/op"
    return _row(name, detail, ratios, limit, at_least=True)


def growth_row(name: str, label: str, small: Series, big: Series, limit: float) -> SpreadRow:
    """Big-history time / small-history time per round, as a row with its spread."""
    ratios = [b / s for s, b in zip(small.us, big.us, strict=True)]
    detail = f"{label}: {big.median:.1f} vs {small.median:.1f} us/op"
    return _row(name, detail, ratios, limit, at_least=False)


def _row(name: str, detail: str, ratios: list[float], limit: float, *, at_least: bool) -> SpreadRow:
    return SpreadRow(
        name,
        detail,
        statistics.median(ratios),
        limit,
        at_least,
        low=min(ratios),
        high=max(ratios),
    )
