"""Review findings for the contract under asyncio: stores that raise ``CancelledError`` themselves.

Under asyncio ``CancelledError`` is a ``BaseException`` any store can raise.
One that does so although nothing cancelled the call must fail the clause
(or the factory, or the cleanup) it happened in, with a clear message; it
must not end ``certify`` (or the CLI) with a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import anyio
import pytest
import trio
from broken._good import GoodBoth
from broken.leases import Fenced, Leased

from agentloop import Lease, RunStep, Session
from agentlooptest import Harness, Report, certify


class CancelsLastN(GoodBoth):
    """``last_n`` raises a bare ``CancelledError``."""

    async def last_n(self, session_id: str, n: int) -> list[RunStep]:
        raise asyncio.CancelledError


class CancelsOnClose(GoodBoth):
    """``aclose`` raises a bare ``CancelledError``."""

    async def aclose(self) -> None:
        raise asyncio.CancelledError


def harness_of(cls: type, **extra: Any) -> Harness:
    async def new() -> Any:
        return cls()

    return Harness(new_step_store=new, new_session_store=new, **extra)


def certify_asyncio(harness: Harness, pattern: str) -> Report:
    async def run() -> Report:
        return await certify(harness, pattern=pattern, clause_timeout=20)

    return anyio.run(run, backend="asyncio")


def test_a_store_call_raising_cancelled_fails_its_clause() -> None:
    report = certify_asyncio(harness_of(CancelsLastN), "step.order.oldest-first")
    [result] = report.results
    assert result.outcome == "failed"
    assert "CancelsLastN.last_n" in result.message
    assert "raised CancelledError, although nothing cancelled it" in result.message


def test_a_factory_raising_cancelled_fails_the_factory() -> None:
    async def new() -> Any:
        raise asyncio.CancelledError

    report = certify_asyncio(
        Harness(new_step_store=new, new_session_store=new), "step.order.oldest-first"
    )
    [result] = report.results
    assert result.outcome == "failed"
    assert "[step.factory]" in result.message
    assert "SpuriousCancel" in result.message


def test_an_aclose_raising_cancelled_fails_the_factory_probe() -> None:
    report = certify_asyncio(harness_of(CancelsOnClose), "session.get.unknown*")
    assert report.results
    assert report.results[0].outcome == "failed"
    assert all(r.outcome == "not run" for r in report.results[1:])
    assert "CancelledError" in report.results[0].message


def test_a_cleanup_raising_cancelled_is_reported() -> None:
    async def cleanup() -> None:
        raise asyncio.CancelledError

    report = certify_asyncio(harness_of(GoodBoth, cleanup=cleanup), "step.order.oldest-first")
    [result] = report.results
    assert result.outcome == "failed"
    assert "cleanup() raised CancelledError" in result.message
    assert any("cleanup() raised CancelledError" in note for note in report.notes)


def test_a_real_cancellation_still_cancels_certify() -> None:
    """A ``Task.cancel()`` of the task running certify is not taken for the store's own."""

    class Slow(GoodBoth):
        async def last_n(self, session_id: str, n: int) -> list[RunStep]:
            await asyncio.sleep(30)
            return []

    async def run() -> None:
        task = asyncio.ensure_future(certify(harness_of(Slow), pattern="step.order.oldest-first"))
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(run())


_TARGET = textwrap.dedent(
    """
    import asyncio
    from agentlooptest import Harness
    from broken._good import GoodBoth

    class CancelsLastN(GoodBoth):
        async def last_n(self, session_id, n):
            raise asyncio.CancelledError()

    async def new():
        return CancelsLastN()

    harness = Harness(new_step_store=new, new_session_store=new)
    """
)


