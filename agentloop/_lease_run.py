"""A leased run: acquire the session's lease, write through its fenced view, renew, release.

The whole of the loop's lease handling. A run's owner is fresh
(``host:pid:random-n``); the lease is waited for up to ``lease_wait``; the
run writes through ``fenced(lease)``; a task of the run's own task group
renews the lease every ``lease_ttl / 3``; the lease is released at the end,
shielded and bounded by ``finalize_timeout``. See "The loop and session
leases" in ``docs/decisions.md``.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import random
import secrets
import socket
from typing import TYPE_CHECKING, cast

import anyio

from agentloop._backend import deliver_later, finish_shielded
from agentloop._errors import (
    LeaseLostError,
    SessionBusyError,
    StoreError,
    describe,
    describe_message,
)
from agentloop._events import LoopWarning
from agentloop._lease import Lease, SupportsLease
from agentloop._run import Run, RunStores

if TYPE_CHECKING:
    from agentloop._config import LoopConfig, RunResult
    from agentloop._events import EventHandler
    from agentloop._protocols import SessionStore, StepStore
    from agentloop._run import RunParts

# The wait for a busy lease polls: first after ~10 ms, doubling up to ~0.5 s, each
# delay jittered down to half so that workers waiting on one session spread out.
_FIRST_POLL = 0.01
_LAST_POLL = 0.5


def _host() -> str:
    """This machine's name as it can go into an owner (at most 64 ASCII characters)."""
    name = socket.gethostname().encode("ascii", "replace").decode("ascii")
    return name.replace("\x00", "?")[:64] or "host"


class _Process:
    """This process's part of every owner: ``host:pid:random``, remade in a forked child.

    The 64 random bits tell apart two processes that had one pid in turn, even
    one forked from the same parent (``os.register_at_fork``).
    """

    prefix = ""
    runs: itertools.count[int] = itertools.count()

    @classmethod
    def renew(cls) -> None:
        cls.prefix = f"{_host()}:{os.getpid()}:{secrets.token_hex(8)}-"
        cls.runs = itertools.count()


_Process.renew()
os.register_at_fork(after_in_child=_Process.renew)


def new_owner() -> str:
    """A lease owner unique to one run: ``host:pid:random-n`` (``n`` counts this process's runs)."""
    return f"{_Process.prefix}{next(_Process.runs)}"


def covers_appends(sessions: SessionStore, steps: StepStore) -> bool:
    """Whether ``sessions``' fenced views also fence appends to ``steps``.

    True when ``sessions`` is ``steps`` (one combined store, e.g. the SQL
    stores) or names ``steps`` as the step store it covers (its ``steps``
    attribute, e.g. ``agentloopmem.SessionStore(steps=steps)``). Such a store's
    fenced view must then be a ``StepStore`` too: the run appends through it.
    """
    covered: object = getattr(sessions, "steps", None)
    return covered is steps or steps is cast(object, sessions)


def _try_bound(config: LoopConfig, deadline: float) -> float:
    """When one ``acquire_lease`` try must have answered (the last try, made at
    ``deadline``, gets one poll interval); no bound with ``lease_wait=0``.

    A store that cannot answer (a file locked by another process) so counts
    against ``lease_wait``: acquiring takes at most ``lease_wait`` plus one poll.
    """
    if config.lease_wait <= 0:
        return math.inf
    return max(deadline, anyio.current_time() + _LAST_POLL)


async def _acquire_once(
    sessions: SupportsLease, session_id: str, owner: str, config: LoopConfig
) -> Lease | None:
    """One ``acquire_lease`` call.

    Raises:
        StoreError: it failed or returned neither a ``Lease`` nor ``None``.
    """
    try:
        lease = await sessions.acquire_lease(session_id, owner, config.lease_ttl)
    except Exception as exc:
        raise StoreError(
            f"acquire_lease failed for session {session_id!r}: {describe_message(exc)}"
        ) from exc
    if lease is not None and not isinstance(lease, Lease):
        raise StoreError(
            f"acquire_lease failed for session {session_id!r}: the store returned "
            f"{type(lease).__name__}, not a Lease or None"
        )
    return lease


async def acquire(
    sessions: SupportsLease, session_id: str, owner: str, config: LoopConfig
) -> Lease:
    """The session's lease for ``owner``, polled for up to ``lease_wait`` while another holds it.

    Raises:
        SessionBusyError: another owner held it for the whole wait; nothing
            was written.
        StoreError: ``acquire_lease`` failed, or did not answer within
            ``lease_wait`` (plus one poll); nothing was written.

    **Cancellation**: a cancelled wait holds no lease.
    """
    deadline = anyio.current_time() + config.lease_wait
    delay = _FIRST_POLL
    while True:
        with anyio.CancelScope(deadline=_try_bound(config, deadline)) as scope:
            lease = await _acquire_once(sessions, session_id, owner, config)
        if scope.cancelled_caught:
            raise StoreError(
                f"acquire_lease did not finish within lease_wait ({config.lease_wait}s) for "
                f"session {session_id!r}: the store did not answer in time; nothing was written"
            )
        if lease is not None:
            return lease
        left = deadline - anyio.current_time()
        if left <= 0:
            raise SessionBusyError(
                f"session {session_id!r} is busy: another owner held its lease for the whole "
                f"lease_wait ({config.lease_wait}s); nothing was written"
            )
        await anyio.sleep(min(delay * random.uniform(0.5, 1.0), left))
        delay = min(delay * 2, _LAST_POLL)


