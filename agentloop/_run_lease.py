"""A leased run: acquire the session's lease, write through its fenced view, renew, release.

See "The loop and session leases" in ``docs/decisions.md``.
"""

from __future__ import annotations

import math
import random
from typing import TYPE_CHECKING, cast

import anyio

from agentloop._backend import Scope, cancel_scope, clock
from agentloop._describe import describe, describe_message
from agentloop._errors import LeaseLostError, SessionBusyError, StoreError
from agentloop._lease import Lease, SupportsLease
from agentloop._lease_owner import new_owner
from agentloop._lease_release import LeaseRelease
from agentloop._lease_renewals import Renewals, TimerRenewals
from agentloop._lease_renewals import renewals as current_renewals
from agentloop._run import Run
from agentloop._run_stores import RunStores

if TYPE_CHECKING:
    from agentloop._config import LoopConfig, RunResult
    from agentloop._events import EventHandler
    from agentloop._protocols import SessionStore, StepStore
    from agentloop._run import RunParts

# The wait for a busy lease polls: first after ~10 ms, doubling up to ~0.5 s, each
# delay jittered down to half so that workers waiting on one session spread out.
_FIRST_POLL = 0.01
_LAST_POLL = 0.5


def covers_appends(sessions: SessionStore, steps: StepStore) -> bool:
    """Whether ``sessions``' fenced views also fence appends to ``steps``.

    True when ``sessions`` is ``steps`` (one combined store, e.g. the SQL
    stores) or names ``steps`` as the step store it covers (its ``steps``
    attribute, e.g. ``agentloopmem.SessionStore(steps=steps)``). Such a store's
    fenced view must then be a ``StepStore`` too: the run appends through it.
    """
    covered: object = getattr(sessions, "steps", None)
    return covered is steps or steps is cast(object, sessions)


def _first_bound(config: LoopConfig, now: float, deadline: float) -> float:
    """How long one ``acquire_lease`` try may take (the last, made at ``deadline``, one poll).

    A store that cannot answer (a file locked by another process) so counts
    against ``lease_wait``: acquiring takes at most ``lease_wait`` plus one poll
    interval. With ``lease_wait=0`` the one try is bounded by the store's own timeout.
    """
    return max(deadline, now + _LAST_POLL) if config.lease_wait > 0 else math.inf


