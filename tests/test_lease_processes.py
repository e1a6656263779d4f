"""Leases across real processes: runs of one session never interleave; a paused holder is fenced."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio
from _docs import block
from _sql_support import SqlTarget, fresh_schema

from agentloop import RunStep, StepType
from agentloopsql import PostgresStore, SqliteStore

CHILD = str(Path(__file__).with_name("lease_child.py"))
REPO = str(Path(__file__).resolve().parents[1])
PROCESSES, RUNS_EACH, SESSIONS = 4, 6, ("a", "b", "c")


def _spawn(*args: str) -> subprocess.Popen[str]:
    """A child running this checkout's code (not whatever copy the interpreter has installed)."""
    path = os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH", "")) if p)
    return subprocess.Popen(
        [sys.executable, CHILD, *args],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": path},
    )


def _finish(proc: subprocess.Popen[str], timeout: float = 60) -> list[dict[str, Any]]:
    """The child's JSON lines, once it exited cleanly."""
    out, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, out
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


@asynccontextmanager
async def _target(sql_target: SqlTarget, tmp_path: Path) -> AsyncIterator[tuple[str, str]]:
    """``(kind, target)`` for the children: a SQLite file or a fresh PostgreSQL schema."""
    if sql_target.dsn is None:
        yield "sqlite", str(tmp_path / "shared.db")
        return
    async with fresh_schema(sql_target.dsn) as schema:
        # Created once here, so the children do not race to create the tables.
        await (await PostgresStore.open(sql_target.dsn, schema=schema, pool_size=1)).aclose()
        yield "postgres", f"{sql_target.dsn}:{schema}"


@asynccontextmanager
async def _store(kind: str, target: str) -> AsyncIterator[SqliteStore | PostgresStore]:
    if kind == "sqlite":
        async with await SqliteStore.open(target) as lite:
            yield lite
        return
    dsn, _, schema = target.rpartition(":")
    async with await PostgresStore.open(dsn, schema=schema, pool_size=1) as pg:
        yield pg


def _run_tag(step: RunStep) -> str:
    """The tag of the run that wrote ``step`` (every step of a child's run carries it)."""
    if step.step_type is StepType.tool_call:
        return str(json.loads(step.tool_args)["tag"])
    return step.content.removeprefix("done ")


def _check_runs(steps: Sequence[RunStep]) -> list[str]:
    """Steps are 0..n-1, in whole runs of user/tool_call/tool_result/response; their tags."""
    assert [s.step_index for s in steps] == list(range(len(steps))), "duplicated or missing index"
    kinds = [StepType.user, StepType.tool_call, StepType.tool_result, StepType.response]
    tags = []
    for start in range(0, len(steps), 4):
        run = steps[start : start + 4]
        assert [s.step_type for s in run] == kinds, f"interleaved run at {start}"
        assert len({_run_tag(s) for s in run}) == 1, f"interleaved run at {start}"
        tags.append(_run_tag(run[0]))
    return tags


async def test_runs_of_one_session_never_interleave(sql_target: SqlTarget, tmp_path: Path) -> None:
    """4 processes x 6 runs on 3 sessions: no duplicate index, no interleaving, all accounted."""
    async with _target(sql_target, tmp_path) as (kind, target):
        procs = [
            _spawn("runs", kind, target, f"p{p}", str(RUNS_EACH), *SESSIONS)
            for p in range(PROCESSES)
        ]
        reports = [await trio.to_thread.run_sync(_finish, proc) for proc in procs]
        outcomes = [line for report in reports for line in report]
        assert len(outcomes) == PROCESSES * RUNS_EACH
        unexpected = [line for line in outcomes if line["outcome"] not in ("completed", "busy")]
        assert unexpected == [], "runs ended otherwise than completed or SessionBusyError"
        async with _store(kind, target) as store:
            for session in SESSIONS:
                stored = _check_runs(await store.all(session))
                completed = [
                    line["tag"]
                    for line in outcomes
                    if line["session"] == session and line["outcome"] == "completed"
                ]
                assert sorted(stored) == sorted(completed)
                final = await store.final(session)
                assert final is not None
                assert final.status == "completed"


def _pause_and_take_over(kind: str, target: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Stop the holder mid-run past its 1 s TTL, run a taker, resume the holder; both reports."""
    holder = _spawn("hold", kind, target, "p")
    assert holder.stdout is not None
    try:
        assert holder.stdout.readline().strip() == "in-tool"
        os.kill(holder.pid, signal.SIGSTOP)
        time.sleep(1.5)  # the holder's lease expires (its renewer is stopped too)
        taker = _finish(_spawn("runs", kind, target, "taker", "1", "p"))
    finally:
        os.kill(holder.pid, signal.SIGCONT)
    [held] = _finish(holder)
    return held, taker


async def test_paused_holder_writes_nothing_after_takeover(
    sql_target: SqlTarget, tmp_path: Path
) -> None:
    """SIGSTOP past the TTL, takeover, SIGCONT: each write of the old holder is LeaseLostError."""
    async with _target(sql_target, tmp_path) as (kind, target):
        held, taker = await trio.to_thread.run_sync(_pause_and_take_over, kind, target)
        assert taker == [{"tag": "taker-0", "session": "p", "outcome": "completed", "detail": ""}]
        assert held["run"] == "LeaseLostError"
        assert held["writes"] == dict.fromkeys(
            ["append", "update_data", "finalize", "put", "renew_lease"], "LeaseLostError"
        )
        async with _store(kind, target) as store:
            steps = await store.all("p")
            # The holder's user and tool_call steps, then the taker's whole run; nothing later.
            assert [(s.step_index, _run_tag(s)) for s in steps] == [
                (0, "held"),
                (1, "held"),
                (2, "taker-0"),
                (3, "taker-0"),
                (4, "taker-0"),
                (5, "taker-0"),
            ]
            session = await store.get("p")
            assert session.data is None
            final = await store.final("p")
            assert final is not None
            assert final.status == "completed"
            assert final.step_count == 4


def test_readme_example_runs() -> None:
    """The "Several workers on one store" how-to's example runs and prints what it says."""
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", block("howto/workers.md")],
        cwd=REPO,  # this checkout's packages, not an installed copy
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["completed", "completed", "[0, 1, 2, 3]"]
