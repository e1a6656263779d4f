"""``Loop``: drives a model and tools through the two stores, one run per call."""

from __future__ import annotations

import inspect
from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING

import anyio

from agentloop._backend import raise_pending_cancel
from agentloop._config import LoopConfig, RunResult
from agentloop._events import LoopWarning
from agentloop._lease import SupportsLease
from agentloop._lease_run import covers_appends, run_leased
from agentloop._model import Compactor, Model
from agentloop._protocols import SessionStore, StepStore, SupportsPrune
from agentloop._run import Run, RunParts, RunStores
from agentloop._tools import Tool
from agentloop._validate import check_text, preview, validate_session_id

if TYPE_CHECKING:
    from agentloop._events import EventHandler


def _check_on_event(on_event: object) -> None:
    if on_event is not None and not callable(on_event):
        raise TypeError(f"on_event must be a callable or None, got {preview(on_event)}")
    if inspect.iscoroutinefunction(on_event) or inspect.iscoroutinefunction(
        getattr(type(on_event), "__call__", None)  # noqa: B004 - an object with async __call__
    ):
        raise TypeError(
            f"on_event must be a plain (sync) callable, it is called inline; "
            f"got the async function {preview(on_event)}"
        )


def _tools_by_name(tools: Iterable[Tool]) -> dict[str, Tool]:
    by_name: dict[str, Tool] = {}
    for item in tools:
        if not isinstance(item, Tool):
            raise TypeError(f"tools must hold only Tool values, got {preview(item)}")
        if item.name in by_name:
            raise ValueError(f"tools must have distinct names, got {item.name!r} twice")
        by_name[item.name] = item
    return by_name


