"""The in-memory stores lose nothing under concurrent tasks (trio or asyncio) and OS threads."""

from __future__ import annotations

import threading

import anyio
import pytest
import trio

from agentloop import RunStep, StepType
from agentloopmem import SessionStore, StepStore


@pytest.mark.anyio
async def test_ten_thousand_concurrent_appends_over_100_sessions() -> None:
    """10,000 appends from concurrent tasks over 100 sessions: none lost, each task's order kept."""
    store = StepStore()
    tasks, per_task = 200, 50

    async def writer(task: int) -> None:
        for i in range(per_task):
            await store.append(RunStep(f"s{task % 100}", i, StepType.user, content=f"{task}:{i}"))

    async with anyio.create_task_group() as group:
        for task in range(tasks):
            group.start_soon(writer, task)

    total = 0
    for sid in range(100):
        steps = await store.all(f"s{sid}")
        total += len(steps)
        for task in (sid, sid + 100):
            mine = [s.content for s in steps if s.content.split(":")[0] == str(task)]
            assert mine == [f"{task}:{i}" for i in range(per_task)]
    assert total == tasks * per_task


def test_appends_from_four_threads_each_with_its_own_trio_run() -> None:
    """Four OS threads, each in its own trio.run, share one store and lose nothing."""
    steps = StepStore()
    sessions = SessionStore()
    per_thread = 2_000
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    async def work(thread: int) -> None:
        for i in range(per_thread):
            await steps.append(RunStep("shared", i, StepType.user, content=f"{thread}:{i}"))
            await steps.append(RunStep(f"own{thread}", i, StepType.user))
            await sessions.update_data(f"own{thread}", str(i))

    def run(thread: int) -> None:
        try:
            barrier.wait()
            trio.run(work, thread)
        except BaseException as exc:  # reported below, from the test's own thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []

    async def check() -> None:
        shared = await steps.all("shared")
        assert len(shared) == 4 * per_thread
        for thread in range(4):
            mine = [s.content for s in shared if s.content.startswith(f"{thread}:")]
            assert mine == [f"{thread}:{i}" for i in range(per_thread)]
            assert len(await steps.all(f"own{thread}")) == per_thread
            assert (await sessions.get(f"own{thread}")).data == str(per_thread - 1)

    trio.run(check)


@pytest.mark.anyio
async def test_concurrent_update_data_ends_with_one_written_value() -> None:
    """Racing update_data calls on one session leave exactly one of the written values."""
    store = SessionStore()
    written = [f'{{"writer": {i}}}' for i in range(100)]
    async with anyio.create_task_group() as group:
        for text in written:
            group.start_soon(store.update_data, "s", text)
    assert (await store.get("s")).data in written