def test_cli_reports_it_and_exits_1(tmp_path: Path) -> None:
    (tmp_path / "cancelling_store.py").write_text(_TARGET)
    tests = Path(__file__).resolve().parent
    root = tests.parent
    out = tmp_path / "report.json"
    done = subprocess.run(
        [
            *(sys.executable, "-m", "agentlooptest", "certify", "--backend", "asyncio"),
            *("-k", "step.order.*", "--json", str(out), "cancelling_store:harness"),
        ],
        cwd=tmp_path,
        env={"PYTHONPATH": f"{root}:{tests}", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    doc = json.loads(out.read_text())
    assert doc["ok"] is False
    [target] = doc["targets"]
    results = target["results"]
    assert results
    assert all(r["outcome"] == "failed" for r in results)
    assert "raised CancelledError" in results[0]["message"]


class SwallowsTaskCancel(GoodBoth):
    """``append`` swallows a ``CancelledError`` and appends anyway: a ``Task.cancel()`` is lost."""

    async def append(self, step: RunStep) -> None:
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(0)
        await super().append(step)


class UncancelsTaskCancel(GoodBoth):
    """``append`` withdraws the caller's request (``uncancel()``) and appends anyway."""

    async def append(self, step: RunStep) -> None:
        task = asyncio.current_task()
        assert task is not None
        try:
            await asyncio.sleep(0)
        except asyncio.CancelledError:
            task.uncancel()
        await super().append(step)


@pytest.mark.parametrize("cls", [SwallowsTaskCancel, UncancelsTaskCancel])
def test_a_store_swallowing_task_cancel_fails_the_cancel_clause(cls: type) -> None:
    """An anyio scope re-delivers a swallowed cancellation; a native ``Task.cancel()`` does not.

    So these stores pass the scope-based points; the native ones catch them.
    """
    report = certify_asyncio(harness_of(cls), "step.cancel.append")
    [result] = report.results
    assert result.outcome == "failed"
    assert "Task.cancel()" in result.message
    assert "the cancellation was never delivered" in result.message
    assert "hint:     the store, or a client library it calls (redis-py does)" in result.message
    assert "agentloop.run_whole" in result.message


def test_a_correct_store_passes_the_task_cancel_points() -> None:
    report = certify_asyncio(harness_of(GoodBoth), "step.cancel.append")
    assert [r.outcome for r in report.results] == ["passed"]


class SwallowsInFinalize(GoodBoth):
    """``finalize`` swallows a ``CancelledError`` and finalizes anyway."""

    async def finalize(self, session_id: str, summary: Any) -> None:
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(0)
        await super().finalize(session_id, summary)


def test_a_session_write_swallowing_task_cancel_fails_the_cancel_clause() -> None:
    report = certify_asyncio(harness_of(SwallowsInFinalize), "session.cancel.writes")
    [result] = report.results
    assert result.outcome == "failed"
    assert "finalize(<id>, <completed summary>)" in result.message
    assert "the cancellation was never delivered" in result.message


def test_a_correct_store_passes_the_session_task_cancel_points() -> None:
    report = certify_asyncio(harness_of(GoodBoth), "session.cancel.*")
    assert {r.outcome for r in report.results} == {"passed"}


def test_a_clause_timeout_ends_a_native_point_whose_store_hangs() -> None:
    """A store that hangs in a native ``Task.cancel()`` point still fails as hung, in time."""

    class HangsWhenCancelled(GoodBoth):
        async def append(self, step: RunStep) -> None:
            try:
                await asyncio.sleep(0)
            except asyncio.CancelledError:
                await asyncio.Event().wait()  # a cleanup that never ends
            await super().append(step)

    async def run() -> Report:
        return await certify(
            harness_of(HangsWhenCancelled), pattern="step.cancel.append", clause_timeout=1
        )

    [result] = anyio.run(run, backend="asyncio").results
    assert result.outcome == "failed"
    assert "still running" in result.message


def test_a_cancelled_error_in_the_model_based_clause_is_the_store_s() -> None:
    """Through the portal the model-based machine uses, it is not taken for the clause's cancel."""

    class CancelsAppend(GoodBoth):
        async def append(self, step: RunStep) -> None:
            raise asyncio.CancelledError

    [result] = certify_asyncio(harness_of(CancelsAppend), "step.model-based").results
    assert result.outcome == "failed"
    assert "cancelled from outside" not in result.message
    assert "CancelledError raised although nothing cancelled the call" in result.message


def test_under_trio_an_asyncio_cancelled_error_is_the_store_s() -> None:
    """trio cancels with ``trio.Cancelled``: an ``asyncio.CancelledError`` is always the store's."""

    async def run() -> Report:
        return await certify(harness_of(CancelsLastN), pattern="step.order.oldest-first")

    [result] = trio.run(run).results
    assert result.outcome == "failed"
    assert "raised CancelledError, although nothing cancelled it" in result.message


def test_cli_a_target_raising_cancelled_is_a_target_error(tmp_path: Path) -> None:
    """A target callable raising ``CancelledError`` is a one-line error (exit 2), no traceback."""
    (tmp_path / "cancelling_target.py").write_text(
        "import asyncio\n\ndef make():\n    raise asyncio.CancelledError()\n"
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "agentlooptest",
            "certify",
            "--backend=asyncio",
            "cancelling_target:make",
        ],
        cwd=tmp_path,
        env={"PYTHONPATH": str(Path(__file__).resolve().parent.parent), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "CancelledError" in done.stderr


def test_a_group_of_cancellations_from_the_store_fails_its_clause() -> None:
    """A store's own task group raising only ``CancelledError``s is reported like one."""

    class CancelsInAGroup(GoodBoth):
        async def last_n(self, session_id: str, n: int) -> list[RunStep]:
            raise BaseExceptionGroup("the store's tasks", [asyncio.CancelledError()])

    report = certify_asyncio(harness_of(CancelsInAGroup), "step.order.oldest-first")
    [result] = report.results
    assert result.outcome == "failed"
    assert "raised CancelledError, although nothing cancelled it" in result.message


class SwallowsInBatch(GoodBoth):
    """``append_many`` swallows a ``CancelledError`` and appends anyway (a client library
    reading its reply to the end)."""

    async def append_many(self, steps: list[RunStep]) -> None:
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(0)
        await super().append_many(steps)


def test_a_batch_swallowing_task_cancel_fails_the_batch_cancel_clause() -> None:
    """Task.cancel() is tried against append_many too, not only append."""
    report = certify_asyncio(harness_of(SwallowsInBatch), "step.append-many.cancel")
    result = report.result("step.append-many.cancel")
    assert result.outcome == "failed"
    assert "append_many of 4 steps" in result.message
    assert "Task.cancel()" in result.message
    assert "the cancellation was never delivered" in result.message


class SwallowsInAcquire(Leased):
    """``acquire_lease`` swallows a ``CancelledError`` and grants anyway."""

    async def acquire_lease(self, session_id: str, owner: str, ttl: float) -> Lease | None:
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(0)
        return await super().acquire_lease(session_id, owner, ttl)


class SwallowsInRelease(Leased):
    """``release_lease`` swallows a ``CancelledError`` and releases anyway."""

    async def release_lease(self, lease: Lease) -> None:
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(0)
        await super().release_lease(lease)


class SwallowsInFencedWrite(Leased):
    """A fenced ``update_data`` swallows a ``CancelledError`` and writes anyway."""

    def fenced(self, lease: Lease) -> Any:
        return _SwallowingView(self, lease)


class _SwallowingView(Fenced):
    async def update_data(self, session_id: str, snapshot: str | None) -> None:
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(0)
        await super().update_data(session_id, snapshot)


class SwallowsInGetMany(GoodBoth):
    """``get_many`` swallows a ``CancelledError`` and reads anyway."""

    async def get_many(self, session_ids: list[str]) -> list[Session]:
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(0)
        return await super().get_many(session_ids)


class SwallowsInAclose(GoodBoth):
    """``aclose`` swallows a ``CancelledError`` and closes anyway."""

    async def aclose(self) -> None:
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(0)
        await super().aclose()


@pytest.mark.parametrize(
    ("cls", "clause_id", "call"),
    [
        (SwallowsInAcquire, "session.lease-calls.cancel", "acquire_lease("),
        (SwallowsInRelease, "session.lease-calls.cancel", "release_lease("),
        (SwallowsInFencedWrite, "session.lease-calls.cancel", "fenced(<lease of"),
        (SwallowsInGetMany, "session.get-many.cancel", "get_many("),
        (SwallowsInAclose, "session.closed.cancel", "aclose()"),
    ],
)
def test_a_call_swallowing_task_cancel_fails_its_cancel_clause(
    cls: type, clause_id: str, call: str
) -> None:
    """Lease calls, fenced writes, get_many and aclose meet a native ``Task.cancel()`` too;
    a swallowed one fails the clause, naming the call."""
    report = certify_asyncio(harness_of(cls), clause_id)
    [result] = report.results
    assert result.outcome == "failed", cls.__name__
    assert "Task.cancel()" in result.message
    assert "the cancellation was never delivered" in result.message
    assert f"did:      {call}" in result.message


def test_a_correct_store_passes_the_new_task_cancel_points() -> None:
    report = certify_asyncio(harness_of(Leased), "session.[lcg][eil]*.cancel")
    assert [(r.id, r.outcome) for r in report.results] == [
        ("session.closed.cancel", "passed"),
        ("session.get-many.cancel", "passed"),
        ("session.lease-calls.cancel", "passed"),
    ]