class Loop:
    """Runs an agent: a model, its tools, and the two stores that remember each session.

    ``steps`` / ``sessions`` default to fresh ``agentloopmem`` stores (each can
    be swapped alone); they are exposed as ``loop.steps`` / ``loop.sessions``.
    ``tools`` must have distinct names. ``on_event`` is called synchronously
    with each typed event (see :class:`EventCollector`); an exception it raises
    fails the run like any other, except on ``Finalized``, which follows the
    run's last write: that one is reported as a ``LoopWarning`` and the run
    returns what was recorded. ``compactor``, when given, runs once per run
    on the rehydrated history.

    Replay reads only ``last_n(history_window)``: a compaction summary is
    replayed while its ``summary`` step is within the window, and is gone from
    the model's view once more than ``history_window`` steps follow it (see
    ``docs/decisions.md``). Keep the window well above what one run appends.

    When ``sessions`` has leases (``SupportsLease``), every run holds the
    session's lease (a fresh owner per run) behind the in-process lock and
    writes through ``sessions.fenced(lease)``: session writes always, appends
    too when that view covers ``steps`` — ``sessions is steps`` (the SQL
    stores) or ``sessions.steps is steps`` (``agentloopmem.SessionStore(steps=
    steps)``, which is what a default ``sessions`` is when ``steps`` is a plain
    ``agentloopmem.StepStore``, not a subclass). Runs of one session are
    then exclusive across loops and processes sharing the store. Without
    leases, only runs on this ``Loop`` are kept apart. See "Several workers on
    one store" (docs/howto/workers.md).

    A ``Loop`` runs under trio or asyncio (anyio's two backends), and belongs
    to one event loop at a time (runs waiting for a session wait on that loop's events).

    Raises:
        TypeError: an argument has the wrong type.
        ValueError: two tools share a name.
    """

    def __init__(
        self,
        model: Model,
        steps: StepStore | None = None,
        sessions: SessionStore | None = None,
        tools: Iterable[Tool] = (),
        config: LoopConfig = LoopConfig(),  # noqa: B008 - frozen, so sharing it is safe
        on_event: EventHandler | None = None,
        compactor: Compactor | None = None,
    ) -> None:
        if not isinstance(model, Model):
            raise TypeError(
                f"model must have an async complete(request) method, got {preview(model)}"
            )
        if steps is None or sessions is None:
            # Imported here: agentloopmem imports agentloop, so a top-level import would cycle.
            import agentloopmem

            steps = agentloopmem.StepStore() if steps is None else steps
            if sessions is None:
                # A default session store covers an in-memory step store, so its fenced
                # views fence the run's appends too; not a subclass, whose own append
                # a fenced append (made under the stores' locks) would skip.
                covered = steps if type(steps) is agentloopmem.StepStore else None
                sessions = agentloopmem.SessionStore(steps=covered)
        if not isinstance(steps, StepStore):
            raise TypeError(f"steps must be a StepStore, got {preview(steps)}")
        if not isinstance(sessions, SessionStore):
            raise TypeError(f"sessions must be a SessionStore, got {preview(sessions)}")
        if not isinstance(config, LoopConfig):
            raise TypeError(f"config must be a LoopConfig, got {preview(config)}")
        _check_on_event(on_event)
        if compactor is not None and not isinstance(compactor, Compactor):
            raise TypeError(
                f"compactor must have an async compact(messages) method, got {preview(compactor)}"
            )
        by_name = _tools_by_name(tools)
        self._parts = RunParts(
            model=model,
            steps=steps,
            sessions=sessions,
            tools=by_name,
            specs=tuple(item.spec for item in by_name.values()),
            config=config,
            on_event=on_event,
            compactor=compactor,
        )
        # Session id -> the runs waiting for its turn (``None`` until one waits); an
        # entry exists while a run of that session holds the turn.
        self._turns: dict[str, deque[anyio.Event] | None] = {}
        # Decided once: a store's capabilities and what its views cover do not change.
        self._leases = sessions if isinstance(sessions, SupportsLease) else None
        self._covered = covers_appends(sessions, steps)
        # keep_steps on a store that cannot prune: said once, by the first run.
        self._prune_ignored = config.keep_steps is not None and not isinstance(steps, SupportsPrune)

    @property
    def steps(self) -> StepStore:
        """The step store this loop appends to."""
        return self._parts.steps

    @property
    def sessions(self) -> SessionStore:
        """The session store this loop reads sessions from and finalizes runs in."""
        return self._parts.sessions

    @property
    def config(self) -> LoopConfig:
        """The loop's settings."""
        return self._parts.config

    # The per-session lock is a turn: taking a free one is a dict insert; a run that
    # finds it taken waits on an event of its own, queued in arrival order (FIFO, as a
    # backend lock). Nothing is made for a session nobody waits on, and its entry is
    # dropped when the last run lets go, so a long-lived Loop keeps nothing per session.
    async def _wait_turn(self, session_id: str) -> None:
        """Wait until the run holding the session's turn hands it over (a checkpoint).

        A waiter cancelled before its turn came leaves the queue; one cancelled as the
        turn was handed to it passes the turn on, so no run waits for it.
        """
        waiting = self._turns[session_id]
        if waiting is None:
            waiting = self._turns[session_id] = deque()
        turn = anyio.Event()
        waiting.append(turn)
        try:
            await turn.wait()
        except BaseException:
            if turn.is_set():
                self._pass_turn(session_id)
            else:
                waiting.remove(turn)
            raise

    def _pass_turn(self, session_id: str) -> None:
        """Hand the session's turn to the longest waiting run, or drop it when none waits."""
        waiting = self._turns[session_id]
        if waiting:
            waiting.popleft().set()
        else:
            del self._turns[session_id]

    def _warn_once(self, session_id: str) -> None:
        if self._parts.on_event is not None:
            self._parts.on_event(
                LoopWarning(
                    session_id,
                    f"keep_steps={self._parts.config.keep_steps} is ignored: the step store "
                    f"has no prune_steps (SupportsPrune)",
                )
            )

    async def _start(self, session_id: str, message: str) -> RunResult:
        """The run itself, leased when the session store has leases."""
        if self._prune_ignored:
            self._prune_ignored = False
            self._warn_once(session_id)
        if self._leases is not None:
            return await run_leased(self._parts, self._leases, self._covered, session_id, message)
        stores = RunStores(self._parts.steps, self._parts.sessions, session_id)
        return await Run(self._parts, stores, message).execute()

    async def run(self, session_id: str, message: str) -> RunResult:
        """Run the agent on ``message`` for the session and return how the run ended.

        In order: ``get`` the session → ``last_n(history_window)`` → rehydrate the
        messages and the working memory → append the ``user`` step → compaction (if
        a compactor was given) → iterate: call the model; each tool call is a
        ``tool_call`` step and, once the tool ran, a ``tool_result`` step (a reply's
        calls are one ``append_all`` batch); a reply without tool calls is the
        ``response`` step and completes the run → ``finalize`` once. Step indices continue
        from the last stored step. Runs of one session on this ``Loop`` never interleave.

        Unknown tools, malformed arguments and tool exceptions become
        ``Error:`` tool results and the run goes on. ``max_iterations``,
        ``token_budget`` and ``run_timeout`` end the run with an ``error`` step
        and the matching status (``RunResult.text`` is then ``""``).

        A leased run takes the session's lease first (waiting up to ``lease_wait``),
        renews it every ``lease_ttl / 3`` and releases it at the end, shielded
        and bounded by ``finalize_timeout``.

        Raises:
            TypeError, ValueError: ``session_id`` or ``message`` is invalid.
            SessionBusyError: another owner held the session's lease for the
                whole ``lease_wait``; nothing was written.
            LeaseLostError: another owner took the lease over during the run
                (a fenced write or a renew found it); the run stopped there,
                wrote nothing more and was not finalized.
            StoreError: a store call failed; the message names the operation
                and the session, ``__cause__`` is the store's exception. A failed
                ``get`` writes nothing and finalizes nothing; any later failure
                is followed by a shielded best-effort ``finalize(error)``.
            Exception: whatever the model (or ``on_event``) raised, after an
                ``error`` step (model) and ``finalize(error)``.

        ``run_timeout`` covers the whole run, ``get`` included; when it expires
        before the history was loaded, no step is written (the next index is
        unknown), only ``finalize(timeout)``. Recording the timeout (``error``
        step, then ``finalize``) gets one ``finalize_timeout``; past it, a
        ``StoreError`` naming the operation that hung is raised (``__cause__``:
        ``trio.TooSlowError``, or ``TimeoutError`` under asyncio); no retry.

        **Cancellation** (any source: cancel scopes, ``Task.cancel()``,
        ``asyncio.timeout``): the run records ``finalize(cancelled)``, shielded
        and bounded by ``finalize_timeout``, then the cancellation propagates (a
        finalize abandoned at that bound is a ``LoopWarning``); its steps stay.
        A run cancelled while waiting for its session lock records nothing. Session
        data the loop cannot read back is a ``LoopWarning``: the run starts with
        empty working memory and leaves the stored text alone until a tool writes.
        """
        validate_session_id(session_id)
        check_text(message, "message")
        await raise_pending_cancel()  # a cancelled run never takes the turn
        if session_id in self._turns:
            await self._wait_turn(session_id)
        else:
            self._turns[session_id] = None
        try:
            return await self._start(session_id, message)
        finally:
            self._pass_turn(session_id)
