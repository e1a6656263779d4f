"""The end of a leased run: its lease released, shielded from the caller's cancellation
and bounded by ``finalize_timeout``, inside the run's own scope.

See "The loop and session leases" in ``docs/decisions.md``.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, cast

import trio

from agentloop._backend import cancel_scope, clock, on_trio
from agentloop._describe import describe
from agentloop._events import LoopWarning

if TYPE_CHECKING:
    from agentloop._config import LoopConfig
    from agentloop._events import EventHandler
    from agentloop._lease import Lease, SupportsLease
    from agentloop._lease_renewals import Renewals, TimerRenewals
    from agentloop._task_scope import TaskScope


class LeaseRelease:
    """How a run's hold on its lease ends (the base of ``LeaseHolder``)."""

    _lease: Lease
    _sessions: SupportsLease
    _session_id: str
    _config: LoopConfig
    _emit: EventHandler | None
    _renewals: Renewals | TimerRenewals
    _run_scope: trio.CancelScope | TaskScope
    _lost: bool  # lost by a renew or a write: nothing to release

    def _warn(self, message: str) -> None:
        if self._emit is not None:
            with contextlib.suppress(Exception):  # a warning must not fail what it reports on
                self._emit(LoopWarning(self._session_id, message))

    async def release(self) -> None:
        """Release the lease, shielded and bounded by ``finalize_timeout``; never raises
        but the caller's cancellation.

        Called in the run's scope once the run left the renewals (no renew can
        cancel that scope any more), so a cancellation of that scope is the
        bound's. Skipped once the lease was lost (releasing it would be a
        no-op). A release that fails, or is abandoned at the bound, is a
        ``LoopWarning``: the lease then frees itself ``lease_ttl`` after its
        last renew.
        """
        if self._lost:
            return
        if on_trio():
            await self._release_in_run_scope()
        else:
            await self._release_in_task_scope()

    async def _release_in_run_scope(self) -> None:
        """Under trio the run's own scope, shielded and given the bound, holds the release.

        A ``Cancelled`` here is then the bound's: it is the warning, not an error. Once
        the bound cancelled the scope its shield is lifted, so a cancellation of the
        caller still propagates out of the run's scope (which caught only its own).
        """
        scope = cast("trio.CancelScope", self._run_scope)  # trio's, under trio
        scope.shield = True
        self._renewals.bound(scope, clock()() + self._config.finalize_timeout)
        try:
            await self._release_once()
        except trio.Cancelled:
            self._abandoned()
        finally:
            self._renewals.unbound(scope)
            if scope.cancel_called:  # else the scope cannot catch the caller's cancellation
                scope.shield = False

    async def _release_in_task_scope(self) -> None:
        """Under asyncio the release is tried unshielded, bounded through the run's
        ``TaskScope``; only a caller's cancellation landing in it costs a shielded scope.

        ``release_lease`` is idempotent, so a try the caller's cancellation cut
        short is made again, shielded and within what is left of the bound; the
        cancellation is raised after it. A ``CancelledError`` that is the
        scope's alone is the bound's: the warning, swallowed (the scope undoes
        its cancellation on exit).
        """
        scope = cast("TaskScope", self._run_scope)  # a TaskScope, under asyncio
        now = clock()
        bound = now() + self._config.finalize_timeout
        self._renewals.bound(scope, bound)
        try:
            await self._release_once()
        except asyncio.CancelledError:
            if scope.cancelled_alone():
                self._abandoned()
                return
            self._renewals.unbound(scope)
            if not scope.cancel_called:
                await self._release_shielded(bound)
            else:
                self._abandoned()
            raise
        finally:
            self._renewals.unbound(scope)

    async def _release_shielded(self, bound: float) -> None:
        """The release again, in an anyio scope shielded from the caller's anyio scopes
        and bounded at ``bound`` (by the renewals)."""
        with cancel_scope(shield=True) as scope:
            self._renewals.bound(scope, bound)
            try:
                await self._release_once()
            finally:
                self._renewals.unbound(scope)
        if scope.cancelled_caught:
            self._abandoned()

    async def _release_once(self) -> None:
        try:
            await self._sessions.release_lease(self._lease)
        except Exception as exc:
            self._warn(f"release_lease failed; the lease expires on its own: {describe(exc)}")

    def _abandoned(self) -> None:
        self._warn(
            f"release_lease abandoned after {self._config.finalize_timeout}s (finalize_timeout); "
            f"the lease expires on its own"
        )
