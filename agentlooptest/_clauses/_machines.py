"""The state machines of the ``*.model-based`` clauses: a store and a model side by side.

Imported only when one of those clauses runs (``model_based.py``, ``lease.py``):
hypothesis is a heavy import, and its trio plugin loads pytest.

**Where the machine runs.** Hypothesis has no async rules, so the machine
runs in a worker thread (:func:`_in_worker_thread`) and awaits each store call
on the clause's own event loop (:func:`on_loop`), sharing the clause's
cancellation.

**The program.** Every store call a machine makes is logged (:func:`call`), so
a failure shows the program as a numbered list of calls, the last one marked
where the store and the model parted. Hypothesis replays the shrunk failing
program last, so after a failure the log is that program. Shrinking runs a
store call per step through the thread; it is bounded: :data:`SHRINK_SECONDS`
after the first failing program, the machine stops at the next program's
start and the shortest failing program seen so far is reported.

**The budget.** A machine runs its ``examples`` programs in batches of
:data:`BATCH`, each batch a hypothesis run with a seed of its own (the batch's
number): the same programs every run, whatever the machine's source. Once
:data:`MIN_PROGRAMS` have run, it starts no further batch past
:data:`PROGRAM_SECONDS`: a store a round trip away gets fewer programs, never
fewer than that floor; a store whose calls take microseconds gets them all.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import threading
import time
import traceback
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from contextvars import ContextVar
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any, ClassVar, TypeVar, cast

import anyio
import attrs
from anyio.from_thread import BlockingPortal
from hypothesis import HealthCheck, seed, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from agentloop import (
    FinalizeSummary,
    Lease,
    LeaseLostError,
    RevisionConflictError,
    RunStatus,
    RunStep,
    Session,
    StepType,
)
from agentloop._shared import on_trio
from agentlooptest._cancel import spurious_cancel
from agentlooptest._clause import Violation
from agentlooptest._data import T0, describe, json_equal, mismatch, same_steps
from agentlooptest._harness import Harness, Steps, aclose_quietly

T = TypeVar("T")

SHRINK_SECONDS = 15
"""Seconds after the first failing program that shorter ones are looked for (each store call
is a thread round trip, so shrinking without a bound can take minutes)."""

PROGRAM_SECONDS = 3.0
"""Seconds of programs a machine runs in full: past them, once :data:`MIN_PROGRAMS` have run,
it starts no more batches. A store whose calls take microseconds runs every program; one a
network round trip away, fewer (its calls cost what they cost whatever they find)."""

MIN_PROGRAMS = 20
"""Programs a machine runs whatever they cost (its ``examples``, if fewer). Every model-based
store of the broken-store catalogue fails within them."""

BATCH = 10
"""Programs per hypothesis run: a machine's programs are runs of this many, each with its own
fixed seed (:func:`hypothesis.seed`), so it can stop between two."""


class Diverged(AssertionError):
    """A store call returned something other than the model's answer."""

    def __init__(self, call: str, got: str, want: str) -> None:
        super().__init__(f"{call} returned {got}; the model says {want}")
        self.call = call
        self.got = got
        self.want = want


@attrs.frozen
class _Failure:
    """A failing program: how many calls it made, the calls as shown, and what it raised."""

    calls: int
    program: str
    error: Exception


