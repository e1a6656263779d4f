"""The end of a leased run: its lease released, bounded by ``finalize_timeout``, and
never lost to the caller's cancellation.

Under trio the run's own scope, shielded, holds the release. Under asyncio it
is tried unshielded in a ``TaskScope`` and, when the caller's cancellation cuts
it short, made again in a shielded anyio scope. See "The loop and session
leases" and "Round four" in ``docs/decisions.md``.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, cast

import trio

from agentloop._asyncio_cancel import TaskScope
from agentloop._backend import Scope, cancel_scope, clock, on_trio, redeliver
from agentloop._describe import describe
from agentloop._events import LoopWarning

if TYPE_CHECKING:
    from agentloop._config import LoopConfig
    from agentloop._events import EventHandler
    from agentloop._lease import Lease, SupportsLease
    from agentloop._lease_renewals import Renewals, TimerRenewals


class LeaseRelease:
    """How a run's hold on its lease ends (the base of ``LeaseHolder``)."""

    _lease: Lease
    _sessions: SupportsLease
    _session_id: str
    _config: LoopConfig
    _emit: EventHandler | None
    _renewals: Renewals | TimerRenewals
    _run_scope: Scope
    _lost: bool  # lost by a renew or a write: nothing to release

    def _warn(self, message: str) -> None:
        if self._emit is not None:
            with contextlib.suppress(Exception):  # a warning must not fail what it reports on
                self._emit(LoopWarning(self._session_id, message))

    async def release(self) -> None:
        """Release the lease, shielded and bounded by ``finalize_timeout``; never raises.

        Called in the run's scope once the run left the renewals (no renew can
        cancel that scope any more). Skipped once the lease was lost (releasing
        it would be a no-op). A release that fails, or is abandoned at the
        bound, is a ``LoopWarning``: the lease then frees itself ``lease_ttl``
        after its last renew.
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
            self._report(await self._release_once())
        except trio.Cancelled:
            self._abandoned()
        finally:
            self._renewals.unbound(scope)
            if scope.cancel_called:  # else the scope cannot catch the caller's cancellation
                scope.shield = False

    async def _release_in_task_scope(self) -> None:
        """Under asyncio the release is tried unshielded, bounded through a ``TaskScope``
        of its own; only a caller's cancellation landing in it costs an anyio scope.

        A ``CancelledError`` that is the scope's alone is the bound's: the
        warning. Any other is the caller's (an anyio scope, ``Task.cancel()``),
        and so is a store error raised while the caller's cancellation is
        pending (a store may turn a cancellation into its own error):
        ``release_lease`` is idempotent, so it is made again, shielded and within
        what is left of the bound, and the cancellation is re-delivered at the
        caller's next suspension (``redeliver``), as trio's shield would leave
        it: the run's own outcome (its result, or what it is raising) goes first.
        """
        bound = clock()() + self._config.finalize_timeout
        absorbed: asyncio.CancelledError | None = None  # the caller's, re-delivered after
        failure: BaseException | None
        with TaskScope() as scope:
            self._renewals.bound(scope, bound)
            try:
                failure = await self._release_once()
                if failure is not None and scope.others_pending():
                    absorbed = asyncio.CancelledError()  # the store took it as an error
            except asyncio.CancelledError as cancelled:
                failure = cancelled
                if not scope.cancelled_alone():
                    absorbed = cancelled
            finally:
                self._renewals.unbound(scope)  # now: it must not cut the shielded retry
            if not scope.cancel_called and absorbed is not None:
                absorbed = await self._release_shielded(bound) or absorbed
            elif isinstance(failure, asyncio.CancelledError):
                self._abandoned()  # the bound passed (the caller's cancel may have come too)
            elif failure is not None:
                self._report(failure)
        if absorbed is not None:  # after the scope undid its own cancellation
            redeliver(absorbed)

    async def _release_shielded(self, bound: float) -> asyncio.CancelledError | None:
        """The release again, in an anyio scope shielded from the caller's anyio scopes
        and bounded at ``bound`` (by the renewals).

        Returns the ``Task.cancel()`` (or ``asyncio.timeout``) that cut it, which
        an anyio shield does not stop: the release is abandoned, and the caller
        re-delivers that cancellation as it does the first.
        """
        try:
            with cancel_scope(shield=True) as scope:
                self._renewals.bound(scope, bound)
                try:
                    failure = await self._release_once()
                finally:
                    self._renewals.unbound(scope)
        except asyncio.CancelledError as cancelled:  # not the scope's own: it caught those
            self._warn(
                "release_lease abandoned: cancelled again during its second try; "
                "the lease expires on its own"
            )
            return cancelled
        if scope.cancelled_caught:
            self._abandoned()
        else:
            self._report(failure)
        return None

    async def _release_once(self) -> Exception | None:
        """``release_lease``; what it raised (an ``Exception``: the caller reports it)."""
        try:
            await self._sessions.release_lease(self._lease)
        except Exception as exc:
            return exc
        return None

    def _report(self, failure: BaseException | None) -> None:
        """The warning for a release that raised ``failure``; nothing for ``None``."""
        if failure is not None:
            self._warn(f"release_lease failed; the lease expires on its own: {describe(failure)}")

    def _abandoned(self) -> None:
        self._warn(
            f"release_lease abandoned after {self._config.finalize_timeout}s (finalize_timeout); "
            f"the lease expires on its own"
        )
