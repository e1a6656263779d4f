"""The state machines of the ``*.model-based`` clauses: a store and a model side by side.

Not a clause module: ``step_model_based`` and ``session_model_based`` import
it when their clause runs. Hypothesis has no async rules, so the state
machine runs in a worker thread (:func:`_program.run_machine_thread`) and reaches
the store through :func:`_program.on_loop`, all inside the clause's own event loop run.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Awaitable, Callable, Iterator
from datetime import timedelta
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import hypothesis.internal.conjecture.engine
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.reporting import with_reporter
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from agentloop import FinalizeSummary, RunStatus, RunStep, Session, StepType
from agentlooptest._clause import Violation
from agentlooptest._clauses import _program
from agentlooptest._clauses._program import Diverged, call, diverged
from agentlooptest._data import T0, describe, json_equal, mismatch, same_steps
from agentlooptest._stores import Steps, aclose_quietly

if TYPE_CHECKING:
    from agentlooptest._harness import Harness

T = TypeVar("T")

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

    return _program.on_loop(opened)


class StepMachine(RuleBasedStateMachine):
    """A step store against a dict of lists."""

    harness: ClassVar[Harness]

    def __init__(self) -> None:
        super().__init__()
        factory = self.harness.new_step_store
        assert factory is not None
        self.steps = Steps(self.harness, _open(factory))
        _program.start()
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


class SessionMachine(RuleBasedStateMachine):
    """A session store against a dict of (session, latest summary, step total), in write order."""

    harness: ClassVar[Harness]

    def __init__(self) -> None:
        super().__init__()
        factory = self.harness.new_session_store
        assert factory is not None
        self.store: Any = _open(factory)
        _program.start()
        self.sessions: dict[str, Session] = {}
        self.finals: dict[str, FinalizeSummary] = {}
        self.totals: dict[str, int] = {}
        self.recency: list[str] = []  # most recently written first

    def teardown(self) -> None:
        """Close the example's store."""
        _open(aclose_quietly, self.store)

    def _wrote(self, sid: str) -> Session:
        if sid in self.recency:
            self.recency.remove(sid)
        self.recency.insert(0, sid)
        return self.sessions.setdefault(sid, Session(sid))

    @rule(sid=IDS, doc=DOCS)
    def update_data(self, sid: str, doc: str | None) -> None:
        """Replace the data."""
        call(self.store.update_data, sid, doc)
        old = self._wrote(sid)
        self.sessions[sid] = Session(sid, old.model, old.system_prompt, doc)

    @rule(sid=IDS, doc=st.sampled_from(["{", "NaN", "", "{'a': 1}"]))
    def update_data_invalid(self, sid: str, doc: str) -> None:
        """Non-JSON is refused with ValueError and changes nothing."""
        try:
            call(self.store.update_data, sid, doc)
        except ValueError:
            return
        raise Diverged(f"update_data({sid!r}, {doc!r})", "no error", "ValueError")

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


SHRINK_SECONDS = 15
"""How long hypothesis may shrink a failing program (each step is a thread round trip)."""


@contextlib.contextmanager
def _shrink_budget() -> Iterator[None]:
    # Hypothesis has no public setting for this; without a bound, shrinking a
    # stateful failure through thread round trips can take minutes.
    engine: Any = getattr(hypothesis.internal.conjecture, "engine", None)
    old = getattr(engine, "MAX_SHRINKING_SECONDS", None)
    if old is None:
        yield
        return
    engine.MAX_SHRINKING_SECONDS = min(old, SHRINK_SECONDS)
    try:
        yield
    finally:
        engine.MAX_SHRINKING_SECONDS = old


def run_machine(machine: type[RuleBasedStateMachine], harness: Harness) -> None:
    """Run the machine (in a worker thread); a failure becomes a Violation with the program.

    The program is the shrunk failing one, as a numbered list of store calls
    ending at the first result that differs from the model.
    """
    bound = type(machine.__name__, (machine,), {"harness": harness})
    lines: list[str] = []
    try:
        with with_reporter(lambda text: lines.append(str(text))), _shrink_budget():
            run_state_machine_as_test(bound, settings=SETTINGS)
    except Diverged as exc:
        program = _program.numbered().replace("\n", "\n              ")
        raise Violation(
            "ran random programs of calls against the store and a model side by side; "
            f"the shortest failing one, call by call:\n              {program}",
            f"{exc.call} to return what the model says: {exc.want}",
            exc.got,
        ) from None
    except Exception as exc:  # the store raised: keep its traceback, add the program
        exc.add_note("the shortest failing program, call by call (the last one raised):")
        exc.add_note(_program.numbered(last_is_failing=False))
        raise
