"""``session.fenced.*``: writes through a lost lease's ``fenced`` view are refused, atomically."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import anyio

from agentloop import (
    FinalizeSummary,
    LeaseLostError,
    RunStatus,
    Session,
    SessionStore,
    StepStore,
    SupportsAppendMany,
    SupportsRevisions,
)
from agentlooptest._clause import CAPABILITIES, clause, expect, expect_refused
from agentlooptest._clauses._leases import (
    SHORT_TTL,
    acquire,
    fresh_owner,
    outlive,
    session_state,
    take_over,
)
from agentlooptest._clauses._shared import expect_data, seed_session
from agentlooptest._data import json_equal, step
from agentlooptest._stores import Steps, open_sessions

if TYPE_CHECKING:
    from agentlooptest._harness import Harness

LATE = '{"writer": "old holder"}'
"""What the old holder writes after (or while) losing its lease."""

LOST = (
    "a worker paused past its lease (GC, SIGSTOP, a slow network) wakes up and keeps "
    "writing: unless the store refuses those writes atomically, two runs interleave and "
    "step indices repeat in the trace replay and compaction trust"
)


def _late_writes(view: Any, sid: str) -> list[tuple[str, Callable[[], Awaitable[object]]]]:
    """Every fenced write of ``view`` to ``sid``, as (description, call)."""
    summary = FinalizeSummary(RunStatus.completed, step_count=9)
    writes: list[tuple[str, Callable[[], Awaitable[object]]]] = [
        (f"update_data({sid!r}, {LATE!r})", partial(view.update_data, sid, LATE)),
        (f"finalize({sid!r}, <completed summary>)", partial(view.finalize, sid, summary)),
    ]
    if hasattr(view, "put"):
        late = Session(sid, "late-model", "late prompt", LATE)
        writes.append((f"put(Session({sid!r}, 'late-model', ...))", partial(view.put, late)))
    if isinstance(view, SupportsRevisions):
        writes.append(
            (
                f"update_data_if({sid!r}, {LATE!r}, <its current revision>)",
                partial(_update_current, view, sid),
            )
        )
    if isinstance(view, StepStore):
        writes.append((f"append(<step 7 of {sid!r}>)", partial(view.append, step(sid, 7))))
    if isinstance(view, SupportsAppendMany):
        batch = [step(sid, 8), step(sid, 9)]
        writes.append((f"append_many(<steps 8, 9 of {sid!r}>)", partial(view.append_many, batch)))
    return writes


async def _update_current(view: Any, sid: str) -> object:
    """``update_data_if`` at the session's current revision: only the lease can refuse it."""
    return await view.update_data_if(sid, LATE, await view.revision(sid))


def _capabilities(store: object) -> set[str]:
    protocols = {**CAPABILITIES, "combined": StepStore, "SessionStore": SessionStore}
    found = {name for name, proto in protocols.items() if isinstance(store, proto)}
    return {"StepStore" if name == "combined" else name for name in found}


def _expect_whole_view(store: object, view: object) -> None:
    """``view`` has every protocol and capability ``store`` has (DESIGN §7)."""
    missing = sorted(_capabilities(store) - _capabilities(view))
    expect(
        not missing,
        did="acquire_lease('f', a, 0.2), then fenced(<the lease>)",
        expected=f"a view with every protocol and capability of the store: "
        f"{sorted(_capabilities(store))}",
        got=f"a {type(view).__name__} without {missing}",
        why="the loop makes every write of a leased run through the view; a view without "
        "append (or another write) leaves those writes unfenced or the run unable to make them",
    )


