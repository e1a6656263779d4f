"""``agentloop.run_whole``: a client call is cancelled before it starts, or runs whole.

Under trio and asyncio; under asyncio also against ``Task.cancel()`` and a
client library that swallows the cancellation it receives (redis-py does).
"""

from __future__ import annotations

import asyncio

import anyio
import anyio.lowlevel
import pytest

from agentloop import run_whole

pytestmark = pytest.mark.anyio


class Client:
    """A client call that waits for ``go``, then records that it happened."""

    def __init__(self) -> None:
        self.started = anyio.Event()
        self.go = anyio.Event()
        self.done: list[str] = []

    async def call(self) -> str:
        self.started.set()
        await self.go.wait()
        self.done.append("written")
        return "reply"


async def test_a_call_cancelled_before_it_starts_does_nothing() -> None:
    client = Client()
    with anyio.CancelScope() as scope:
        scope.cancel()
        await run_whole(client.call, seconds=10)
    assert scope.cancelled_caught
    assert not client.started.is_set()


async def test_a_call_cancelled_midway_finishes_and_the_cancellation_lands_after() -> None:
    """The scope is cancelled while the call runs: it returns its reply, then the next
    checkpoint raises the cancellation."""
    client = Client()
    replies: list[str] = []
    after: list[str] = []
    async with anyio.create_task_group() as tasks:

        async def caller() -> None:
            replies.append(await run_whole(client.call, seconds=10))
            try:
                await anyio.lowlevel.checkpoint()
            except anyio.get_cancelled_exc_class():
                after.append("cancelled")
                raise
            after.append("not cancelled")

        tasks.start_soon(caller)
        await client.started.wait()
        tasks.cancel_scope.cancel()
        client.go.set()
    assert replies == ["reply"]
    assert client.done == ["written"]
    assert after == ["cancelled"]


async def test_what_the_call_raises_propagates() -> None:
    async def fails() -> None:
        raise ConnectionError("refused")

    with pytest.raises(ConnectionError, match="refused"):
        await run_whole(fails, seconds=10)


async def test_a_call_past_its_timeout_raises_timeout_error() -> None:
    async def hangs() -> None:
        await anyio.sleep_forever()

    with pytest.raises(TimeoutError, match=r"did not finish within 0.01s"):
        await run_whole(hangs, seconds=0.01)


async def test_the_bound_is_checked() -> None:
    async def nothing() -> None:
        raise AssertionError("never called")

    with pytest.raises(ValueError, match=r"^seconds must be a finite number of seconds > 0"):
        await run_whole(nothing, seconds=0)
    with pytest.raises(TypeError, match=r"^seconds must be a number of seconds"):
        await run_whole(nothing, seconds="1")  # type: ignore[arg-type]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_task_cancel_midway_is_kept_for_the_next_suspension() -> None:
    """``Task.cancel()`` while the call runs: the reply comes back, the next suspension
    raises, and the task's cancelling() count is the one request."""
    client = Client()
    seen: list[object] = []

    async def caller() -> None:
        seen.append(await run_whole(client.call, seconds=10))
        task = asyncio.current_task()
        assert task is not None
        seen.append(task.cancelling())
        try:
            await asyncio.sleep(0)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    task = asyncio.get_running_loop().create_task(caller())
    await client.started.wait()
    task.cancel()
    await asyncio.sleep(0)
    client.go.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen == ["reply", 1, "cancelled"]
    assert client.done == ["written"]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_client_that_swallows_cancellation_cannot_lose_the_callers() -> None:
    """A client whose internal await eats ``CancelledError``: bare, the caller's
    ``Task.cancel()`` is lost; through run_whole it lands after the call."""
    go = asyncio.Event()

    async def swallowing() -> str:
        try:
            await go.wait()
        except asyncio.CancelledError:
            await go.wait()  # the library finishes reading its reply instead
        return "reply"

    async def caller(wrapped: bool) -> str:
        reply = await (run_whole(swallowing, seconds=10) if wrapped else swallowing())
        await asyncio.sleep(0)
        return f"{reply}, not cancelled"

    outcomes = []
    for wrapped in (False, True):
        go.clear()
        task = asyncio.get_running_loop().create_task(caller(wrapped))
        for _ in range(3):
            await asyncio.sleep(0)
        task.cancel()
        await asyncio.sleep(0)
        go.set()
        try:
            outcomes.append(await task)
        except asyncio.CancelledError:
            outcomes.append("cancelled")
    assert outcomes == ["reply, not cancelled", "cancelled"]
