"""One run of the loop for one session: load, iterate the model and its tools, finish.

The parts a run uses are built once per ``Loop`` (:class:`RunParts`); a run adds
its own: the store seam (:class:`RunStores`: every call named, every failure a
``StoreError``), working memory (:class:`WorkingMemory`: loaded from the
session, compared after each tool, stored if changed), what it records and how
it ends (:class:`RunRecord`) and what the model is shown (``Conversation``).

:class:`RunRecord` is "Failure handling in one place" of ``docs/decisions.md``:
every flag that decides whether (and with which status) a failing run is
finalized lives there, next to the normal finalize.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import anyio
import attrs

from agentloop._backend import being_cancelled, finish_shielded, timeout_error
from agentloop._config import LoopConfig, RunResult
from agentloop._errors import LeaseLostError, StoreError, describe, describe_message
from agentloop._events import (
    Compacted,
    Event,
    EventHandler,
    Finalized,
    LoopWarning,
    RunStarted,
    StepAppended,
)
from agentloop._model import (
    Compaction,
    Compactor,
    Message,
    Model,
    ModelReply,
    ModelRequest,
    ToolCall,
    ToolSpec,
)
from agentloop._protocols import (
    SessionStore,
    StepStore,
    SupportsAppendMany,
    SupportsPrune,
    append_all,
)
from agentloop._rehydrate import Conversation, next_step_index, tool_call_fields, tool_result_args
from agentloop._tools import Tool, ToolContext
from agentloop._types import CompactionCheckpoint, FinalizeSummary, RunStatus, RunStep, StepType
from agentloop._validate import INT32_MAX, check_text, parse_json, preview

if TYPE_CHECKING:
    from agentloop._config import LoopConfig
    from agentloop._protocols import SessionStore, StepStore
    from agentloop._types import FinalizeSummary, RunStep, Session


class _StrictStop(Exception):
    """Ends a strict run: what went wrong, for its ``error`` step."""


def _ignore(event: Event) -> None:
    """The event handler of a loop without ``on_event``."""


@attrs.frozen
class RunParts:
    """What every run of one ``Loop`` shares, built (and checked) once by the ``Loop``.

    ``steps`` and ``sessions`` are the loop's own stores; a run touches only the
    ``RunStores`` it is handed (see ``Loop.run``).
    """

    model: Model
    steps: StepStore
    sessions: SessionStore
    tools: Mapping[str, Tool]
    specs: tuple[ToolSpec, ...]
    config: LoopConfig
    on_event: EventHandler | None
    compactor: Compactor | None


class Run:
    """One run; ``execute`` is the whole run (the caller holds the session lock)."""

    _conversation: Conversation  # set once the history is loaded

    def __init__(self, parts: RunParts, stores: RunStores, message: str) -> None:
        """A run of ``message`` on ``stores.session_id``; it touches no store but ``stores``."""
        self._parts = parts
        self._stores = stores
        self._session_id = stores.session_id
        self._message = message
        self._emit: EventHandler = _ignore if parts.on_event is None else parts.on_event
        self._memory = WorkingMemory(stores)
        self._record = RunRecord(
            stores, parts.config, self._memory, self._emit, watched=parts.on_event is not None
        )

    async def execute(self) -> RunResult:
        """Run to the end; see ``Loop.run`` for the guarantees."""
        if self._parts.on_event is not None:
            self._emit(RunStarted(self._session_id, self._message))
        try:
            if self._parts.config.run_timeout is None:  # no deadline: a scope would only cost
                status, text = await self._body()
                return await self._finish(status, text)
            with anyio.CancelScope(deadline=self._record.run_deadline()) as scope:
                status, text = await self._body()
            if not scope.cancelled_caught:
                return await self._finish(status, text)
            return await self._record.record_timeout()
        except BaseException as exc:
            await self._record.abort(exc)
            raise

    async def _finish(self, status: RunStatus, text: str) -> RunResult:
        """``finalize``, then, after a completed run, prune to ``keep_steps`` if asked."""
        result = await self._record.finish(status, text)
        keep = self._parts.config.keep_steps
        if status is RunStatus.completed and keep is not None and self._stores.can_prune:
            try:
                await self._stores.prune_steps(keep)
            except StoreError as failure:  # the run is recorded: a warning, not a failure
                self._record.warn(f"prune_steps(keep_last={keep}) after the run failed: {failure}")
        return result

    async def _load(self) -> Session:
        """Read the session and the history window; rehydrate messages and working memory."""
        try:
            session = await self._stores.get()
        except StoreError:
            self._record.get_failed()
            raise
        self._memory.stored = session.data  # counted by a finalize even if last_n fails
        window = await self._stores.last_n(self._parts.config.history_window)
        self._record.history_loaded(next_step_index(window))
        self._conversation = Conversation.replayed(window)
        problem = self._memory.load(session.data)
        if problem is not None:
            self._warn(
                f"session data cannot be loaded ({problem}); working memory starts "
                f"empty and the stored data is kept until a tool writes new data"
            )
        return session

    def _warn(self, message: str) -> None:
        """Emit a ``LoopWarning`` from the run's body; in strict mode it also ends the run."""
        self._emit(LoopWarning(self._session_id, message))
        if self._parts.config.strict:
            raise _StrictStop(message)

    async def _body(self) -> tuple[RunStatus, str]:
        """The run's steps; in strict mode a tool error or a ``LoopWarning`` ends it with
        an ``error`` step and status ``error``."""
        try:
            return await self._iterate()
        except _StrictStop as stop:
            await self._record.append(StepType.error, f"strict mode: {stop}")
            return RunStatus.error, ""

    async def _iterate(self) -> tuple[RunStatus, str]:
        config = self._parts.config
        record, model = self._record, self._parts.model
        session = await self._load()
        index = await record.append(StepType.user, self._message)
        self._conversation.add(Message("user", self._message), index)
        if self._parts.compactor is not None:
            await self._compact(self._parts.compactor)

        budget = config.token_budget
        for _ in range(config.max_iterations):
            if budget is not None:
                used = record.prompt_tokens + record.completion_tokens
                if used >= budget:
                    await record.append(
                        StepType.error, f"token_budget exhausted: {used} of {budget} tokens used"
                    )
                    return RunStatus.budget_exhausted, ""
            request = self._request(session)
            started = record.now()
            try:  # the model is awaited here, not in a helper: a coroutine less per call
                reply = await model.complete(request)
                if not isinstance(reply, ModelReply):
                    raise TypeError(f"the model must return a ModelReply, got {preview(reply)}")
            except Exception as exc:
                await record.append(StepType.error, f"model error: {describe(exc)}")
                raise
            seconds = record.now() - started
            record.add_tokens(reply.prompt_tokens, reply.completion_tokens)
            if not reply.tool_calls:
                await record.append(
                    StepType.response,
                    reply.content,
                    seconds=seconds,
                    prompt_tokens=reply.prompt_tokens,
                    completion_tokens=reply.completion_tokens,
                )
                return RunStatus.completed, reply.content
            await self._use_tools(reply, seconds)
        await record.append(
            StepType.error,
            f"max_iterations reached: {config.max_iterations} model calls without a response",
        )
        return RunStatus.max_iterations, ""

    async def _checked_compaction(self, compactor: Compactor) -> Compaction | None:
        """The compactor's result, or ``None`` after a ``LoopWarning`` when it failed."""
        messages = self._conversation.messages
        try:
            compaction = await compactor.compact(tuple(messages))
            if not isinstance(compaction, Compaction):
                raise TypeError(f"compact must return a Compaction, got {preview(compaction)}")
            if compaction.retained_from > len(messages):
                raise ValueError(
                    f"retained_from must be <= {len(messages)} (the message count), "
                    f"got {compaction.retained_from}"
                )
        except Exception as exc:
            self._warn(f"compaction failed; history kept whole: {describe(exc)}")
            return None
        return compaction

    async def _compact(self, compactor: Compactor) -> None:
        compaction = await self._checked_compaction(compactor)
        if compaction is None:
            return
        self._record.add_tokens(compaction.prompt_tokens, compaction.completion_tokens)
        if not compaction.summary:
            return
        retain, summarized = self._conversation.summarized(
            compaction.summary, compaction.retained_from, self._record.next_index
        )
        await self._record.append(
            StepType.summary,
            compaction.summary,
            CompactionCheckpoint(retain).to_json(),
            prompt_tokens=compaction.prompt_tokens,
            completion_tokens=compaction.completion_tokens,
        )
        self._conversation = summarized
        self._emit(
            Compacted(
                self._session_id,
                compaction.summary,
                retain,
                compaction.prompt_tokens,
                compaction.completion_tokens,
            )
        )

    def _request(self, session: Session) -> ModelRequest:
        """What the model is shown next: the conversation so far, the tools, working memory."""
        return ModelRequest(
            session.model or self._parts.config.model,
            session.system_prompt,
            tuple(self._conversation.messages),
            self._parts.specs,
            self._memory.shown,
        )

    async def _use_tools(self, reply: ModelReply, seconds: float) -> None:
        record = self._record
        first_index = record.next_index
        batch = []
        decoded: list[object] = []  # each call's arguments, or the ValueError they raise
        for position, call in enumerate(reply.tool_calls):
            first = position == 0
            try:
                decoded.append(parse_json(call.args, "arguments"))
            except ValueError as exc:
                decoded.append(exc)
            content, args = tool_call_fields(
                call, reply.content if first else "", malformed=isinstance(decoded[-1], ValueError)
            )
            batch.append(
                record.next_step(
                    StepType.tool_call,
                    content,
                    args,
                    seconds=seconds if first else 0.0,
                    prompt_tokens=reply.prompt_tokens if first else 0,
                    completion_tokens=reply.completion_tokens if first else 0,
                    offset=position,
                )
            )
        await record.append_batch(batch)  # every call of the reply, or none of them
        self._conversation.add(Message("assistant", reply.content, reply.tool_calls), first_index)
        for call, arguments in zip(reply.tool_calls, decoded, strict=True):
            started = record.now()
            output, failed = await self._call_tool(call, arguments)
            if failed and self._parts.config.strict:
                raise _StrictStop(output.removeprefix("Error: "))
            index = await record.append(
                StepType.tool_result,
                output,
                tool_result_args(call),
                seconds=record.now() - started,
            )
            self._conversation.add(Message("tool", output, (), call.id), index)

    async def _call_tool(self, call: ToolCall, args: object) -> tuple[str, bool]:
        """The tool's output, or an ``Error:`` text and ``True``; persists changed working memory.

        ``args``: the call's decoded arguments, or the ``ValueError`` decoding raised.
        """
        tools = self._parts.tools
        tool = tools.get(call.name)
        if tool is None:
            return f"Error: unknown tool {call.name!r}; available tools: {sorted(tools)}", True
        if isinstance(args, ValueError):
            return f"Error: malformed arguments for tool {call.name!r}: {args}", True
        if not isinstance(args, dict):
            return (
                f"Error: arguments for tool {call.name!r} must be a JSON object, "
                f"got {preview(call.args)}",
                True,
            )
        try:
            output = await tool.fn(args, self._memory.context)
            if not isinstance(output, str):
                raise TypeError(f"tool must return a str, got {preview(output)}")
            check_text(output, "tool output")
        except Exception as exc:
            self._memory.discard_changes()  # a failed call leaves no trace in working memory
            return f"Error: tool {call.name!r} failed: {describe(exc)}", True
        try:
            changes = self._memory.changes()
        except (TypeError, ValueError, RecursionError) as exc:
            return f"Error: tool {call.name!r} left working memory that is not JSON: {exc}", True
        if changes is not None:
            await self._memory.store(changes)
        return output, False


