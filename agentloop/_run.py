"""One run of the loop for one session: load, iterate the model and its tools, finish.

The parts a run uses are built once per ``Loop`` (:class:`RunParts`); a run adds
its own: the store seam (``RunStores``), working memory (``WorkingMemory``),
what it records and how it ends (``RunRecord``), and what the model is shown
(``Conversation``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import attrs

from agentloop._backend import cancel_scope
from agentloop._compaction import Compaction, Compactor
from agentloop._config import LoopConfig, RunResult
from agentloop._describe import describe
from agentloop._errors import StoreError
from agentloop._events import Compacted, Event, EventHandler, LoopWarning, RunStarted
from agentloop._memory import WorkingMemory
from agentloop._model import Model, ModelReply, ModelRequest, ToolCall, ToolSpec, trusted_message
from agentloop._protocols import SessionStore, StepStore
from agentloop._rehydrate import Conversation, next_step_index, tool_call_fields, tool_result_args
from agentloop._run_record import RunRecord
from agentloop._run_stores import RunStores
from agentloop._tools import Tool
from agentloop._types import CompactionCheckpoint, RunStatus, StepType
from agentloop._validate import check_text, parse_json, preview, trusted_builder

if TYPE_CHECKING:
    from agentloop._types import Session


# Enum members read once: ``StepType.user`` is a class attribute lookup through the
# enum's metaclass (~0.1 us), on every step.
_USER, _RESPONSE = StepType.user, StepType.response
_TOOL_CALL, _TOOL_RESULT = StepType.tool_call, StepType.tool_result
_COMPLETED = RunStatus.completed


def _ignore(event: Event) -> None:
    """The event handler of a loop without ``on_event``."""


# Every field is checked already: the session's model and prompt, the conversation's
# messages, the loop's tool specs and the working memory's JSON text.
_build_request = trusted_builder(ModelRequest)


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
                return await self._record.finish(status, text)
            with cancel_scope(deadline=self._record.run_deadline()) as scope:
                status, text = await self._body()
            if not scope.cancelled_caught:
                return await self._record.finish(status, text)
            return await self._record.record_timeout()
        except BaseException as exc:
            await self._record.abort(exc)
            raise

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
            self._emit(
                LoopWarning(
                    self._session_id,
                    f"session data cannot be loaded ({problem}); working memory starts "
                    f"empty and the stored data is kept until a tool writes new data",
                )
            )
        return session

    async def _body(self) -> tuple[RunStatus, str]:
        config = self._parts.config
        record, model = self._record, self._parts.model
        session = await self._load()
        index = await record.append(_USER, self._message)
        self._conversation.add(trusted_message("user", self._message), index)
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
                    _RESPONSE,
                    reply.content,
                    seconds=seconds,
                    prompt_tokens=reply.prompt_tokens,
                    completion_tokens=reply.completion_tokens,
                )
                return _COMPLETED, reply.content
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
            self._emit(
                LoopWarning(
                    self._session_id, f"compaction failed; history kept whole: {describe(exc)}"
                )
            )
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
        return _build_request(
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
                    _TOOL_CALL,
                    content,
                    args,
                    seconds=seconds if first else 0.0,
                    prompt_tokens=reply.prompt_tokens if first else 0,
                    completion_tokens=reply.completion_tokens if first else 0,
                    offset=position,
                )
            )
        await record.append_batch(batch)  # every call of the reply, or none of them
        # Conversation.add inline (twice per call): the message, then the step it came from.
        messages, sources = self._conversation.messages, self._conversation.sources
        messages.append(trusted_message("assistant", reply.content, reply.tool_calls))
        sources.append(first_index)
        now = record.now
        for call, arguments in zip(reply.tool_calls, decoded, strict=True):
            started = now()
            output = await self._call_tool(call, arguments)
            index = await record.append(
                _TOOL_RESULT,
                output,
                tool_result_args(call),
                seconds=now() - started,
            )
            messages.append(trusted_message("tool", output, (), call.id))
            sources.append(index)

    async def _call_tool(self, call: ToolCall, args: object) -> str:
        """The tool's output, or an ``Error:`` text; persists changed working memory.

        ``args``: the call's decoded arguments, or the ``ValueError`` decoding raised.
        """
        tools = self._parts.tools
        tool = tools.get(call.name)
        if tool is None:
            return f"Error: unknown tool {call.name!r}; available tools: {sorted(tools)}"
        if isinstance(args, ValueError):
            return f"Error: malformed arguments for tool {call.name!r}: {args}"
        if not isinstance(args, dict):
            return (
                f"Error: arguments for tool {call.name!r} must be a JSON object, "
                f"got {preview(call.args)}"
            )
        try:
            output = await tool.fn(args, self._memory.context)
            if not isinstance(output, str):
                raise TypeError(f"tool must return a str, got {preview(output)}")
            check_text(output, "tool output")
        except Exception as exc:
            self._memory.discard_changes()  # a failed call leaves no trace in working memory
            return f"Error: tool {call.name!r} failed: {describe(exc)}"
        try:
            changes = self._memory.changes()
        except (TypeError, ValueError, RecursionError) as exc:
            return f"Error: tool {call.name!r} left working memory that is not JSON: {exc}"
        if changes is not None:
            await self._memory.store(changes)
        return output
