"""What a run has written and how it ends: counters, appends, finalize and the failure paths.

This is "Failure handling in one place" of ``docs/decisions.md``: every flag
that decides whether (and with which status) a failing run is finalized lives
here, next to the normal finalize.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from agentloop._backend import (
    being_cancelled,
    cancel_scope,
    clock,
    timeout_error,
    uncancellable,
)
from agentloop._config import RunResult
from agentloop._describe import describe
from agentloop._errors import StoreError
from agentloop._events import Event, Finalized, LoopWarning, StepAppended
from agentloop._types import FinalizeSummary, RunStatus, RunStep, StepType
from agentloop._validate import INT32_MAX, trusted_builder

if TYPE_CHECKING:
    from agentloop._config import LoopConfig
    from agentloop._memory import WorkingMemory
    from agentloop._run_stores import RunStores


def _ms(seconds: float) -> int:
    ms = int(seconds * 1000)  # branches, not min/max calls: once per step
    if ms < 0:
        return 0
    return ms if ms <= INT32_MAX else INT32_MAX


def _int32(value: int) -> int:
    return min(value, INT32_MAX)


# The loop's own steps, summaries and results are built from values checked already
# (see "The loop builds its own values without re-checking them" in docs/decisions.md).
_build_step = trusted_builder(RunStep)
_build_summary = trusted_builder(FinalizeSummary)
_build_result = trusted_builder(RunResult)


class RunRecord:
    """The steps, tokens and final status one run records, on success and on failure."""

    def __init__(
        self,
        stores: RunStores,
        config: LoopConfig,
        memory: WorkingMemory,
        emit: Callable[[Event], None],
        *,
        watched: bool = True,
    ) -> None:
        self._stores = stores
        self._config = config
        self._memory = memory
        self._emit = emit
        self._watched = watched  # False: no on_event, so no StepAppended is built
        self.now = clock()  # the running loop's clock, which scope deadlines use
        self.started = self.now()
        self.steps_appended = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.next_index = 0
        self._history_loaded = False  # last_n returned: the next step index is known
        self._get_failed = False  # a failed get writes nothing, finalize included
        self._finalized = False
        self._failure_status: RunStatus | None = None  # the timeout path sets ``timeout``
        self._finalize_tried: RunStatus | None = None  # the status of the last finalize tried
        self._record_deadline: float | None = None  # the one bound of the timeout path
        self._gave_up = False  # the timeout path ran out of its bound: record nothing more

    # -- while the run goes on -------------------------------------------------------------

    def get_failed(self) -> None:
        """The session could not be read: the run ends without writing anything."""
        self._get_failed = True

    def history_loaded(self, next_index: int) -> None:
        """``last_n`` returned: steps are appended from ``next_index`` on."""
        self.next_index = next_index
        self._history_loaded = True

    def add_tokens(self, prompt: int, completion: int) -> None:
        """Count a model call's (or a compaction's) tokens toward the run."""
        self.prompt_tokens += prompt
        self.completion_tokens += completion

    def next_step(
        self,
        kind: StepType,
        content: str = "",
        tool_args: str = "{}",
        *,
        seconds: float = 0.0,
        prompt_tokens: int = 0,
        completion_tokens: int = 0,
        offset: int = 0,
    ) -> RunStep:
        """The step ``offset`` places after the run's next one, built but not appended.

        Raises:
            StoreError: its index would pass ``INT32_MAX``, the last index a
                step can have; nothing was appended.
        """
        index = self.next_index + offset
        if index > INT32_MAX:
            raise StoreError(
                f"append failed for session {self._stores.session_id!r}: the session's last "
                f"step_index is {INT32_MAX}, the largest a step can have (int32); "
                f"no step can be appended"
                if offset == 0
                else f"append_many failed for session {self._stores.session_id!r}: the batch "
                f"needs step_index {index}, past {INT32_MAX}, the largest a step can have "
                f"(int32); no step of it was appended"
            )
        # Every value is checked: the run's session id and message, model replies,
        # tool outputs, compactions, the loop's own JSON and texts, clamped ints.
        return _build_step(
            self._stores.session_id,
            index,
            kind,
            content,
            tool_args,
            _ms(seconds),
            prompt_tokens,
            completion_tokens,
        )

    async def append(
        self,
        kind: StepType,
        content: str = "",
        tool_args: str = "{}",
        *,
        seconds: float = 0.0,
        prompt_tokens: int = 0,
        completion_tokens: int = 0,
    ) -> int:
        """Append the run's next step and return its index.

        Raises:
            StoreError: the append failed, or the session already holds a step
                at the last index a step can have (``INT32_MAX``).
        """
        index = self.next_index
        if index < INT32_MAX:  # as next_step builds it (which raises past the last index)
            ms = int(seconds * 1000)  # _ms inline: once per step
            step = _build_step(
                self._stores.session_id,
                index,
                kind,
                content,
                tool_args,
                (ms if ms <= INT32_MAX else INT32_MAX) if ms > 0 else 0,
                prompt_tokens,
                completion_tokens,
            )
        else:
            step = self.next_step(
                kind,
                content,
                tool_args,
                seconds=seconds,
                prompt_tokens=prompt_tokens,
                completion_tokens=completion_tokens,
            )
        await self._stores.append(step)
        self.next_index = index + 1
        self.steps_appended += 1
        if self._watched:
            self._emit(StepAppended(step))
        return index

    async def append_batch(self, steps: Sequence[RunStep]) -> None:
        """Append ``steps`` (from :meth:`next_step`, offsets ``0..len - 1``) as one batch.

        With a step store that has ``append_many`` the batch is all or nothing;
        every step is counted before any ``StepAppended`` is emitted, so an
        ``on_event`` that raises cannot make ``step_count`` miss a stored step.
        Without it the steps are appended one call at a time, each counted
        and announced as it lands, exactly as :meth:`append` does.

        Raises:
            StoreError: the append (or ``append_many``) failed.

        **Cancellation**: with ``append_many``, none of the steps was appended;
        without it, a prefix may have been.
        """
        if not self._stores.atomic_batches:
            for step in steps:
                await self._stores.append(step)
                self._appended(step)
            return
        await self._stores.append_many(steps)
        self.next_index += len(steps)
        self.steps_appended += len(steps)
        if self._watched:
            for step in steps:
                self._emit(StepAppended(step))

    def _appended(self, step: RunStep) -> None:
        self.next_index += 1
        self.steps_appended += 1
        if self._watched:
            self._emit(StepAppended(step))

    # -- the end -----------------------------------------------------------------------------

    def run_deadline(self) -> float:
        """When ``run_timeout`` expires (``inf`` without one)."""
        if self._config.run_timeout is None:
            return math.inf
        return self.started + self._config.run_timeout

    def _summary(self, status: RunStatus) -> FinalizeSummary:
        return _build_summary(  # a member, clamped counters, a byte count (<= int64)
            status,
            _int32(self.prompt_tokens),
            _int32(self.completion_tokens),
            _int32(self.steps_appended),
            _ms(self.now() - self.started),
            self._memory.bytes_carried,
        )

    async def finish(self, status: RunStatus, text: str) -> RunResult:
        """``finalize(status)`` and the caller's result.

        Raises:
            StoreError: the finalize failed.
        """
        summary = self._summary(status)
        self._finalize_tried = status
        await self._stores.finalize(summary)
        self._announce_finalized(summary)
        return _build_result(  # ``text``: a checked reply's content, or ""
            status,
            text,
            summary.step_count,
            summary.prompt_tokens,
            summary.completion_tokens,
            summary.duration_ms,
        )

    async def record_timeout(self) -> RunResult:
        """Append the ``error`` step and ``finalize(timeout)`` within one ``finalize_timeout``.

        Raises:
            StoreError: the bound expired; the message names the operation that
                was running and the session, ``__cause__`` is ``trio.TooSlowError``
                (trio) or ``TimeoutError`` (asyncio). No second attempt is made.
        """
        self._failure_status = RunStatus.timeout
        self._record_deadline = self.now() + self._config.finalize_timeout
        operation = "finalize"
        with cancel_scope(deadline=self._record_deadline):
            if self._history_loaded:  # else the next step index is unknown: record no step
                operation = "append"
                await self.append(
                    StepType.error, f"run_timeout expired after {self._config.run_timeout}s"
                )
                operation = "finalize"
            return await self.finish(RunStatus.timeout, "")
        self._gave_up = True  # only the scope's own deadline ends the block without a return
        raise StoreError(
            f"{operation} failed for session {self._stores.session_id!r}: recording the "
            f"run_timeout did not finish within finalize_timeout "
            f"({self._config.finalize_timeout}s); the run is not finalized"
        ) from timeout_error()

    async def abort(self, exc: BaseException) -> None:
        """Best-effort, shielded and bounded ``finalize`` for a run that is raising ``exc``.

        Status ``cancelled`` when the run is being cancelled, else ``timeout``
        on the timeout path, else ``error``. Nothing is written after a failed
        ``get``, once the run's lease is lost (``RunStores.lease_lost``: the
        run stops at once), after a finalize, after the timeout path ran out
        of its bound, or when a finalize with this same status was already
        tried. The bound
        is ``finalize_timeout`` from now, or what is left of the bound the
        timeout path already started (a run is never recorded for longer than
        one ``finalize_timeout``). A finalize abandoned at the bound, or one
        that fails, is reported as a ``LoopWarning``: ``exc`` still wins.
        Under asyncio a ``Task.cancel()`` arriving meanwhile waits for the
        finalize to end, then is raised (see ``_backend.uncancellable``).
        """
        if self._get_failed or self._stores.lease_lost is not None:
            return
        cancelled = being_cancelled(exc)
        status = RunStatus.cancelled if cancelled else (self._failure_status or RunStatus.error)
        if self._finalized or self._gave_up or status is self._finalize_tried:
            return
        bound = self._record_deadline
        if bound is None:
            bound = self.now() + self._config.finalize_timeout
        await uncancellable(lambda: self._finalize_shielded(status, bound))

    async def _finalize_shielded(self, status: RunStatus, bound: float) -> None:
        # One scope: shielded from the caller's cancellation, yet bounded by its own deadline.
        with cancel_scope(shield=True, deadline=bound) as scope:
            summary = self._summary(status)
            self._finalize_tried = status
            # The exception already propagating matters more than these: warnings only.
            try:
                await self._stores.finalize(summary)
            except StoreError as failure:
                self.warn(f"finalize({status}) failed: {describe(failure.__cause__ or failure)}")
            else:
                self._announce_finalized(summary)
        if scope.cancelled_caught:
            self.warn(
                f"finalize({status}) abandoned after {self._config.finalize_timeout}s "
                f"(finalize_timeout)"
            )

    def _announce_finalized(self, summary: FinalizeSummary) -> None:
        """Mark the run finalized and emit ``Finalized``, which can no longer fail the run.

        ``Finalized`` follows the run's last write: an ``on_event`` error there
        is reported as a ``LoopWarning``, so the caller's result (or exception)
        always matches the status the store holds.
        """
        self._finalized = True
        if not self._watched:  # no on_event: nothing to build
            return
        try:
            self._emit(Finalized(self._stores.session_id, summary))
        except Exception as exc:
            self.warn(
                f"on_event raised on Finalized: {describe(exc)}; "
                f"the run stays recorded as {summary.status}"
            )

    def warn(self, message: str) -> None:
        """Emit a ``LoopWarning`` from a failure path, where ``on_event`` may not raise."""
        with contextlib.suppress(Exception):
            self._emit(LoopWarning(self._stores.session_id, message))