def _ms(seconds: float) -> int:
    return max(0, min(int(seconds * 1000), INT32_MAX))


def _int32(value: int) -> int:
    return min(value, INT32_MAX)


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
        self.now = anyio.current_time  # the clock cancel scope deadlines are measured on
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
        return RunStep(
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
        return FinalizeSummary(  # a member, clamped counters, a byte count (<= int64)
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
        return RunResult(  # ``text``: a checked reply's content, or ""
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
        with anyio.CancelScope(deadline=self._record_deadline):
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
        A cancellation of the caller arriving meanwhile waits for the finalize
        to end (``_backend.finish_shielded``).
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
        if not await finish_shielded(lambda: self._finalize_quietly(status), bound - self.now()):
            self.warn(
                f"finalize({status}) abandoned after {self._config.finalize_timeout}s "
                f"(finalize_timeout)"
            )

    async def _finalize_quietly(self, status: RunStatus) -> None:
        """``finalize(status)`` for a failing run: a failure is a warning, never raised.

        The exception already propagating matters more than this one.
        """
        summary = self._summary(status)
        self._finalize_tried = status
        try:
            await self._stores.finalize(summary)
        except StoreError as failure:
            self.warn(f"finalize({status}) failed: {describe(failure.__cause__ or failure)}")
        else:
            self._announce_finalized(summary)

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


class RunStores:
    """The store calls of one run on ``session_id``, each named for its failure message.

    This is the only place a run touches a store. A leased run is handed a
    ``RunStores`` built on the session store's fenced view (and on that view
    for appends too when it covers the step store); nothing else changes.

    Every method raises ``StoreError("<operation> failed for session '<id>':
    <Type>: <message>")`` for any exception of the store, with that exception
    as ``__cause__``; cancellation propagates unchanged. ``LeaseLostError``
    propagates unwrapped and is kept in ``lease_lost``: from then on every
    write raises ``LeaseLostError`` without calling the store.
    """

    __slots__ = ("atomic_batches", "can_prune", "lease_lost", "session_id", "sessions", "steps")

    def __init__(self, steps: StepStore, sessions: SessionStore, session_id: str) -> None:
        self.steps = steps
        self.sessions = sessions
        self.session_id = session_id
        self.lease_lost: LeaseLostError | None = None  # set once the run's lease is lost
        # Whether the step store has ``append_many`` (``SupportsAppendMany``).
        self.atomic_batches = isinstance(steps, SupportsAppendMany)
        self.can_prune = isinstance(steps, SupportsPrune)

    def _refused(self, operation: str) -> LeaseLostError:
        return LeaseLostError(
            f"{operation} refused for session {self.session_id!r}: the run lost its lease; "
            f"nothing was written"
        )

    def _failed(self, operation: str, exc: Exception) -> StoreError:
        return StoreError(
            f"{operation} failed for session {self.session_id!r}: {describe_message(exc)}"
        )

    # Each method catches on its own (no shared wrapper coroutine): these calls are
    # the loop's hottest path, and an extra await layer per call shows in the bench.

    async def get(self) -> Session:
        """The session (a fresh one when the store has none)."""
        try:
            return await self.sessions.get(self.session_id)
        except Exception as exc:
            raise self._failed("get", exc) from exc

    async def last_n(self, count: int) -> Sequence[RunStep]:
        """The last ``count`` steps, oldest first."""
        try:
            return await self.steps.last_n(self.session_id, count)
        except Exception as exc:
            raise self._failed("last_n", exc) from exc

    async def append(self, step: RunStep) -> None:
        """Append ``step`` (already built for this session)."""
        if self.lease_lost is not None:
            raise self._refused("append") from self.lease_lost
        try:
            await self.steps.append(step)
        except LeaseLostError as exc:
            self.lease_lost = exc
            raise
        except Exception as exc:
            raise self._failed("append", exc) from exc

    async def append_many(self, steps: Sequence[RunStep]) -> None:
        """Append ``steps`` (built for this session) as ``append_all`` would.

        The loop calls this only when :attr:`atomic_batches`: one
        ``append_many`` call, all or nothing. The steps are the loop's own,
        already checked, and the capability is known: ``append_all`` would
        only check both again (``append_all`` itself serves any other store).
        """
        if self.lease_lost is not None:
            raise self._refused("append_many") from self.lease_lost
        try:
            if self.atomic_batches:
                batching: SupportsAppendMany = self.steps  # type: ignore[assignment]
                await batching.append_many(steps)
            else:
                await append_all(self.steps, steps)
        except LeaseLostError as exc:
            self.lease_lost = exc
            raise
        except Exception as exc:
            raise self._failed("append_many", exc) from exc

    async def update_data(self, data: str) -> None:
        """Replace the session's working memory with the JSON text ``data``."""
        if self.lease_lost is not None:
            raise self._refused("update_data") from self.lease_lost
        try:
            await self.sessions.update_data(self.session_id, data)
        except LeaseLostError as exc:
            self.lease_lost = exc
            raise
        except Exception as exc:
            raise self._failed("update_data", exc) from exc

    async def finalize(self, summary: FinalizeSummary) -> None:
        """Record the end of the run."""
        if self.lease_lost is not None:
            raise self._refused("finalize") from self.lease_lost
        try:
            await self.sessions.finalize(self.session_id, summary)
        except LeaseLostError as exc:
            self.lease_lost = exc
            raise
        except Exception as exc:
            raise self._failed("finalize", exc) from exc

    async def prune_steps(self, keep_last: int) -> int:
        """Keep the session's newest ``keep_last`` steps (the loop calls this only when
        :attr:`can_prune`); how many were removed.

        A ``LeaseLostError`` is a ``StoreError`` too: the run that asks is over.
        """
        if self.lease_lost is not None:
            raise self._refused("prune_steps") from self.lease_lost
        pruning: SupportsPrune = self.steps  # type: ignore[assignment]
        try:
            return await pruning.prune_steps(self.session_id, keep_last=keep_last)
        except LeaseLostError as exc:
            self.lease_lost = exc
            raise
        except Exception as exc:
            raise self._failed("prune_steps", exc) from exc


_canonical = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode


def canonical_json(data: Any) -> str:
    """The JSON text persisted for a working-memory value (JSON ``null`` for ``None``).

    Only the encoding is checked here; ``parse_json`` runs when the text is
    about to be written, so a tool that leaves data unchanged costs one ``dumps``.

    Raises:
        TypeError, ValueError: ``data`` is not JSON-encodable.
        RecursionError: ``data`` is nested too deeply to encode.
    """
    return _canonical(data)


class WorkingMemory:
    """``ctx.data`` of one run, and what the store and the model last saw of it.

    ``context`` is the ``ToolContext`` handed to every tool; ``stored`` is the
    data text as last stored (or loaded); ``shown`` is the text the model is
    shown (``None`` when the stored text is unreadable). See "Working memory is
    compared, not trusted" in ``docs/decisions.md``.
    """

    context: ToolContext  # set by load, before any tool runs

    def __init__(self, stores: RunStores) -> None:
        self._stores = stores
        self.stored: str | None = None
        self.shown: str | None = None
        self._baseline = "{}"  # canonical JSON of ctx.data as last loaded or stored

    @property
    def bytes_carried(self) -> int:
        """UTF-8 size of the stored snapshot (``FinalizeSummary.data_bytes_carried``)."""
        return len(self.stored.encode("utf-8")) if self.stored is not None else 0

    def load(self, stored: str | None) -> str | None:
        """Start from the stored snapshot (``{}`` when there is none).

        Returns ``None``, or why the snapshot cannot be read back (not JSON, or
        JSON that cannot be re-encoded, e.g. a number that decoded to ``inf``):
        working memory then starts empty, the model is shown no data, and the
        stored text is kept until a tool writes new data over it.
        """
        self.stored = self.shown = stored  # already set when the session was read
        if stored is not None:
            try:
                data = parse_json(stored, "data")
                self._baseline = canonical_json(data)
            except (TypeError, ValueError, RecursionError) as exc:
                self.shown = None
                self.context = ToolContext(self._stores.session_id)
                self._baseline = canonical_json(self.context.data)
                return str(exc)
            self.context = ToolContext(self._stores.session_id, data)
            return None
        self.context = ToolContext(self._stores.session_id)  # data {}: the baseline "{}"
        return None

    def discard_changes(self) -> None:
        """Put ``ctx.data`` back to the last loaded or stored value."""
        self.context.data = json.loads(self._baseline)

    def changes(self) -> tuple[str, Any] | None:
        """``ctx.data`` as the JSON text to store and its decoded value, or ``None`` if unchanged.

        The decoded value is what the rest of the run must see after the write
        (``{1: "a"}`` becomes ``{"1": "a"}``): pass both to :meth:`store`.

        Raises:
            TypeError, ValueError, RecursionError: ``ctx.data`` is not JSON (or
                holds NUL or lone surrogates no store can keep); it is put back
                to the last loaded or stored value.
        """
        data = self.context.data
        if data.__class__ is dict and not data and self._baseline == "{}":
            return None  # still the empty object: nothing to encode
        try:
            canonical = canonical_json(data)
            if canonical == self._baseline:
                return None
            return canonical, parse_json(canonical, "data")
        except (TypeError, ValueError, RecursionError):
            self.discard_changes()
            raise

    async def store(self, changes: tuple[str, Any]) -> None:
        """Write ``changes`` (from :meth:`changes`); from now on the run sees what was stored.

        Raises:
            StoreError: ``update_data`` failed.
        """
        canonical, decoded = changes
        await self._stores.update_data(canonical)
        self._baseline = self.stored = self.shown = canonical
        self.context.data = decoded
