"""The event-loop side of the PostgreSQL fast path: socket waits and a loop-driven connection."""

from __future__ import annotations

import asyncio
import math
import socket
from collections.abc import Iterator
from typing import Any

import anyio
import psycopg
import pytest
import trio
from _sql_support import pg_dsn

from agentloop._backend import clock
from agentloopsql._pg_connect import connection_kwargs
from agentloopsql._pg_wait import LoopConnection, wait_socket

pytestmark = pytest.mark.anyio

R, W, RW = psycopg.waiting.WAIT_R, psycopg.waiting.WAIT_W, psycopg.waiting.WAIT_RW


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    left, right = socket.socketpair()
    left.setblocking(False)
    try:
        yield left, right
    finally:
        left.close()
        right.close()


async def test_readable_socket_is_reported_ready_to_read(pair: Any) -> None:
    left, right = pair
    right.send(b"x")
    assert await wait_socket(left.fileno(), R) == psycopg.waiting.READY_R


async def test_writable_socket_is_reported_ready_to_write(pair: Any) -> None:
    left, _ = pair
    assert await wait_socket(left.fileno(), W) & psycopg.waiting.READY_W
    assert await wait_socket(left.fileno(), RW) & psycopg.waiting.READY_W


async def test_a_passed_deadline_reports_nothing_ready(pair: Any) -> None:
    left, _ = pair
    with anyio.fail_after(5):
        assert await wait_socket(left.fileno(), R, clock()() + 0.05) == 0


async def test_a_wait_is_cancellable_and_leaves_the_socket_usable(pair: Any) -> None:
    left, right = pair
    with anyio.move_on_after(0.05) as scope:
        await wait_socket(left.fileno(), R)
    assert scope.cancelled_caught
    right.send(b"x")  # registered no more: the next wait (same or other loop) works
    assert await wait_socket(left.fileno(), R, math.inf) == psycopg.waiting.READY_R


@pytest.fixture
def dsn() -> str:
    return pg_dsn()


def test_one_connection_serves_loops_of_both_kinds_one_after_another(dsn: str) -> None:
    """Opened in one asyncio loop, then driven by trio, asyncio and trio again."""
    conn = asyncio.run(LoopConnection.connect(dsn, **connection_kwargs(dsn)))
    try:

        async def one(n: int) -> int:
            cursor = await conn.execute("SELECT %s::int + 1", (n,), prepare=True)
            row = await cursor.fetchone()
            assert row is not None
            return int(row[0])

        assert trio.run(one, 1) == 2
        assert asyncio.run(one(2)) == 3
        assert trio.run(one, 3) == 4
    finally:
        asyncio.run(conn.close())
