"""One run of the loop for one session: load, iterate, record, finalize."""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import trio

from agentloop._compaction import Compaction, Compactor
from agentloop._config import LoopConfig, RunResult
from agentloop._errors import StoreError
from agentloop._events import (
    Compacted,
    Event,
    EventHandler,
    Finalized,
    LoopWarning,
    RunStarted,
    StepAppended,
)
from agentloop._model import Message, Model, ModelReply, ModelRequest, ToolCall, ToolSpec
from agentloop._rehydrate import next_step_index, replay, tool_call_fields, tool_result_args
from agentloop._tools import Tool, ToolContext
from agentloop._types import CompactionCheckpoint, FinalizeSummary, RunStatus, RunStep, StepType
from agentloop._validate import INT32_MAX, check_text, parse_json, preview

if TYPE_CHECKING:
    from agentloop._protocols import SessionStore, StepStore
    from agentloop._types import Session

T = TypeVar("T")


def _canonical(data: Any) -> str:
    """The JSON text persisted for a working-memory value (JSON ``null`` for ``None``).

    Only the encoding is checked here; ``parse_json`` runs when the text is
    about to be written, so a tool that leaves data unchanged costs one ``dumps``.

    Raises:
        TypeError, ValueError: ``data`` is not JSON-encodable.
        RecursionError: ``data`` is nested too deeply to encode.
    """
    return json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def _ms(seconds: float) -> int:
    return min(max(int(seconds * 1000), 0), INT32_MAX)


def _int32(value: int) -> int:
    return min(value, INT32_MAX)