class _Program:
    """The calls of the program running now, and the shortest failing program seen so far."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.first_failure: float | None = None
        self.shortest: _Failure | None = None
        self.by_error: dict[int, _Failure] = {}  # id(error) -> the program that raised it
        self.distinct: dict[tuple[str, ...], _Failure] = {}  # the shortest of each kind

    def failed(self, error: Exception) -> None:
        """The running program fails with ``error`` (a divergence or the store's own)."""
        if self.first_failure is None:
            self.first_failure = time.monotonic()
        text = numbered(self.calls, last_is_failing=isinstance(error, Diverged))
        failure = _Failure(len(self.calls), text, error)
        self.by_error[id(error)] = failure  # hypothesis reports the errors its replays raised
        if self.shortest is None or len(self.calls) < self.shortest.calls:
            self.shortest = failure
        kind = _kind(error)
        known = self.distinct.get(kind)
        if known is None or len(self.calls) < known.calls:
            self.distinct[kind] = failure

    def out_of_time(self) -> bool:
        """Whether :data:`SHRINK_SECONDS` have passed since the first failing program."""
        started = self.first_failure
        return started is not None and time.monotonic() - started > SHRINK_SECONDS


def _kind(error: Exception) -> tuple[str, ...]:
    """What tells two failures apart: the call that diverged, or where the store raised."""
    if isinstance(error, Diverged):
        return ("diverged", error.call.partition("(")[0])
    return (type(error).__name__, _where(error))


def _where(error: BaseException) -> str:
    frames = traceback.extract_tb(error.__traceback__)
    return f"{Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""


_THREAD = threading.local()
"""The machine's worker thread's :class:`_Program` (``.program``)."""


def _program() -> _Program:
    program: _Program = _THREAD.program
    return program


class _OutOfTime(BaseException):
    """Shrinking ran out of :data:`SHRINK_SECONDS`: the machine stops at a program's start.

    A ``BaseException``, so hypothesis does not take it for a failing program.
    """


def _start() -> None:
    """A new program begins: forget the last one's calls, or stop if out of time."""
    program = _program()
    if program.out_of_time():
        raise _OutOfTime
    program.calls.clear()


def diverged(same: bool, call: str, got: object, want: object) -> None:
    """Raise :class:`Diverged` unless ``same`` (``got``/``want`` shown as ``repr`` unless str)."""
    if not same:
        error = Diverged(call, _text(got), _text(want))
        _program().failed(error)
        raise error


def _text(value: object) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= 400 else f"{text[:400]}... ({len(text)} chars)"


def call(fn: Callable[..., Coroutine[Any, Any, T]], *args: Any, shown: str = "") -> T:
    """Await ``fn(*args)`` on the event loop thread that started the machine, logging the call
    (as ``shown`` when given)."""
    program = _program()
    program.calls.append(shown or show_call(fn, args))
    try:
        return on_loop(fn, *args)
    except Exception as exc:
        program.failed(exc)
        raise


def raises(
    error: type[Exception], fn: Callable[..., Coroutine[Any, Any, Any]], *args: Any, shown: str = ""
) -> bool:
    """:func:`call`; whether it raised ``error`` (which, here, is no failure)."""
    program = _program()
    program.calls.append(shown or show_call(fn, args))
    try:
        on_loop(fn, *args)
    except error:
        return True
    except Exception as exc:
        program.failed(exc)
        raise
    return False


class _Calls:
    """How the machine's thread reaches the loop under asyncio: a portal, and a stop flag."""

    def __init__(self) -> None:
        self.portal: BlockingPortal | None = None
        self.stopped = False


_CALLS: ContextVar[_Calls | None] = ContextVar("agentlooptest_calls", default=None)


class _Cancelled(BaseException):
    """The clause was cancelled: the machine (in its thread) stops at its next store call.

    A ``BaseException``, so hypothesis does not take it for a failing example.
    """


def on_loop(fn: Callable[..., Coroutine[Any, Any, T]], *args: Any) -> T:
    """From the machine's worker thread: await ``fn(*args)`` on the event loop, cancellably.

    Once the clause is cancelled the call raises (the backend's cancellation
    under trio), so the machine stops instead of running its examples out.
    """
    calls = _CALLS.get()
    if calls is None:
        return anyio.from_thread.run(fn, *args)
    if calls.stopped or calls.portal is None:
        raise _Cancelled
    try:
        result: T = calls.portal.call(_unless_spurious, fn, *args)
    except concurrent.futures.CancelledError:
        calls.stopped = True
        raise _Cancelled from None
    return result


async def _unless_spurious(fn: Callable[..., Coroutine[Any, Any, T]], *args: Any) -> T:
    """``await fn(*args)``; a ``CancelledError`` the store raised by itself becomes an error.

    Otherwise it would cancel the portal's call and read as the clause being cancelled.
    """
    try:
        return await fn(*args)
    except asyncio.CancelledError as exc:
        error = spurious_cancel(exc)
        if error is None:
            raise
        raise error from exc


async def _in_worker_thread(fn: Callable[..., object], *args: Any) -> None:
    """Run ``fn(*args)`` in a worker thread whose :func:`on_loop` calls share our cancellation.

    Under trio, ``from_thread.run`` already runs in the cancellation context
    of the ``to_thread`` call. anyio's asyncio backend runs such calls inside
    the shield that keeps the thread's wait uncancellable, so under asyncio
    the calls go through a portal inside a scope of ours, and a watcher task
    cancels that scope and stops the machine when the clause is cancelled
    (its timeout too): the running store call is cancelled, and the next one
    raises at once.
    """
    if on_trio():
        await anyio.to_thread.run_sync(fn, *args)
        return
    calls, cancelled = _Calls(), False

    async def watch(scope: anyio.CancelScope) -> None:
        try:
            await anyio.sleep_forever()
        finally:
            calls.stopped = True
            scope.cancel()

    async with anyio.create_task_group() as tasks:
        with anyio.CancelScope() as scope:
            tasks.start_soon(watch, scope)
            async with BlockingPortal() as calls.portal:
                token = _CALLS.set(calls)  # the worker thread runs in a copy of this context
                try:
                    await anyio.to_thread.run_sync(fn, *args)
                except _Cancelled:
                    cancelled = True
                finally:
                    _CALLS.reset(token)
        tasks.cancel_scope.cancel()
    if cancelled:
        await anyio.lowlevel.checkpoint()  # the clause's cancellation, delivered here
        raise RuntimeError("the machine's store calls were cancelled from outside")


def show_call(fn: Callable[..., Any], args: tuple[Any, ...]) -> str:
    """``name(arg, ...)`` as the program shows it: steps compact, times relative to T0."""
    shown = [_arg(a) for a in args]
    if isinstance(fn, partial):
        shown += [f"{k}={_arg(v)}" for k, v in fn.keywords.items()]
        fn = fn.func
    return f"{getattr(fn, '__name__', repr(fn))}({', '.join(shown)})"


def _arg(value: object) -> str:
    if isinstance(value, Lease):
        return f"<lease {value.token} of {value.session_id!r} for {value.owner!r}>"
    if isinstance(value, RunStep):
        return (
            f"RunStep({value.session_id!r}, {value.step_index}, {value.step_type.value}, "
            f"{value.content!r}, tool_args={value.tool_args!r}, "
            f"created_at={_when(value.created_at)})"
        )
    return repr(value)


def _when(at: datetime) -> str:
    seconds = (at - T0).total_seconds()
    return f"T0{seconds:+g}s"


def numbered(calls: list[str], *, last_is_failing: bool) -> str:
    """The calls as ``1. call`` lines, the last marked as where the results parted."""
    lines = [f"{i}. {c}" for i, c in enumerate(calls, 1)]
    if lines and last_is_failing:
        lines[-1] += "   <- the first result that differs from the model"
    return "\n".join(lines) if lines else "(no store call)"


SETTINGS = settings(
    max_examples=40,
    stateful_step_count=30,
    deadline=None,
    database=None,
    derandomize=True,
    print_blob=False,
    suppress_health_check=list(HealthCheck),
)
"""Modest and reproducible: the machine runs once per certified store, in CI too."""

IDS = st.sampled_from(["a", "b", "A", "a b", "é"])
STEP_IDS = st.sampled_from(["a", "A", "a b"])
TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=12)
DOCS = st.one_of(
    st.none(),
    st.sampled_from(
        ["{}", "[]", "null", "0", '{"k": [1, 2.5]}', '"é🧪"', '{"b": 1, "a": 2}', '{"plan": null}']
    ),
)
SUMMARIES = st.builds(
    FinalizeSummary,
    status=st.sampled_from(RunStatus),
    prompt_tokens=st.integers(0, 2**31 - 1),
    step_count=st.integers(0, 50),
)