@clause(
    "session.fenced.writes",
    "a fenced view is the whole store; after a takeover it refuses every write, changing nothing",
    capability="lease",
    why=LOST,
)
async def _fenced_writes(h: Harness) -> None:
    async with open_sessions(h) as store:
        await seed_session(store, "f")
        if isinstance(store, StepStore):
            await Steps(h, store).append(step("f", 0, content="seeded"))
        old = await acquire(store, "f", fresh_owner("a"), SHORT_TTL, "acquire_lease('f', a, 0.2)")
        view = store.fenced(old)
        _expect_whole_view(store, view)
        await view.update_data("f", '{"holder": "a"}')
        await expect_data(
            store, "f", '{"holder": "a"}', "update_data('f') through a's fenced view, then get('f')"
        )
        await outlive()
        did = "a's lease of 'f' (ttl 0.2s) expired, another owner acquired it"
        new = await take_over(store, "f", fresh_owner("b"), did)
        steps = view if isinstance(view, StepStore) else None
        before = await session_state(store, "f", steps)
        for what, write in _late_writes(view, "f"):
            await expect_refused(
                f"{did}, then {what} through a's fenced view", write, LeaseLostError
            )
        after = await session_state(store, "f", steps)
        expect(
            after == before,
            did=f"{did}, a's fenced writes were refused, then read 'f' back through the store",
            expected=f"'f' as before a's refused writes: {before!r:.400}",
            got=after,
        )
        await store.fenced(new).update_data("f", '{"holder": "b"}')
        await expect_data(
            store, "f", '{"holder": "b"}', f"{did}, then update_data through the new holder's view"
        )


DELAYS = range(-4, 4)
"""The races per fenced write in ``session.fenced.race``: at delay ``d >= 0`` the takeover
starts ``d`` checkpoints after the write, at ``d < 0`` the write ``-d`` after the takeover."""


async def _checkpoints(count: int) -> None:
    for _ in range(count):
        await anyio.lowlevel.checkpoint()


async def _shows_late(store: Any, view: Any, sid: str, op: str) -> bool:
    if op == "append":  # steps read through the view when the store is not a StepStore
        steps = store if isinstance(store, StepStore) else view
        return any(s.content == LATE for s in await steps.last_n(sid, 10))
    return json_equal(LATE, (await store.get(sid)).data)


def _head_start(delay: int) -> str:
    if delay >= 0:
        return f"the takeover started {delay} checkpoint(s) after the write"
    return f"the write started {-delay} checkpoint(s) after the takeover"


async def _race_once(store: Any, view: Any, sid: str, op: str, delay: int) -> None:
    """The old holder's late ``op`` races another owner's takeover and first read."""
    outcome: list[str] = []
    first_read: list[bool] = []

    async def old_holder() -> None:
        await _checkpoints(-delay)
        try:
            if op == "append":
                await view.append(step(sid, 1, content=LATE))
            else:
                await view.update_data(sid, LATE)
        except LeaseLostError:
            outcome.append("raised LeaseLostError")
        else:
            outcome.append("returned")

    async def new_holder() -> None:
        await _checkpoints(delay)
        await take_over(store, sid, fresh_owner("b"), f"the takeover of {sid!r}")
        first_read.append(await _shows_late(store, view, sid, op))

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(old_holder)
        tasks.start_soon(new_holder)
    landed = outcome == ["returned"]
    later = await _shows_late(store, view, sid, op)
    expect(
        first_read == [landed] and later == landed,
        did=f"a's lease of {sid!r} expired; a's fenced {op} raced another owner's "
        f"acquire_lease and first read ({_head_start(delay)})",
        expected="the write landed before the takeover (the new holder's first read shows it) "
        "or it raised LeaseLostError and no read ever shows it",
        got=f"the write {outcome[0]}; the new holder's first read "
        f"{'shows' if first_read == [True] else 'does not show'} it, a later read "
        f"{'shows' if later else 'does not show'} it",
    )


@clause(
    "session.fenced.race",
    "a fenced write racing a takeover lands before it or is refused, never after it",
    capability="lease",
    why=(
        "a fence checked outside the write's transaction lets a write checked just before "
        "the takeover land just after it, under the new holder's feet"
    ),
)
async def _fenced_race(h: Harness) -> None:
    async with open_sessions(h) as store:
        trials: list[tuple[Any, str, str, int]] = []
        for delay in DELAYS:
            for op in ("update_data", "append"):
                sid = f"race-{op}-{delay}"
                await store.update_data(sid, '{"writer": "seed"}')
                lease = await acquire(store, sid, fresh_owner("a"), SHORT_TTL, "acquire_lease")
                view = store.fenced(lease)
                if op == "append":
                    if not isinstance(view, StepStore):
                        continue
                    await Steps(h, store).ensure(sid)
                trials.append((view, sid, op, delay))
        await outlive()
        for view, sid, op, delay in trials:
            await _race_once(store, view, sid, op, delay)