class Run:
    """The state of one run; ``execute`` is the whole run (the caller holds the session lock)."""

    def __init__(
        self,
        *,
        model: Model,
        steps: StepStore,
        sessions: SessionStore,
        tools: Mapping[str, Tool],
        specs: tuple[ToolSpec, ...],
        config: LoopConfig,
        on_event: EventHandler | None,
        compactor: Compactor | None,
        session_id: str,
        message: str,
    ) -> None:
        self._model = model
        self._steps = steps
        self._sessions = sessions
        self._tools = tools
        self._specs = specs
        self._config = config
        self._on_event = on_event
        self._compactor = compactor
        self._sid = session_id
        self._message = message
        self._started = trio.current_time()
        self._appended = 0
        self._prompt = 0
        self._completion = 0
        self._next_index = 0
        self._snapshot: str | None = None  # the data as last stored (or loaded)
        self._shown: str | None = None  # the data the model is shown (None: unreadable)
        self._baseline = "{}"  # canonical JSON of the working memory, to spot changes
        self._ctx = ToolContext(session_id)
        self._messages: list[Message] = []
        self._sources: list[int] = []  # the step index each message came from
        self._finalized = False
        self._get_failed = False
        self._loaded = False  # last_n returned: the next step index is known
        self._abort_status: RunStatus | None = None
        self._finalize_tried: RunStatus | None = None  # the status of the last finalize tried
        self._record_deadline: float | None = None  # the one bound of the timeout path
        self._gave_up = False  # the timeout path ran out of its bound: record nothing more

    # -- plumbing -------------------------------------------------------------------------

    def _emit(self, event: Event) -> None:
        if self._on_event is not None:
            self._on_event(event)

    async def _store(self, operation: str, call: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Await a store call; any failure becomes a ``StoreError`` naming it and the session."""
        try:
            return await call(*args)
        except Exception as exc:
            raise StoreError(
                f"{operation} failed for session {self._sid!r}: {type(exc).__name__}: {exc}"
            ) from exc

    async def _append(
        self,
        kind: StepType,
        content: str = "",
        tool_args: str = "{}",
        *,
        seconds: float = 0.0,
        prompt_tokens: int = 0,
        completion_tokens: int = 0,
    ) -> int:
        step = RunStep(
            session_id=self._sid,
            step_index=self._next_index,
            step_type=kind,
            content=content,
            tool_args=tool_args,
            duration_ms=_ms(seconds),
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
        )
        await self._store("append", self._steps.append, step)
        self._next_index += 1
        self._appended += 1
        self._emit(StepAppended(step))
        return step.step_index

    def _summary(self, status: RunStatus) -> FinalizeSummary:
        carried = len(self._snapshot.encode("utf-8")) if self._snapshot is not None else 0
        return FinalizeSummary(
            status=status,
            prompt_tokens=_int32(self._prompt),
            completion_tokens=_int32(self._completion),
            step_count=_int32(self._appended),
            duration_ms=_ms(trio.current_time() - self._started),
            data_bytes_carried=carried,
        )

    async def _finish(self, status: RunStatus, text: str) -> RunResult:
        summary = self._summary(status)
        self._finalize_tried = status
        await self._store("finalize", self._sessions.finalize, self._sid, summary)
        self._finalized = True
        self._emit(Finalized(self._sid, summary))
        return RunResult(
            status=status,
            text=text,
            steps=summary.step_count,
            prompt_tokens=summary.prompt_tokens,
            completion_tokens=summary.completion_tokens,
            duration_ms=summary.duration_ms,
        )

    async def _abort(self, exc: BaseException) -> None:
        """Best-effort, shielded and bounded ``finalize`` for a run that is raising ``exc``.

        The bound is ``finalize_timeout`` from now, or what is left of the bound
        the timeout path already started (a run is never recorded for longer
        than one ``finalize_timeout``). A finalize abandoned at the bound, or
        one that fails, is reported as a ``LoopWarning``: ``exc`` still wins.
        """
        cancelled = (
            isinstance(exc, trio.Cancelled) or trio.current_effective_deadline() == -math.inf
        )
        status = RunStatus.cancelled if cancelled else (self._abort_status or RunStatus.error)
        if self._finalized or self._gave_up or status is self._finalize_tried:
            return  # recorded, out of time, or this very finalize was tried: no second attempt
        bound = self._record_deadline
        if bound is None:
            bound = trio.current_time() + self._config.finalize_timeout
        with trio.CancelScope(shield=True), trio.move_on_at(bound) as scope:
            try:
                summary = self._summary(status)
                self._finalize_tried = status
                await self._sessions.finalize(self._sid, summary)
                self._finalized = True
                self._emit(Finalized(self._sid, summary))
            except Exception as failure:
                # The exception already propagating matters more than this one.
                self._warn(f"finalize({status}) failed: {failure!r}")
        if scope.cancelled_caught:
            self._warn(
                f"finalize({status}) abandoned after {self._config.finalize_timeout}s "
                f"(finalize_timeout)"
            )

    def _warn(self, message: str) -> None:
        """Emit a ``LoopWarning`` from a failure path, where ``on_event`` may not raise."""
        with contextlib.suppress(Exception):
            self._emit(LoopWarning(self._sid, message))

    async def _record_timeout(self) -> RunResult:
        """Append the ``error`` step and ``finalize(timeout)`` within one ``finalize_timeout``.

        Raises:
            StoreError: the bound expired; the message names the operation that
                was running and the session, ``__cause__`` is ``trio.TooSlowError``.
                No second attempt is made.
        """
        self._abort_status = RunStatus.timeout
        self._record_deadline = trio.current_time() + self._config.finalize_timeout
        operation = "finalize"
        try:
            with trio.fail_at(self._record_deadline):
                if self._loaded:  # else the next step index is unknown: record no step
                    operation = "append"
                    await self._append(
                        StepType.error, f"run_timeout expired after {self._config.run_timeout}s"
                    )
                    operation = "finalize"
                return await self._finish(RunStatus.timeout, "")
        except trio.TooSlowError as exc:
            self._gave_up = True
            raise StoreError(
                f"{operation} failed for session {self._sid!r}: recording the run_timeout "
                f"did not finish within finalize_timeout ({self._config.finalize_timeout}s); "
                f"the run is not finalized"
            ) from exc

    # -- the run --------------------------------------------------------------------------

    async def execute(self) -> RunResult:
        """Run to the end; see ``Loop.run`` for the guarantees."""
        self._emit(RunStarted(self._sid, self._message))
        try:
            deadline = math.inf
            if self._config.run_timeout is not None:
                deadline = self._started + self._config.run_timeout
            with trio.CancelScope(deadline=deadline) as scope:
                status, text = await self._body()
            if not scope.cancelled_caught:
                return await self._finish(status, text)
            return await self._record_timeout()
        except BaseException as exc:
            if not self._get_failed:  # a failed get writes nothing, finalize included
                await self._abort(exc)
            raise

    async def _body(self) -> tuple[RunStatus, str]:
        config = self._config
        try:
            session = await self._store("get", self._sessions.get, self._sid)
        except StoreError:
            self._get_failed = True
            raise
        self._snapshot = self._shown = session.data
        window = await self._store("last_n", self._steps.last_n, self._sid, config.history_window)
        self._next_index = next_step_index(window)
        self._loaded = True
        self._messages, self._sources = replay(window)
        self._load_data(session.data)

        index = await self._append(StepType.user, self._message)
        self._messages.append(Message(role="user", content=self._message))
        self._sources.append(index)
        if self._compactor is not None:
            await self._compact(self._compactor)

        budget = config.token_budget
        for _ in range(config.max_iterations):
            used = self._prompt + self._completion
            if budget is not None and used >= budget:
                await self._append(
                    StepType.error, f"token_budget exhausted: {used} of {budget} tokens used"
                )
                return RunStatus.budget_exhausted, ""
            started = trio.current_time()
            reply = await self._complete(session)
            seconds = trio.current_time() - started
            if not reply.tool_calls:
                await self._append(
                    StepType.response,
                    reply.content,
                    seconds=seconds,
                    prompt_tokens=reply.prompt_tokens,
                    completion_tokens=reply.completion_tokens,
                )
                return RunStatus.completed, reply.content
            await self._use_tools(reply, seconds)
        await self._append(
            StepType.error,
            f"max_iterations reached: {config.max_iterations} model calls without a response",
        )
        return RunStatus.max_iterations, ""

    def _load_data(self, stored: str | None) -> None:
        """Working memory from the stored snapshot (``{}`` when there is none).

        A snapshot the loop cannot read back (not JSON, or JSON that cannot be
        re-encoded, e.g. a number that decoded to ``inf``) must not brick the
        session: it is reported as a ``LoopWarning``, the run starts with empty
        working memory, the model is shown no data, and the stored text is left
        as it is until a tool writes new data over it.
        """
        if stored is not None:
            try:
                data = parse_json(stored, "data")
                self._baseline = _canonical(data)
            except (TypeError, ValueError, RecursionError) as exc:
                self._shown = None
                self._emit(
                    LoopWarning(
                        self._sid,
                        f"session data cannot be loaded ({exc}); working memory starts "
                        f"empty and the stored data is kept until a tool writes new data",
                    )
                )
            else:
                self._ctx = ToolContext(self._sid, data)
                return
        self._ctx = ToolContext(self._sid)
        self._baseline = _canonical(self._ctx.data)

    async def _compact(self, compactor: Compactor) -> None:
        try:
            compaction = await compactor.compact(tuple(self._messages))
            if not isinstance(compaction, Compaction):
                raise TypeError(f"compact must return a Compaction, got {preview(compaction)}")
            if compaction.retained_from > len(self._messages):
                raise ValueError(
                    f"retained_from must be <= {len(self._messages)} (the message count), "
                    f"got {compaction.retained_from}"
                )
        except Exception as exc:
            self._emit(LoopWarning(self._sid, f"compaction failed; history kept whole: {exc!r}"))
            return
        self._prompt += compaction.prompt_tokens
        self._completion += compaction.completion_tokens
        if not compaction.summary:
            return
        kept = compaction.retained_from
        if kept == 0 and self._messages and self._messages[0].role == "system":
            # Only replay makes system messages: this is the earlier summary. The new
            # one supersedes it, as replay will show, so it is never kept verbatim.
            kept = 1
        # The first kept message's step, or (all summarized) the step after the summary's.
        retain = self._sources[kept] if kept < len(self._sources) else self._next_index + 1
        await self._append(
            StepType.summary,
            compaction.summary,
            CompactionCheckpoint(retain).to_json(),
            prompt_tokens=compaction.prompt_tokens,
            completion_tokens=compaction.completion_tokens,
        )
        summary = Message(role="system", content=compaction.summary)
        start = kept
        while start < len(self._messages) and self._messages[start].role == "tool":
            start += 1  # results of a call that was summarized away: replay drops them too
        self._messages = [summary, *self._messages[start:]]
        self._sources = [retain, *self._sources[start:]]
        self._emit(
            Compacted(
                self._sid,
                compaction.summary,
                retain,
                compaction.prompt_tokens,
                compaction.completion_tokens,
            )
        )

    async def _complete(self, session: Session) -> ModelReply:
        request = ModelRequest(
            model=session.model or self._config.model,
            system_prompt=session.system_prompt,
            messages=tuple(self._messages),
            tools=self._specs,
            data=self._shown,
        )
        try:
            reply = await self._model.complete(request)
            if not isinstance(reply, ModelReply):
                raise TypeError(f"the model must return a ModelReply, got {preview(reply)}")
        except Exception as exc:
            await self._append(StepType.error, f"model error: {exc!r}")
            raise
        self._prompt += reply.prompt_tokens
        self._completion += reply.completion_tokens
        return reply

    async def _use_tools(self, reply: ModelReply, seconds: float) -> None:
        first_index = self._next_index
        for position, call in enumerate(reply.tool_calls):
            first = position == 0
            content, args = tool_call_fields(call, reply.content if first else "")
            await self._append(
                StepType.tool_call,
                content,
                args,
                seconds=seconds if first else 0.0,
                prompt_tokens=reply.prompt_tokens if first else 0,
                completion_tokens=reply.completion_tokens if first else 0,
            )
        self._messages.append(
            Message(role="assistant", content=reply.content, tool_calls=reply.tool_calls)
        )
        self._sources.append(first_index)
        for call in reply.tool_calls:
            started = trio.current_time()
            output = await self._call_tool(call)
            index = await self._append(
                StepType.tool_result,
                output,
                tool_result_args(call),
                seconds=trio.current_time() - started,
            )
            self._messages.append(Message(role="tool", content=output, tool_call_id=call.id))
            self._sources.append(index)

    def _restore_data(self) -> None:
        self._ctx.data = json.loads(self._baseline)

    async def _call_tool(self, call: ToolCall) -> str:
        """The tool's output, or an ``Error:`` text; persists changed working memory.

        After a write, ``ctx.data`` is replaced by the decoded stored text, so
        the rest of the run sees exactly what the next run will (``{1: "a"}``
        becomes ``{"1": "a"}``, tuples become lists).
        """
        tool = self._tools.get(call.name)
        if tool is None:
            return f"Error: unknown tool {call.name!r}; available tools: {sorted(self._tools)}"
        try:
            args = parse_json(call.args, "arguments")
        except ValueError as exc:
            return f"Error: malformed arguments for tool {call.name!r}: {exc}"
        if not isinstance(args, dict):
            return (
                f"Error: arguments for tool {call.name!r} must be a JSON object, "
                f"got {preview(call.args)}"
            )
        try:
            output = await tool.fn(args, self._ctx)
            if not isinstance(output, str):
                raise TypeError(f"tool must return a str, got {preview(output)}")
            check_text(output, "tool output")
        except Exception as exc:
            self._restore_data()  # a failed call leaves no trace in working memory
            return f"Error: tool {call.name!r} failed: {exc!r}"
        try:
            canonical = _canonical(self._ctx.data)
            if canonical == self._baseline:
                return output
            # NUL or lone surrogates no store can keep; also the value the run sees from now on
            stored = parse_json(canonical, "data")
        except (TypeError, ValueError, RecursionError) as exc:
            self._restore_data()
            return f"Error: tool {call.name!r} left working memory that is not JSON: {exc}"
        await self._store("update_data", self._sessions.update_data, self._sid, canonical)
        self._baseline = self._snapshot = self._shown = canonical
        self._ctx.data = stored
        return output
