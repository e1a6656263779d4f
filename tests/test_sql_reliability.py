"""Reliability of both SQL stores across processes: kill -9 mid-append, concurrent writers."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import trio
from _sql_support import fresh_schema

from agentloop import RunStep
from agentloopsql import PostgresStore, SqliteStore

CHILD = str(Path(__file__).with_name("sql_child.py"))
SEED = int(os.environ.get("AGENTLOOP_CRASH_SEED", "20261129"))


def _spawn(
    kind: str, target: str, session: str, count: int, tag: str = "", synchronous: str = "full"
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, CHILD, kind, target, session, str(count), tag],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "AGENTLOOP_CHILD_SYNCHRONOUS": synchronous},
    )


def _run_and_kill(
    kind: str, target: str, session: str, acks_before_kill: int, synchronous: str = "full"
) -> list[int]:
    """Start a child appending forever, SIGKILL it after some acks; every index it acked."""
    proc = _spawn(kind, target, session, 1_000_000, synchronous=synchronous)
    assert proc.stdout is not None
    try:
        assert proc.stdout.readline().strip() == "ready"
        acked: list[int] = []
        while len(acked) < acks_before_kill:
            acked.append(int(proc.stdout.readline()))
        os.kill(proc.pid, signal.SIGKILL)
        acked.extend(int(line) for line in proc.stdout.read().split())  # printed before the kill
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL
    return acked


def _check_trace(indices: list[int], acked: list[int]) -> None:
    """The stored trace holds every acked index in order, plus at most the one in flight."""
    assert acked == list(range(len(acked)))
    assert indices[: len(acked)] == acked
    assert indices == list(range(len(indices)))
    assert len(indices) <= len(acked) + 1


@pytest.mark.parametrize(("synchronous", "rounds"), [("full", 20), ("normal", 10)])
async def test_sqlite_survives_kill_9(tmp_path: Path, synchronous: str, rounds: int) -> None:
    """kill -9 at random moments: every acknowledged append is there, in order, intact."""
    path = str(tmp_path / "crash.db")
    rng = random.Random(SEED)
    for round_ in range(rounds):
        session = f"run-{round_}"
        acked = await trio.to_thread.run_sync(
            _run_and_kill, "sqlite", path, session, rng.randrange(0, 300), synchronous
        )
        with sqlite3.connect(path) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        async with await SqliteStore.open(path) as store:
            _check_trace([s.step_index for s in await store.all(session)], acked)


async def test_postgres_survives_client_kill_9(postgres_dsn: str) -> None:
    """kill -9 of a PostgreSQL client mid-append: every acknowledged append is there, once."""
    dsn = postgres_dsn
    rng = random.Random(SEED)
    async with fresh_schema(dsn) as schema:
        for round_ in range(5):
            session = f"run-{round_}"
            acked = await trio.to_thread.run_sync(
                _run_and_kill, "postgres", f"{dsn}:{schema}", session, rng.randrange(0, 200)
            )
            async with await PostgresStore.open(dsn, schema=schema, pool_size=1) as store:
                _check_trace([s.step_index for s in await store.all(session)], acked)


def _run_writers(kind: str, target: str, processes: int, count: int) -> None:
    procs = [_spawn(kind, target, "shared", count, f"p{n}") for n in range(processes)]
    for proc in procs:
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0
        assert out.split()[-1] == str(count - 1)


def _check_interleaving(steps: list[RunStep], processes: int, count: int) -> None:
    assert len(steps) == processes * count
    for n in range(processes):
        mine = [int(s.content.split(":")[1]) for s in steps if s.content.startswith(f"p{n}:")]
        assert mine == list(range(count))


async def test_sqlite_four_processes_one_file(tmp_path: Path) -> None:
    """4 processes open one new file and append to one session: nothing lost, order kept."""
    path = str(tmp_path / "shared.db")
    await trio.to_thread.run_sync(_run_writers, "sqlite", path, 4, 150)
    async with await SqliteStore.open(path) as store:
        _check_interleaving(await store.all("shared"), 4, 150)
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]


async def test_postgres_four_processes_one_schema(postgres_dsn: str) -> None:
    """4 processes create one new schema and append to one session: nothing lost, order kept."""
    dsn = postgres_dsn
    async with fresh_schema(dsn) as schema:
        await trio.to_thread.run_sync(_run_writers, "postgres", f"{dsn}:{schema}", 4, 150)
        async with await PostgresStore.open(dsn, schema=schema, pool_size=1) as store:
            _check_interleaving(await store.all("shared"), 4, 150)