def _fenced_stores(
    parts: RunParts, sessions: SupportsLease, lease: Lease, covered: bool
) -> RunStores:
    """The run's stores on ``fenced(lease)``: session writes always, appends when ``covered``.

    Raises:
        StoreError: ``fenced`` failed (``__cause__``: the store's exception).
    """
    try:
        view = sessions.fenced(lease)
    except Exception as exc:
        raise StoreError(
            f"fenced failed for session {lease.session_id!r}: {describe_message(exc)}"
        ) from exc
    steps = cast("StepStore", view) if covered else parts.steps
    return RunStores(steps, view, lease.session_id)


class LeaseHolder:
    """One run's hold on its lease: renewed in the background while the run goes on, then released.

    A renew that finds the lease taken over marks the run's stores
    (``RunStores.lease_lost``: no further write) and cancels the run at once;
    the run then raises that ``LeaseLostError``. Any other renew failure (or a
    renew slower than the interval) is a ``LoopWarning`` and the next renew is
    tried on time: the fenced writes still refuse a run whose lease was taken
    over meanwhile.
    """

    def __init__(
        self, sessions: SupportsLease, lease: Lease, config: LoopConfig, emit: EventHandler | None
    ) -> None:
        self._sessions = sessions
        self._lease = lease
        self._config = config
        self._emit = emit
        self._renew_lost: LeaseLostError | None = None
        self._task_name = f"agentloop lease renewal of {lease.session_id!r}"

    def _warn(self, message: str) -> None:
        if self._emit is not None:
            with contextlib.suppress(Exception):  # a warning must not fail what it reports on
                self._emit(LoopWarning(self._lease.session_id, message))

    async def hold_and_run(self, parts: RunParts, covered: bool, message: str) -> RunResult:
        """The run on ``fenced(lease)``, renewed in the background, then the lease released.

        Raises:
            LeaseLostError: a fenced write or a renew found the lease taken over;
                the run wrote nothing more and was not finalized.
            BaseException: whatever the run (or ``fenced``) raised.
        """
        lost = False
        try:
            stores = _fenced_stores(parts, self._sessions, self._lease, covered)
            try:
                return await self._run_renewed(Run(parts, stores, message), stores)
            finally:
                lost = stores.lease_lost is not None
        finally:
            if not lost:  # a lost lease is another owner's now: nothing to release
                await self._release()

    async def _run_renewed(self, run: Run, stores: RunStores) -> RunResult:
        with anyio.CancelScope() as run_scope:
            result: RunResult | None = None
            failure: BaseException | None = None
            try:
                async with anyio.create_task_group() as renewals:
                    renewals.start_soon(self._renew, stores, run_scope, name=self._task_name)
                    # What the run raises is held until the task group has closed: it never
                    # passes through the group (which would wrap it and format it with repr).
                    try:
                        result = await run.execute()
                    except BaseException as exc:
                        failure = exc
                    finally:
                        renewals.cancel_scope.cancel()
            except anyio.get_cancelled_exc_class() as cancelled:
                if failure is not None or result is None:
                    raise
                # Under asyncio the group's end is a suspension, where a Task.cancel() made
                # after the run's last write lands: as trio's nursery would, the run's result
                # goes first and the cancellation comes at the caller's next suspension.
                deliver_later(cancelled)
            if failure is not None:
                raise failure  # inside the run's scope, which catches a cancellation of its own
            assert result is not None
            return result
        assert self._renew_lost is not None  # only a lost renew cancels the run's scope
        raise self._renew_lost

    async def _renew(self, stores: RunStores, run_scope: anyio.CancelScope) -> None:
        """Renew every ``lease_ttl / 3``, each try bounded by that interval; never raises."""
        interval = self._config.lease_ttl / 3
        due = anyio.current_time() + interval
        while True:
            await anyio.sleep_until(due)
            due = anyio.current_time() + interval
            try:
                with anyio.move_on_after(interval) as scope:
                    self._lease = await self._sessions.renew_lease(
                        self._lease, self._config.lease_ttl
                    )
            except LeaseLostError as exc:
                self._renew_lost = stores.lease_lost = exc
                run_scope.cancel()
                return
            except Exception as exc:
                self._warn(f"renew_lease failed, retrying in {interval:g}s: {describe(exc)}")
                continue
            if scope.cancelled_caught:
                self._warn(f"renew_lease took longer than {interval:g}s (lease_ttl / 3); retrying")

    async def _release(self) -> None:
        """Release the lease, shielded and bounded by ``finalize_timeout``; never raises.

        A release that fails, or is abandoned at the bound, is a ``LoopWarning``:
        the lease then frees itself ``lease_ttl`` after its last renew.
        """
        failure: Exception | None = None

        async def release() -> None:
            nonlocal failure
            try:
                await self._sessions.release_lease(self._lease)
            except Exception as exc:
                failure = exc

        timeout = self._config.finalize_timeout
        if not await finish_shielded(release, timeout):
            self._warn(
                f"release_lease abandoned after {timeout}s (finalize_timeout); "
                f"the lease expires on its own"
            )
        elif failure is not None:
            self._warn(f"release_lease failed; the lease expires on its own: {describe(failure)}")


async def run_leased(
    parts: RunParts, sessions: SupportsLease, covered: bool, session_id: str, message: str
) -> RunResult:
    """One run holding the session's lease on ``sessions`` (``parts.sessions``); see ``Loop.run``.

    ``covered``: the fenced view also fences appends (:func:`covers_appends`).

    Raises:
        SessionBusyError: the lease stayed taken for ``lease_wait``; nothing written.
        StoreError: ``acquire_lease`` (or ``fenced``) failed, or the store did not
            answer within ``lease_wait`` (plus one poll); nothing written.
        LeaseLostError: the lease was taken over mid-run; nothing more written,
            no finalize.
    """
    lease = await acquire(sessions, session_id, new_owner(), parts.config)
    holder = LeaseHolder(sessions, lease, parts.config, parts.on_event)
    return await holder.hold_and_run(parts, covered, message)