async def _acquire_call(
    sessions: SupportsLease, session_id: str, owner: str, config: LoopConfig
) -> Lease | None:
    """One ``acquire_lease`` call, unbounded (the caller's scope bounds it).

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


def _unanswered(session_id: str, config: LoopConfig) -> StoreError:
    return StoreError(
        f"acquire_lease did not finish within lease_wait ({config.lease_wait}s) for session "
        f"{session_id!r}: the store did not answer in time; nothing was written"
    )


async def _acquire_rest(
    sessions: SupportsLease, session_id: str, owner: str, config: LoopConfig, deadline: float
) -> Lease:
    """The polls after a first try found the lease held, up to ``deadline`` (``lease_wait``).

    Raises:
        SessionBusyError: another owner held it for the whole wait; nothing
            was written.
        StoreError: ``acquire_lease`` failed or did not answer in time.

    **Cancellation**: a cancelled wait holds no lease.
    """
    now = clock()
    delay = _FIRST_POLL
    while True:
        left = deadline - now()
        if left <= 0:
            raise SessionBusyError(
                f"session {session_id!r} is busy: another owner held its lease for the whole "
                f"lease_wait ({config.lease_wait}s); nothing was written"
            )
        await anyio.sleep(min(delay * random.uniform(0.5, 1.0), left))
        delay = min(delay * 2, _LAST_POLL)
        with cancel_scope(deadline=_first_bound(config, now(), deadline)):
            lease = await _acquire_call(sessions, session_id, owner, config)
            if lease is not None:
                return lease
            continue
        raise _unanswered(session_id, config)


def run_stores(parts: RunParts, sessions: SupportsLease, lease: Lease, covered: bool) -> RunStores:
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


class LeaseHolder(LeaseRelease):
    """One run's hold on its lease: renewed in the background while the run goes on, then released.

    Renewal (every ``lease_ttl / 3``) comes from the event loop's renewals
    (:func:`renewals`: one task per trio run, timers under asyncio). A renew
    that finds the lease taken over marks the run's stores
    (``RunStores.lease_lost``: no further write) and cancels ``scope``, the
    run's, at once; :attr:`renew_lost` then holds that ``LeaseLostError``.
    Any other renew failure (or a renew slower than the interval) is a
    ``LoopWarning`` and the next renew is tried on time: the fenced writes
    still refuse a run whose lease was taken over meanwhile.
    """

    _lease: Lease  # set by hold_and_run

    def __init__(
        self,
        sessions: SupportsLease,
        session_id: str,
        config: LoopConfig,
        emit: EventHandler | None,
        scope: Scope,
        renewals: Renewals | TimerRenewals,
    ) -> None:
        self._sessions = sessions
        self._renewals = renewals
        self._session_id = session_id
        self._config = config
        self._emit = emit
        self.interval = config.lease_ttl / 3
        self._stores: RunStores | None = None  # the run's stores, while it runs
        self._run_scope = scope
        self.renew_lost: LeaseLostError | None = None  # a renew found the lease taken over
        self._lost = False  # lost by a renew or a write: nothing to release

    async def renew_once(self) -> None:
        """Renew the lease once, bounded by the interval; never raises.

        A renew that ends after the run did changes nothing here.
        """
        interval = self.interval
        try:
            with cancel_scope(deadline=clock()() + interval) as scope:
                lease = await self._sessions.renew_lease(self._lease, self._config.lease_ttl)
        except LeaseLostError as exc:
            if self._stores is not None:
                self.renew_lost = self._stores.lease_lost = exc
                self._run_scope.cancel()
            return
        except Exception as exc:
            if self._stores is not None:
                self._warn(f"renew_lease failed, retrying in {interval:g}s: {describe(exc)}")
            return
        if scope.cancelled_caught:
            if self._stores is not None:
                self._warn(f"renew_lease took longer than {interval:g}s (lease_ttl / 3); retrying")
            return
        self._lease = lease

    async def hold_and_run(
        self, parts: RunParts, covered: bool, message: str, lease: Lease
    ) -> RunResult:
        """The run on ``fenced(lease)``, renewed in the background, then the lease released.

        Called inside the run's scope. When a renew finds the lease lost, the
        scope is cancelled: the run stops at once and writes nothing more.

        Raises:
            BaseException: whatever the run (or ``fenced``) raised.
        """
        self._lease = lease
        try:
            stores = run_stores(parts, self._sessions, lease, covered)
            run = Run(parts, stores, message)
            renewals = self._renewals
            self._stores = stores
            renewals.add(self)
            try:
                return await run.execute()
            finally:
                renewals.discard(self)
                self._stores = None
                self._lost = stores.lease_lost is not None
        finally:
            await self.release()


async def run_leased(
    parts: RunParts, sessions: SupportsLease, covered: bool, session_id: str, message: str
) -> RunResult:
    """One run holding the session's lease on ``sessions`` (``parts.sessions``); see ``Loop.run``.

    ``covered``: the fenced view also fences appends (:func:`covers_appends`).
    The lease is waited for up to ``lease_wait``; a cancelled wait holds none.

    Raises:
        SessionBusyError: the lease stayed taken for ``lease_wait``; nothing written.
        StoreError: ``acquire_lease`` (or ``fenced``) failed, or the store did not
            answer within ``lease_wait`` (plus one poll); nothing written.
        LeaseLostError: the lease was taken over mid-run; nothing more written,
            no finalize.
    """
    config = parts.config
    owner = new_owner()
    now = clock()
    deadline = now() + config.lease_wait
    renewals = current_renewals()
    # One scope is bounded for the first acquire_lease try, then is the run's own (a
    # scope fewer per run); a fresh one only when that bound passed as the store answered.
    scope = cancel_scope()
    holder: LeaseHolder | None = None
    with scope:
        renewals.bound(scope, _first_bound(config, now(), deadline))
        try:
            lease = await _acquire_call(sessions, session_id, owner, config)
        finally:
            renewals.unbound(scope)
        if not scope.cancel_called:
            if lease is None:
                lease = await _acquire_rest(sessions, session_id, owner, config, deadline)
            holder = LeaseHolder(sessions, session_id, config, parts.on_event, scope, renewals)
            return await holder.hold_and_run(parts, covered, message, lease)
    if holder is None and scope.cancelled_caught:
        raise _unanswered(session_id, config)
    if holder is None:
        scope = cancel_scope()
        holder = LeaseHolder(sessions, session_id, config, parts.on_event, scope, renewals)
        with scope:
            if lease is None:
                lease = await _acquire_rest(sessions, session_id, owner, config, deadline)
            return await holder.hold_and_run(parts, covered, message, lease)
    # Only a renew that found the lease lost cancels the run's scope (its deadline is gone).
    assert holder.renew_lost is not None
    raise holder.renew_lost
