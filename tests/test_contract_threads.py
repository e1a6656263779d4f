"""A store doing its work in worker threads, as the SQL stores do, passes the contract.

Cancellation then lands between thread hops, and a call cancelled while its
thread runs finishes that work first: the contract must accept "happened"
as well as "did not happen", never a false failure.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Iterator
from functools import partial
from typing import Any, TypeVar

import pytest
import trio
from broken.leases import Leased

from agentlooptest import Harness, certify

T = TypeVar("T")


class _Backend:
    """A "database server": its own trio loop in its own thread, reached from worker threads."""

    def __init__(self) -> None:
        ready = threading.Event()
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.Event | None = None

        async def serve() -> None:
            self._token = trio.lowlevel.current_trio_token()
            self._stop = trio.Event()
            ready.set()
            await self._stop.wait()

        self._thread = threading.Thread(target=trio.run, args=(serve,), daemon=True)
        self._thread.start()
        ready.wait()

    def run(self, fn: Callable[[], Awaitable[T]]) -> T:
        """Run ``fn`` on the backend loop, from a worker thread."""
        return trio.from_thread.run(fn, trio_token=self._token)

    def close(self) -> None:
        """Stop the backend loop and its thread."""
        assert self._stop is not None
        trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
        self._thread.join()


_backend: list[_Backend] = []


class Threaded:
    """Every call runs the reference store's logic in a worker thread, two hops per write.

    ``inner`` and ``lock`` are given for a fenced view, which shares its store's lock.
    """

    def __init__(self, inner: Any = None, lock: threading.Lock | None = None) -> None:
        self._inner = inner if inner is not None else Leased()
        self._lock = lock if lock is not None else threading.Lock()

    def _sync(self, name: str, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return _backend[0].run(partial(getattr(self._inner, name), *args, **kwargs))

    async def _hop(self, fn: Callable[[], T]) -> T:
        return await trio.to_thread.run_sync(fn)

    async def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        await self._hop(lambda: None)  # a first round trip, like BEGIN
        return await self._hop(lambda: self._sync(name, *args, **kwargs))

    async def append(self, step: Any) -> None:
        """See GoodBoth."""
        await self._call("append", step)

    async def last_n(self, session_id: str, n: int) -> Any:
        """See GoodBoth."""
        return await self._call("last_n", session_id, n)

    async def all(self, session_id: str) -> Any:
        """See GoodBoth."""
        return await self._call("all", session_id)

    async def get(self, session_id: str) -> Any:
        """See GoodBoth."""
        return await self._call("get", session_id)

    async def exists(self, session_id: str) -> Any:
        """See GoodBoth."""
        return await self._call("exists", session_id)

    async def update_data(self, session_id: str, snapshot: Any) -> None:
        """See GoodBoth."""
        await self._call("update_data", session_id, snapshot)

    async def finalize(self, session_id: str, summary: Any) -> None:
        """See GoodBoth."""
        await self._call("finalize", session_id, summary)

    async def put(self, session: Any) -> None:
        """See GoodBoth."""
        await self._call("put", session)

    async def final(self, session_id: str) -> Any:
        """See GoodBoth."""
        return await self._call("final", session_id)

    async def list_sessions(self, *, limit: Any = 100) -> Any:
        """See GoodBoth."""
        return await self._call("list_sessions", limit=limit)

    async def delete_session(self, session_id: str) -> Any:
        """See GoodBoth."""
        return await self._call("delete_session", session_id)

    async def append_many(self, steps: Any) -> None:
        """See GoodBoth."""
        await self._call("append_many", steps)

    async def get_many(self, session_ids: Any) -> Any:
        """See GoodBoth."""
        return await self._call("get_many", session_ids)

    async def revision(self, session_id: str) -> Any:
        """See GoodBoth."""
        return await self._call("revision", session_id)

    async def update_data_if(self, session_id: str, snapshot: Any, revision: Any) -> Any:
        """See GoodBoth."""
        return await self._call("update_data_if", session_id, snapshot, revision)

    async def acquire_lease(self, session_id: str, owner: str, ttl: Any) -> Any:
        """See Leased."""
        return await self._call("acquire_lease", session_id, owner, ttl)

    async def renew_lease(self, lease: Any, ttl: Any) -> Any:
        """See Leased."""
        return await self._call("renew_lease", lease, ttl)

    async def release_lease(self, lease: Any) -> None:
        """See Leased."""
        await self._call("release_lease", lease)

    def fenced(self, lease: Any) -> Threaded:
        """See Leased: the view's fence check and write run together in the worker thread."""
        return Threaded(self._inner.fenced(lease), self._lock)

    async def aclose(self) -> None:
        """See GoodBoth."""
        await self._call("aclose")


async def _new() -> Threaded:
    return Threaded()


async def _same(store: Any) -> Any:
    return store


@pytest.fixture
def backend() -> Iterator[None]:
    """The backend loop the threaded stores reach, for one test."""
    _backend.append(_Backend())
    yield
    _backend.pop().close()


@pytest.mark.usefixtures("backend")
async def test_threaded_store_passes_everything() -> None:
    """Every clause passes for a correct store whose calls hop through worker threads."""
    report = await certify(Harness(new_step_store=_new, new_session_store=_new, reopen=_same))
    assert report.failed == (), "\n\n".join(r.message for r in report.failed)
    lacking = {"session.lease-clock", "step.prune", "step.steps-after", "session.paging"}
    lacking |= {"session.labels", "session.expire", "session.fork", "session.transfer"}
    assert {r.id.rpartition(".")[0] for r in report.skipped} == lacking  # optional capabilities