def _open(fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    """Await ``fn(*args)`` on the event loop thread (opening, closing: not part of the program)."""

    async def opened() -> T:
        return await fn(*args)

    try:
        return on_loop(opened)
    except Exception as exc:
        _program().failed(exc)
        raise


class StepMachine(RuleBasedStateMachine):
    """A step store against a dict of lists."""

    harness: ClassVar[Harness]
    examples: ClassVar[int] = 40

    def __init__(self) -> None:
        super().__init__()
        factory = self.harness.new_step_store
        assert factory is not None
        _start()
        self.steps = Steps(self.harness, _open(factory))
        self.model: dict[str, list[RunStep]] = {}
        self.counter = 0

    def teardown(self) -> None:
        """Close the example's store."""
        _open(aclose_quietly, self.steps.store)

    @rule(
        sid=STEP_IDS,
        kind=st.sampled_from(StepType),
        content=TEXT,
        index=st.integers(0, 3),
        skew=st.integers(-3, 3),
    )
    def append(self, sid: str, kind: StepType, content: str, index: int, skew: int = 0) -> None:
        """Append a step; indices repeat and the clock ties and runs backwards on purpose."""
        self.counter += 1
        text = f"#{self.counter} {content}"
        args = json.dumps({"n": self.counter, "note": None if self.counter % 2 else "x"})
        at = T0 + timedelta(seconds=skew)
        s = RunStep(sid, index, kind, text, args, created_at=at)
        call(self.steps.append, s)
        self.model.setdefault(sid, []).append(s)

    @rule(sid=STEP_IDS, count=st.integers(2, 6))
    def append_run(self, sid: str, count: int) -> None:
        """Append several steps one after another, as one run of the loop does."""
        for k in range(count):
            self.append(sid, StepType.tool_result, f"run step {k}", k, -k)

    @precondition(lambda self: hasattr(self.steps.store, "append_many"))
    @rule(sid=STEP_IDS, indices=st.lists(st.integers(0, 2), min_size=1, max_size=5))
    def append_many(self, sid: str, indices: list[int]) -> None:
        """Append a batch whose step indices repeat: every step kept, in order."""
        batch = []
        for index in indices:
            self.counter += 1
            batch.append(RunStep(sid, index, StepType.tool_call, f"#{self.counter} batch"))
        on_loop(self.steps.ensure, sid)  # the harness's set-up, not a call of the program
        call(self.steps.store.append_many, batch)
        self.model.setdefault(sid, []).extend(batch)

    @precondition(lambda self: hasattr(self.steps.store, "prune_steps"))
    @rule(sid=STEP_IDS, keep=st.integers(1, 4), chance=st.integers(0, 3))
    def prune_steps(self, sid: str, keep: int, chance: int) -> None:
        """Pruning keeps the newest ``keep`` steps and says how many went (now and then)."""
        if chance:
            return
        got = call(partial(self.steps.store.prune_steps, sid, keep_last=keep))
        held = self.model.get(sid, [])
        want = max(0, len(held) - keep)
        if sid in self.model:
            self.model[sid] = held[-keep:]
        diverged(got == want, f"prune_steps({sid!r}, keep_last={keep})", got, want)

    @rule(sid=STEP_IDS, n=st.integers(1, 10))
    def last_n(self, sid: str, n: int) -> None:
        """The store's window equals the model's."""
        got = call(self.steps.last_n, sid, n)
        want = self.model.get(sid, [])[-n:]
        diverged(
            same_steps(want, got), f"last_n({sid!r}, {n})", mismatch(want, got), describe(want)
        )

    @rule(sid=STEP_IDS, delta=st.integers(-5, 2))
    def last_n_near_count(self, sid: str, delta: int) -> None:
        """A window near the session's length, where off-by-one bugs live."""
        self.last_n(sid, max(1, len(self.model.get(sid, [])) + delta))

    @precondition(lambda self: hasattr(self.steps.store, "all"))
    @rule(sid=STEP_IDS)
    def all(self, sid: str) -> None:
        """The whole trace equals the model's."""
        got = call(self.steps.store.all, sid)
        want = self.model.get(sid, [])
        diverged(same_steps(want, got), f"all({sid!r})", mismatch(want, got), describe(want))

    @precondition(lambda self: hasattr(self.steps.store, "delete_session"))
    @rule(sid=STEP_IDS, chance=st.integers(0, 3))
    def delete_session(self, sid: str, chance: int) -> None:
        """Deleting answers whether steps existed and empties the session (now and then)."""
        if chance:  # rarer than the other rules, so histories grow long enough to matter
            return
        got = call(self.steps.store.delete_session, sid)
        want = bool(self.model.pop(sid, []))
        diverged(got is want, f"delete_session({sid!r})", got, want)


def _session_model(machine: Any) -> None:
    """Open the example's session store and the empty model a session machine keeps."""
    factory = machine.harness.new_session_store
    assert factory is not None
    _start()
    machine.store = _open(factory)
    machine.sessions = {}  # id -> Session
    machine.finals = {}  # id -> the latest FinalizeSummary
    machine.totals = {}  # id -> the step total
    machine.recency = []  # most recently written first
    machine.revisions = {}  # the largest revision each session showed


def _wrote_session(machine: Any, sid: str) -> Session:
    """Move ``sid`` to the front of the model's write order; its session (new if unknown)."""
    if sid in machine.recency:
        machine.recency.remove(sid)
    machine.recency.insert(0, sid)
    session: Session = machine.sessions.setdefault(sid, Session(sid))
    return session


class SessionMachine(RuleBasedStateMachine):
    """A session store against a dict of (session, latest summary, step total), in write order."""

    harness: ClassVar[Harness]
    examples: ClassVar[int] = 40
    store: Any
    sessions: dict[str, Session]
    finals: dict[str, FinalizeSummary]
    totals: dict[str, int]
    recency: list[str]
    revisions: dict[str, int]

    def __init__(self) -> None:
        super().__init__()
        _session_model(self)

    def teardown(self) -> None:
        """Close the example's store."""
        _open(aclose_quietly, self.store)

    _wrote = _wrote_session

    @rule(sid=IDS, doc=DOCS)
    def update_data(self, sid: str, doc: str | None) -> None:
        """Replace the data."""
        call(self.store.update_data, sid, doc)
        old = self._wrote(sid)
        self.sessions[sid] = Session(sid, old.model, old.system_prompt, doc)

    @rule(sid=IDS, doc=st.sampled_from(["{", "NaN", "", "{'a': 1}"]))
    def update_data_invalid(self, sid: str, doc: str) -> None:
        """Non-JSON is refused with ValueError and changes nothing."""
        refused = raises(ValueError, self.store.update_data, sid, doc)
        diverged(refused, f"update_data({sid!r}, {doc!r})", "no error", "ValueError")

    @rule(sid=IDS, summary=SUMMARIES)
    def finalize(self, sid: str, summary: FinalizeSummary) -> None:
        """Record a run's end."""
        call(self.store.finalize, sid, summary)
        self._wrote(sid)
        self.finals[sid] = summary
        self.totals[sid] = self.totals.get(sid, 0) + summary.step_count

    @precondition(lambda self: hasattr(self.store, "put"))
    @rule(sid=IDS, model=TEXT, prompt=TEXT, doc=DOCS)
    def put(self, sid: str, model: str, prompt: str, doc: str | None) -> None:
        """Seed the whole session."""
        session = Session(sid, model, prompt, doc)
        call(self.store.put, session)
        self._wrote(sid)
        self.sessions[sid] = session

    @precondition(lambda self: hasattr(self.store, "update_data_if"))
    @rule(sid=IDS, doc=DOCS, stale=st.booleans())
    def update_data_if(self, sid: str, doc: str | None, stale: bool) -> None:
        """A revision-checked write: applied at the current revision, refused at any other;
        revisions only grow, across deletes too."""
        revision = call(self.store.revision, sid)
        seen = self.revisions.get(sid, 0)
        diverged(revision >= seen, f"revision({sid!r})", revision, f">= {seen} (seen before)")
        if stale:
            refused = raises(
                RevisionConflictError, self.store.update_data_if, sid, doc, revision + 1
            )
            diverged(
                refused,
                f"update_data_if({sid!r}, ..., {revision + 1})",
                "no error",
                "RevisionConflictError",
            )
            return
        new = call(self.store.update_data_if, sid, doc, revision)
        diverged(new > revision, f"update_data_if({sid!r}, ..., {revision})", new, f"> {revision}")
        self.revisions[sid] = new
        old = self._wrote(sid)
        self.sessions[sid] = Session(sid, old.model, old.system_prompt, doc)

    @rule(sid=IDS)
    def get(self, sid: str) -> None:
        """get equals the model's session (a fresh one when unknown)."""
        got = call(self.store.get, sid)
        want = self.sessions.get(sid, Session(sid))
        same = (
            isinstance(got, Session)
            and (got.id, got.model, got.system_prompt) == (want.id, want.model, want.system_prompt)
            and json_equal(want.data, got.data)
        )
        diverged(same, f"get({sid!r})", got, want)

    @rule(sid=IDS)
    def exists(self, sid: str) -> None:
        """exists equals the model's."""
        got = call(self.store.exists, sid)
        diverged(got is (sid in self.sessions), f"exists({sid!r})", got, sid in self.sessions)

    @precondition(lambda self: hasattr(self.store, "final"))
    @rule(sid=IDS)
    def final(self, sid: str) -> None:
        """final equals the latest summary."""
        got = call(self.store.final, sid)
        want = self.finals.get(sid)
        diverged(got == want, f"final({sid!r})", got, want)

    @precondition(lambda self: hasattr(self.store, "delete_session"))
    @rule(sid=IDS)
    def delete_session(self, sid: str) -> None:
        """Deleting forgets everything about the session."""
        got = call(self.store.delete_session, sid)
        want = self.sessions.pop(sid, None) is not None
        self.finals.pop(sid, None)
        self.totals.pop(sid, None)
        if sid in self.recency:
            self.recency.remove(sid)
        diverged(got is want, f"delete_session({sid!r})", got, want)

    @invariant()
    def listing(self) -> None:
        """list_sessions shows sessions by write recency with the latest status and step total."""
        if not hasattr(self.store, "list_sessions"):
            return
        got = [
            (i.id, i.status, i.step_count)
            for i in call(partial(self.store.list_sessions, limit=50))
        ]
        want = [
            (sid, self.finals[sid].status if sid in self.finals else None, self.totals.get(sid, 0))
            for sid in self.recency
        ]
        diverged(got == want, "list_sessions(limit=50) as (id, status, step_count)", got, want)


LEASE_TTL = 3600.0
"""The ttl of every lease the lease machine takes: no lease expires during a program, since
the harness's stores here read a clock the machine does not control."""

OWNERS = st.one_of(st.just("w"), st.sampled_from(["W", "w ", "w\u00e9", "we\u0301"]))
"""Owners that differ by case, a trailing space, NFC against NFD: a store must tell each apart.
One is drawn as often as the rest together, so the same owner's older receipts come up."""


def _another(owner: str) -> str:
    """An owner other than ``owner``, one that differs from it least: by case."""
    return owner.swapcase() if owner.swapcase() != owner else owner + "2"


LEASE_IDS = st.sampled_from(["a", "A"])
"""Two sessions only, so the lease calls of a program meet on the same grants."""

LEASE_CALLS = st.sampled_from(
    ["acquire", "renew", "release", "fenced write", "release then acquire"]
)
"""What a lease machine step does: acquire, or present a receipt."""

RECEIPTS = st.sampled_from(["older", "latest", "any"])
"""Which receipt a call presents: one of the session's older receipts, by the owner of its
latest grant when there is one (a run that released and acquired again under its own name,
presenting what it held before: the receipt a store that checks owners, not tokens, takes for
the live one); the session's latest; or any receipt granted so far (:data:`PICKS`)."""

REOPENS = 2
"""Reopens per program at most: each opens a connection on a SQL store."""

PICKS = st.integers(0, 63)
"""Which of the chosen receipts a call presents: an index into them."""


@attrs.frozen
class _Grant:
    """A session's latest lease grant in the model."""

    owner: str
    token: int
    released: bool


class LeaseMachine(RuleBasedStateMachine):
    """Leases (acquire, renew, release, writes through a fenced view of any receipt granted
    so far), some of :class:`SessionMachine`'s calls and, when the harness can, reopening.

    Three rules (a lease call, a session call, reopen), the call drawn as a value: with a
    rule per call, or every session rule added, hypothesis (which leaves rules out of whole
    programs and favours some) made a receipt call a few times a run. Receipts are drawn
    by kind (:data:`RECEIPTS`), the older ones of the holder's own name a third of the
    time: among every receipt alike, the one that tells a token check from an owner check
    came up too rarely to be found in every run."""

    harness: ClassVar[Harness]
    examples: ClassVar[int] = 25
    store: Any
    sessions: dict[str, Session]
    finals: dict[str, FinalizeSummary]
    totals: dict[str, int]
    recency: list[str]
    revisions: dict[str, int]

    _wrote = _wrote_session  # no listing invariant: a call per step, checked by the session machine

    def __init__(self) -> None:
        super().__init__()
        _session_model(self)
        self.first = self.store  # the harness's handle; reopen() hands out others
        self.grants: dict[str, _Grant] = {}  # a store never forgets a grant, deletes included
        self.receipts: list[Lease] = []
        self.reopened = 0

    def teardown(self) -> None:
        """Close the reopened handle, then the first."""
        if self.store is not self.first:
            _open(aclose_quietly, self.store)
        _open(aclose_quietly, self.first)

    def _receipt(self, sid: str, which: str, pick: int) -> tuple[Lease, _Grant]:
        """A receipt of ``sid`` (of any session if ``sid`` has none) of the kind ``which``
        names (:data:`RECEIPTS`), and its session's latest grant."""
        pool = [r for r in self.receipts if r.session_id == sid] or self.receipts
        if which == "any":
            pool = self.receipts
        latest = self.grants[pool[0].session_id]
        if which == "latest":
            pool = [r for r in pool if r.token == latest.token] or pool
        elif which == "older":
            older = [r for r in pool if r.token != latest.token]
            pool = [r for r in older if r.owner == latest.owner] or older or pool
        lease = pool[pick % len(pool)]
        return lease, self.grants[lease.session_id]

    def acquire_lease(self, sid: str, owner: str) -> None:
        """Free or released: a new, larger token; the live holder again: its token; else None."""
        got = call(self.store.acquire_lease, sid, owner, LEASE_TTL)
        shown = f"acquire_lease({sid!r}, {owner!r}, {LEASE_TTL:g})"
        latest = self.grants.get(sid)
        live = latest is not None and not latest.released
        if live and latest is not None and latest.owner != owner:
            diverged(got is None, shown, got, f"None: {latest.owner!r} holds a live lease")
            return
        fits = isinstance(got, Lease) and (got.session_id, got.owner) == (sid, owner)
        diverged(fits, shown, got, f"a Lease of {sid!r} for {owner!r}")
        assert isinstance(got, Lease)
        if live and latest is not None:
            want = f"token {latest.token}: the holder's own live lease"
            diverged(got.token == latest.token, shown, f"token {got.token}", want)
        elif latest is not None:
            want = f"a token above {latest.token}, the session's latest"
            diverged(got.token > latest.token, shown, f"token {got.token}", want)
        self.grants[sid] = _Grant(owner, got.token, released=False)
        self.receipts.append(got)

    def renew_lease(self, lease: Lease, latest: _Grant) -> None:
        """The latest unreleased grant renews, keeping its token; any other is lost."""
        shown = f"renew_lease({_arg(lease)}, {LEASE_TTL:g})"
        if latest.token != lease.token or latest.released:
            refused = raises(LeaseLostError, self.store.renew_lease, lease, LEASE_TTL)
            diverged(refused, shown, "no error", "LeaseLostError")
            return
        got = call(self.store.renew_lease, lease, LEASE_TTL)
        same = isinstance(got, Lease) and (got.session_id, got.owner, got.token) == (
            lease.session_id,
            lease.owner,
            lease.token,
        )
        diverged(same, shown, got, f"the same lease (token {lease.token}), renewed")

    def release_lease(self, lease: Lease, latest: _Grant) -> None:
        """Releases the latest grant; a no-op for an older one, or a second time: then a
        live holder still holds it, which another owner's acquire shows at once."""
        call(self.store.release_lease, lease)
        if latest.token == lease.token:
            self.grants[lease.session_id] = attrs.evolve(latest, released=True)
        elif not latest.released:
            self.acquire_lease(lease.session_id, _another(latest.owner))

    @rule(
        sid=LEASE_IDS,
        owner=OWNERS,
        which=RECEIPTS,
        pick=PICKS,
        action=LEASE_CALLS,
        doc=DOCS,
        same=st.booleans(),
    )
    def lease_call(
        self, sid: str, owner: str, which: str, pick: int, action: str, doc: str | None, same: bool
    ) -> None:
        """Acquire, or present a receipt granted so far (often an older one): renew,
        release, a fenced write, or release the session's latest grant and acquire again
        (as the same owner when ``same``). One rule for them all: hypothesis leaves rules
        out of whole programs and favours some, and split into rules the receipt calls
        came up a few times a run."""
        if action == "acquire" or not self.receipts:
            self.acquire_lease(sid, owner)
            return
        lease, latest = self._receipt(sid, which, pick)
        if action == "renew":
            self.renew_lease(lease, latest)
        elif action == "release":
            self.release_lease(lease, latest)
        elif action == "fenced write":
            self.fenced_update_data(lease, latest, doc)
        else:
            self.release_then_acquire(lease.session_id, latest.owner if same else owner)

    @rule(sid=IDS, action=st.sampled_from(["update_data", "get", "exists", "delete"]), doc=DOCS)
    def session_call(self, sid: str, action: str, doc: str | None) -> None:
        """One of the session machine's calls, on the same model."""
        if action == "update_data":
            SessionMachine.update_data(cast(SessionMachine, self), sid, doc)
        elif action == "get":
            SessionMachine.get(cast(SessionMachine, self), sid)
        elif action == "exists":
            SessionMachine.exists(cast(SessionMachine, self), sid)
        else:
            SessionMachine.delete_session(cast(SessionMachine, self), sid)

    def release_then_acquire(self, sid: str, owner: str) -> None:
        """A run ends and the next starts: ``sid``'s latest grant is released and ``owner``
        (often the same) acquires it, so older receipts pile up."""
        self.release_lease(*self._receipt(sid, "latest", 0))
        self.acquire_lease(sid, owner)

    def fenced_update_data(self, lease: Lease, latest: _Grant, doc: str | None) -> None:
        """A fenced write lands while its token is the latest (released or not), else is
        refused with LeaseLostError and changes nothing."""
        sid = lease.session_id
        view = self.store.fenced(lease)
        shown = f"fenced({_arg(lease)}).update_data({sid!r}, {doc!r})"
        if latest.token != lease.token:
            refused = raises(LeaseLostError, view.update_data, sid, doc, shown=shown)
            diverged(refused, shown, "no error", "LeaseLostError")
            return
        call(view.update_data, sid, doc, shown=shown)
        old = self._wrote(sid)
        self.sessions[sid] = Session(sid, old.model, old.system_prompt, doc)

    @precondition(lambda self: self.harness.reopen is not None and self.reopened < REOPENS)
    @rule()
    def reopen(self) -> None:
        """A second handle onto the same data replaces the one in use (which is closed)."""
        reopen = self.harness.reopen
        assert reopen is not None
        _program().calls.append("reopen()  (the calls below go through a second handle)")
        other = _open(reopen, self.first)
        if self.store is not self.first and self.store is not other:
            _open(aclose_quietly, self.store)
        self.store = other
        self.reopened += 1


async def run_machine(machine: type[RuleBasedStateMachine], harness: Harness) -> None:
    """Run ``machine``'s random programs against ``harness``'s stores, in a worker thread.

    Raises:
        Violation: a program diverged from the model; the message holds the
            shortest failing program, call by call, ending at the first
            result that differs from the model.
        Exception: the store raised; its notes hold that program (the last
            call raised).
    """
    await _in_worker_thread(_run_in_thread, machine, harness)


def _run_in_thread(machine: type[RuleBasedStateMachine], harness: Harness) -> None:
    bound = type(machine.__name__, (machine,), {"harness": harness})
    program = _THREAD.program = _Program()
    try:
        _run_batches(bound, getattr(machine, "examples", 40))
    except _Cancelled:
        raise
    except Diverged as exc:
        raise _diverged(exc, numbered(program.calls, last_is_failing=True)) from None
    except ExceptionGroup as group:  # hypothesis found distinct failures: one program each
        found = [program.by_error.get(id(e)) for e in _leaves(group)]
        raise _distinct([f for f in found if f is not None] or program.distinct.values()) from None
    except BaseException as exc:
        shortest = program.shortest
        if program.out_of_time() and len(program.distinct) > 1:
            raise _distinct(program.distinct.values()) from None
        if program.out_of_time() and shortest is not None:
            _report(shortest)
        if not isinstance(exc, Exception):
            raise
        _add_program(exc, numbered(program.calls, last_is_failing=False))
        raise


def _run_batches(bound: type[RuleBasedStateMachine], examples: int) -> None:
    """Run ``examples`` programs of ``bound`` in batches (see the module docstring)."""
    began = time.monotonic()
    for first in range(0, examples, BATCH):
        floor = min(examples, MIN_PROGRAMS)
        if first >= floor and time.monotonic() - began > PROGRAM_SECONDS:
            return
        chosen = settings(SETTINGS, max_examples=min(BATCH, examples - first))
        run_state_machine_as_test(seed(first // BATCH)(bound), settings=chosen)


def _report(failure: _Failure) -> None:
    """Raise what the shortest failing program raised, as :func:`_run_in_thread` would."""
    error = failure.error
    if isinstance(error, Diverged):
        raise _diverged(error, failure.program) from None
    _add_program(error, failure.program)
    raise error from error.__cause__


def _diverged(exc: Diverged, program: str) -> Violation:
    shown = program.replace("\n", "\n              ")
    return Violation(
        "ran random programs of calls against the store and a model side by side; "
        f"the shortest failing one, call by call:\n              {shown}",
        f"{exc.call} to return what the model says: {exc.want}",
        exc.got,
    )


def _distinct(failures: Iterable[_Failure]) -> Violation:
    """One violation showing each distinct failure's shortest program, numbered."""
    shown = list(failures)
    indent = "\n              "
    blocks = []
    for i, failure in enumerate(shown, 1):
        error = failure.error
        if isinstance(error, Diverged):
            what = f"{error.call} returned {error.got}; the model says {error.want}"
        else:
            at = _where(error)
            what = f"the last call raised {type(error).__name__}: {_text(str(error))}" + (
                f" (at {at})" if at else ""
            )
        block = f"failure {i} of {len(shown)}: {what}\n{failure.program}"
        blocks.append(block.replace("\n", indent))
    return Violation(
        "ran random programs of calls against the store and a model side by side; "
        f"{len(shown)} distinct failures, the shortest failing program of each, "
        f"call by call:{indent}" + indent.join(blocks),
        "every call to return what the model says, and none to raise",
        f"{len(shown)} distinct failures (each program above ends at its first wrong call)",
    )


def _leaves(group: BaseExceptionGroup[Exception]) -> list[Exception]:
    found: list[Exception] = []
    for exc in group.exceptions:
        found += _leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc]
    return found


def _add_program(exc: BaseException, program: str) -> None:
    """Keep the store's traceback; add the program that made it raise."""
    exc.add_note("the shortest failing program, call by call (the last one raised):")
    exc.add_note(program)
