"""The base clauses on calls in flight: concurrent calls, and calls cut short by cancellation.

By family, in run order:

- ``step.concurrency.*``: concurrent appends and reads lose, duplicate and reorder nothing;
- ``step.cancel.*``: a cancelled ``append``, ``last_n`` or ``delete_session`` has wholly
  happened or not at all, and the store stays usable;
- ``session.concurrency.*``: concurrent writes and reads on one or many sessions;
- ``session.cancel.*``: the same for the session store's writes, reads and deletes.

The ``*.cancel.*`` clauses cancel each call at each of its checkpoints
(``agentlooptest._cancel``); under asyncio also with a native ``Task.cancel()``.
What a cancelled call may leave is what the rules give (before or after the
call, whole), never what the store did with an uncancelled call.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import anyio

from agentloop import (
    FinalizeSummary,
    RunStatus,
    RunStep,
    Session,
    StepStore,
    SupportsAll,
    SupportsPut,
)
from agentloop._shared import on_trio
from agentlooptest._cancel import (
    Points,
    cancel_at,
    cancel_either,
    each_way,
    native_cancel_at,
    still_usable,
)
from agentlooptest._clause import clause, expect
from agentlooptest._data import (
    DONE,
    describe,
    expect_data,
    json_equal,
    mismatch,
    same_steps,
    seed_session,
    step,
)
from agentlooptest._harness import Harness, Steps, open_sessions, open_steps


def _by_task(got: list[RunStep], tasks: int) -> dict[int, list[int]]:
    seen: dict[int, list[int]] = {t: [] for t in range(tasks)}
    for s in got:
        task, _, seq = s.content.partition(":")
        seen.setdefault(int(task), []).append(int(seq))
    return seen


async def _concurrent_appends(
    s: Steps, sessions: list[str], tasks_per_session: int, per_task: int
) -> None:
    for sid in sessions:
        await s.ensure(sid)

    async def writer(sid: str, task: int) -> None:
        for seq in range(per_task):
            await s.store.append(step(sid, seq, content=f"{task}:{seq}"))

    async with anyio.create_task_group() as tasks:
        for t in range(tasks_per_session):
            for sid in sessions:
                tasks.start_soon(writer, sid, t)
    total = tasks_per_session * per_task
    did = (
        f"{tasks_per_session} tasks per session x {len(sessions)} session(s) appended "
        f"{per_task} steps each, concurrently from one nursery"
    )
    for sid in sessions:
        got = await s.last_n(sid, total + 10)
        expect(
            len(got) == total,
            did=f"{did}, then last_n({sid!r}, {total + 10})",
            expected=f"{total} steps (nothing lost, nothing duplicated)",
            got=f"{len(got)} steps",
        )
        for task, seqs in _by_task(got, tasks_per_session).items():
            expect(
                seqs == list(range(per_task)),
                did=f"{did}, then read session {sid!r}",
                expected=f"task {task}'s steps in the order it appended them: "
                f"{list(range(per_task))}",
                got=f"{seqs}",
                why="a task's own appends, awaited one after another, are its conversation "
                "in order; reordering them reorders what the model sees",
            )


@clause(
    "step.concurrency.many-sessions",
    "hundreds of concurrent appends across sessions: nothing lost, each task's order kept",
    why=(
        "a server runs many sessions at once; a store that loses or reorders appends under "
        "concurrency silently drops turns from conversations"
    ),
)
async def _many_sessions(h: Harness) -> None:
    async with open_steps(h) as s:
        await _concurrent_appends(s, [f"c{k}" for k in range(12)], 8, 5)


@clause(
    "step.concurrency.one-session",
    "hundreds of concurrent appends to one session: nothing lost, each task's order kept",
    why=(
        "concurrent appends to one session happen (parallel tool calls, retries); a "
        "read-modify-write store loses some of them and the trace has holes"
    ),
    hint="a read-modify-write of the session's list without a lock",
)
async def _one_session(h: Harness) -> None:
    async with open_steps(h) as s:
        await _concurrent_appends(s, ["shared"], 100, 4)


@clause(
    "step.concurrency.read-during-append",
    "last_n racing appends returns a contiguous window: no gaps, no duplicates, no reordering",
    why=(
        "the loop reads history while other tasks append (a second run, a tool); a torn "
        "read stitched from two moments feeds the model a conversation that never existed"
    ),
)
async def _read_during_append(h: Harness) -> None:
    async with open_steps(h) as s:
        # 80 > 64: a store that reads long windows in pages must hold them together too.
        total, window = 300, 80
        await s.ensure("busy")
        reads: list[tuple[str, Callable[[], Awaitable[list[RunStep]]]]] = [
            (f"last_n('busy', {window})", partial(s.store.last_n, "busy", window))
        ]
        if isinstance(s.store, SupportsAll):
            reads.append(("all('busy')", partial(s.store.all, "busy")))
        torn: list[str] = []

        async def writer() -> None:
            for k in range(total):
                await s.store.append(step("busy", k, content=str(k)))

        async def reader(what: str, read: Callable[[], Awaitable[list[RunStep]]]) -> None:
            for _ in range(40):
                got = await read()
                seqs = [int(x.content) for x in got]
                limit = window if what.startswith("last_n") else total
                if seqs and (seqs != list(range(seqs[0], seqs[0] + len(seqs)))):
                    torn.append(f"{what}: {_runs(seqs)}")
                elif seqs and len(seqs) < limit and seqs[0] != 0:
                    torn.append(f"{what}: {_runs(seqs)} (short, not starting at the first step)")
                await anyio.lowlevel.checkpoint()

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(writer)
            for what, read in reads:
                for _ in range(2):
                    tasks.start_soon(reader, what, read)
        expect(
            not torn,
            did=f"one task appended steps 0..{total - 1} to 'busy' while two tasks each called "
            f"{' and '.join(w for w, _ in reads)} again and again",
            expected="every window a run of consecutive steps in order, as of one moment",
            got=f"{len(torn)} torn window(s), e.g. step numbers {torn[0] if torn else ''}",
        )
        final = await s.last_n("busy", window)
        expect(
            [x.content for x in final] == [str(k) for k in range(total - window, total)],
            did=f"after the appends, last_n('busy', {window})",
            expected=f"steps {total - window}..{total - 1}",
            got=describe(final),
        )


def _runs(seqs: list[int]) -> str:
    """Step numbers as runs of consecutive ones: ``[0..63, 70..85]``; long windows stay short."""
    parts: list[str] = []
    start = prev = seqs[0]
    for k in [*seqs[1:], None]:
        if k is not None and k == prev + 1:
            prev = k
            continue
        parts.append(str(start) if start == prev else f"{start}..{prev}")
        if k is not None:
            start = prev = k
    return "[" + ", ".join(parts) + "]"


async def _after_cancel(s: Steps, sid: str, before: list[RunStep], extra: RunStep) -> None:
    """The store still takes an append after a cancelled call, and returns it last."""
    await still_usable(f"append to {sid!r}", lambda: s.append(extra))
    got = await still_usable(f"last_n({sid!r}, 100)", lambda: s.last_n(sid, 100))
    expect(
        same_steps([*before, extra], got),
        did=f"appended to {sid!r} after a cancelled call, then last_n",
        expected=describe([*before, extra]),
        got=describe(got),
        why="a store left inconsistent by one cancelled call corrupts every later run",
    )


@clause(
    "step.cancel.append",
    "append cancelled at each checkpoint: the step is wholly there or wholly absent",
    why=(
        "the loop is cancelled routinely (timeouts, user aborts); a half-written step "
        "replays as a corrupt turn, and a lost lock wedges the store"
    ),
)
async def _cancel_append(h: Harness) -> None:
    async with open_steps(h) as s:
        # The first append to a session often takes another path (it creates the row).
        for first in (True, False):
            points = Points()
            for point in points:
                sid = f"cancel-{'first' if first else 'append'}-{point}"
                before = [] if first else [step(sid, 0)]
                await s.ensure(sid)
                await s.append_all(before)
                new = step(
                    sid, len(before), content="the step being cancelled", tool_args='{"k": [1, 2]}'
                )
                done = await cancel_at(partial(s.store.append, new), point)
                points.finished(done)
                got = await still_usable(f"last_n({sid!r}, 10)", partial(s.last_n, sid, 10))
                what = "the first step" if first else "a step"
                did = f"appended {what} to {sid!r}, cancelled after {point} checkpoint(s), "
                did += "then last_n"
                if done:
                    expect(
                        same_steps([*before, new], got),
                        did=did + " (the append returned)",
                        expected=describe([*before, new]),
                        got=mismatch([*before, new], got),
                    )
                else:
                    expect(
                        same_steps(before, got) or same_steps([*before, new], got),
                        did=did,
                        expected=f"either {describe(before)} or {describe([*before, new])}, whole",
                        got=mismatch([*before, new], got),
                    )
                await _after_cancel(s, sid, got, step(sid, 2, content="after the cancel"))
        await _cancel_amid_appends(s)
        if not on_trio():
            await _task_cancel_append(s)


async def _task_cancel_append(s: Steps) -> None:
    """Under asyncio, the same with a native ``Task.cancel()`` (no anyio scope re-delivers it)."""
    points = Points()
    for point in points:
        sid = f"task-cancel-{point}"
        before = [step(sid, 0)]
        await s.append_all(before)
        new = step(sid, 1, content="the step being cancelled")
        did = f"appended a step to {sid!r}"
        done = await native_cancel_at(partial(s.store.append, new), point, did)
        points.finished(done)
        got = await still_usable(f"last_n({sid!r}, 10)", partial(s.last_n, sid, 10))
        allowed = [[*before, new]] if done else [before, [*before, new]]
        expect(
            any(same_steps(want, got) for want in allowed),
            did=f"{did}, Task.cancel() at its suspension #{point + 1}, then last_n",
            expected=" or ".join(describe(want) for want in allowed) + ", whole",
            got=mismatch([*before, new], got),
        )


BIG_ARGS = json.dumps({"blob": "x" * 200_000})
"""Tool arguments past 128 KiB: a write that takes more than one round trip or page."""


async def _cancel_amid_appends(s: Steps) -> None:
    """Cancel a large append while another task appends to the same session.

    The rules: the other task's steps are all kept, in their order; the
    cancelled step is there once (wherever it landed among them) or not at
    all, and surely there when its append returned.
    """
    points = Points()
    for point in points:
        sid = f"cancel-busy-{point}"
        await s.ensure(sid)
        others = [step(sid, k, content=f"other #{k}") for k in range(3)]
        new = step(sid, 9, content="the large step being cancelled", tool_args=BIG_ARGS)

        async def other_task(others: list[RunStep] = others) -> None:
            for other in others:
                await s.append(other)

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(other_task)
            done = await cancel_at(partial(s.store.append, new), point)
        points.finished(done)
        got = await still_usable(f"last_n({sid!r}, 10)", partial(s.last_n, sid, 10))
        kept = [g for g in got if g.content != new.content]
        mine = [g for g in got if g.content == new.content]
        expect(
            same_steps(others, kept) and (same_steps([new], mine) or (not done and not mine)),
            did=f"appended a step with {len(BIG_ARGS):,} characters of tool_args to {sid!r}, "
            f"cancelled after {point} checkpoint(s), while another task appended 3 steps "
            "to it; then last_n",
            expected=f"the other task's {describe(others)} in order, and the large step "
            + ("once (its append returned)" if done else "once or not at all"),
            got=describe(got),
            hint="a cancelled write undone by truncating to the length it saw, or by deleting "
            "the newest row: that erases another task's append",
        )


async def _cancel_read(
    s: Steps, what: str, read: Callable[[], Awaitable[Any]], want: list[RunStep]
) -> None:
    points = Points()
    for point in points:
        points.finished(await cancel_at(read, point))
        got = await still_usable(f"{what} again", read)
        expect(
            same_steps(want, got),
            did=f"cancelled {what} after {point} checkpoint(s), then called it again",
            expected=describe(want),
            got=describe(got),
        )


@clause(
    "step.cancel.reads",
    "last_n cancelled at each checkpoint leaves the store unchanged and usable",
    why=(
        "reads are cancelled as often as writes; a read that leaks a lock or a connection "
        "when cancelled wedges every later run"
    ),
)
async def _step_cancel_reads(h: Harness) -> None:
    async with open_steps(h) as s:
        sent = [step("r", k) for k in range(5)]
        await s.append_all(sent)
        await _cancel_read(s, "last_n('r', 3)", lambda: s.last_n("r", 3), sent[-3:])
        if hasattr(s.store, "all"):
            await _cancel_read(s, "all('r')", lambda: s.store.all("r"), sent)
        await _after_cancel(s, "r", sent, step("r", 9))


@clause(
    "step.cancel.delete",
    "delete_session cancelled at each checkpoint: the steps are all there or all gone",
    capability="delete_session",
    why=(
        "an erasure cut short must not leave a trace with holes: a half-deleted history "
        "replays as a conversation that never happened"
    ),
)
async def _step_cancel_delete(h: Harness) -> None:
    async with open_steps(h) as s:
        points = Points()
        for point in points:
            sid = f"cancel-delete-{point}"
            sent = [step(sid, k) for k in range(5)]
            await s.append_all(sent)
            done = await cancel_at(partial(s.store.delete_session, sid), point)
            points.finished(done)
            got = await still_usable(f"last_n({sid!r}, 10)", partial(s.last_n, sid, 10))
            expect(
                got == [] if done else (got == [] or same_steps(sent, got)),
                did=f"delete_session({sid!r}) on 5 steps, cancelled after {point} checkpoint(s), "
                "then last_n",
                expected="[]" if done else f"[] or all of {describe(sent)}",
                got=describe(got),
            )
            await _after_cancel(s, sid, got, step(sid, 9, content="after the cancel"))


def _writer_doc(k: int) -> str:
    """Writer ``k``'s document; odd writers list its keys in reverse.

    A store that applies a document key by key then ends with keys from two
    writers even when the tasks run in lockstep (asyncio's FIFO scheduling):
    the last writer of the first key is not the last writer of the last one.
    """
    items = [("writer", k), ("copy", k), ("a", k), ("b", [k]), ("c", {"k": k})]
    return json.dumps(dict(items if k % 2 == 0 else reversed(items)))


@clause(
    "session.concurrency.same-session",
    "concurrent update_data on one session ends with exactly one of the written values",
    why=(
        "parallel tool calls write working memory concurrently; a store that merges or "
        "tears concurrent writes leaves a snapshot nobody wrote"
    ),
)
async def _same_session(h: Harness) -> None:
    async with open_sessions(h) as store:
        for storm in range(6):
            sid = f"shared-{storm}"
            written = [_writer_doc(k) for k in range(60)]
            async with anyio.create_task_group() as tasks:
                for doc in written:
                    tasks.start_soon(store.update_data, sid, doc)
            got = await store.get(sid)
            expect(
                any(json_equal(doc, got.data) for doc in written),
                did=f"60 tasks called update_data({sid!r}, <their own document>) concurrently, "
                f"then get({sid!r})",
                expected="data equal to one of the 60 written documents",
                got=got,
            )


@clause(
    "session.concurrency.many-sessions",
    "concurrent writes to hundreds of sessions each land on their own session",
    why=(
        "a server runs many sessions at once; a store that crosses concurrent writes "
        "hands one user's working memory to another"
    ),
)
async def _many(h: Harness) -> None:
    async with open_sessions(h) as store:
        ids = [f"m{k}" for k in range(200)]

        async def write(k: int, sid: str) -> None:
            await store.update_data(sid, json.dumps({"owner": sid}))
            await store.finalize(sid, FinalizeSummary(RunStatus.completed, step_count=k))

        async with anyio.create_task_group() as tasks:
            for k, sid in enumerate(ids):
                tasks.start_soon(write, k, sid)
        for sid in ids:
            await expect_data(
                store,
                sid,
                json.dumps({"owner": sid}),
                f"200 tasks each wrote update_data + finalize to their session, then get({sid!r})",
            )


@clause(
    "session.concurrency.first-writes",
    "racing first writes (update_data and finalize) on a new session both survive",
    why=(
        "the first run of a session writes data and finalizes close together; a "
        "check-then-insert store lets one first write overwrite the other and memory is lost"
    ),
)
async def _first_writes(h: Harness) -> None:
    async with open_sessions(h) as store:
        ids = [f"new{k}" for k in range(60)]
        async with anyio.create_task_group() as tasks:
            for k, sid in enumerate(ids):  # either may start first, also under FIFO scheduling
                if k % 2:
                    tasks.start_soon(store.finalize, sid, DONE)
                tasks.start_soon(store.update_data, sid, json.dumps({"first": sid}))
                if not k % 2:
                    tasks.start_soon(store.finalize, sid, DONE)
        for sid in ids:
            await expect_data(
                store,
                sid,
                json.dumps({"first": sid}),
                f"raced update_data({sid!r}, <doc>) against finalize({sid!r}, ...) on a new "
                f"session, then get({sid!r})",
            )
            if hasattr(store, "final"):
                final = await store.final(sid)
                expect(final == DONE, did=f"then final({sid!r})", expected=repr(DONE), got=final)


ROUNDS = 40


def _doc(k: int) -> str:
    return json.dumps({"version": k, "plan": ["step"] * (k % 3)})


@clause(
    "session.concurrency.read-your-writes",
    "once update_data returns, get sees it, even with other tasks calling get meanwhile",
    why=(
        "the loop persists working memory and the next run (or a tool) reads it back; a "
        "cache that re-fills with the old value while the write is in flight serves stale "
        "working memory forever after"
    ),
)
async def _read_your_writes(h: Harness) -> None:
    async with open_sessions(h) as store:
        sid = "ryw"
        await store.update_data(sid, _doc(0))
        done = False

        async def reader() -> None:
            while not done:  # a get that never yields must not starve the writer
                await store.get(sid)
                await anyio.lowlevel.checkpoint()

        async with anyio.create_task_group() as tasks:
            for _ in range(3):
                tasks.start_soon(reader)
            try:
                for k in range(1, ROUNDS + 1):
                    await store.update_data(sid, _doc(k))
                    await expect_data(
                        store,
                        sid,
                        _doc(k),
                        did=f"update_data({sid!r}, <version {k}>) returned while 3 other tasks "
                        f"called get({sid!r}) in a loop; then get({sid!r})",
                    )
            finally:
                done = True


@clause(
    "session.concurrency.finalize-keeps-data",
    "finalize racing update_data (and put) on an existing session: no write discards another's",
    why=(
        "the loop finalizes while tools may still persist working memory; a write that "
        "loads the row and saves it back whole silently rolls back the memory or the summary"
    ),
)
async def _finalize_keeps_data(h: Harness) -> None:
    async with open_sessions(h) as store:
        sid = "racing"
        can_put = isinstance(store, SupportsPut)
        if can_put:
            await store.put(Session(sid, "model-x", "prompt-x", _doc(0)))
        else:
            await store.update_data(sid, _doc(0))
        done = False
        written = [0]  # the step counts every finalize that returned added up

        async def finalizer() -> None:
            k = 0
            while True:  # at least once, also when no write of the store ever suspends
                k += 1
                await store.finalize(sid, FinalizeSummary(RunStatus.completed, step_count=k))
                written[0] += k
                if done:
                    return
                await anyio.lowlevel.checkpoint()

        async with anyio.create_task_group() as tasks:
            for _ in range(2):
                tasks.start_soon(finalizer)
            try:
                for k in range(1, ROUNDS + 1):
                    by_put = can_put and k % 4 == 0
                    if by_put:
                        await store.put(Session(sid, "model-x", "prompt-x", _doc(k)))
                    else:
                        await store.update_data(sid, _doc(k))
                    write = "put(<same session, version" if by_put else "update_data(<version"
                    await expect_data(
                        store,
                        sid,
                        _doc(k),
                        did=f"{write} {k}>) on the existing session {sid!r} returned while 2 "
                        f"other tasks called finalize({sid!r}, ...) in a loop; then get({sid!r})",
                    )
                    await anyio.lowlevel.checkpoint()  # the finalizers run, suspending or not
            finally:
                done = True
        await expect_data(
            store,
            sid,
            _doc(ROUNDS),
            did=f"after the finalize tasks stopped, get({sid!r})",
        )
        await _summary_kept(store, sid, written[0])


async def _summary_kept(store: Any, sid: str, written: int) -> None:
    """After the race, the summary and total are every finalize's: no data write undid one."""
    did = f"2 tasks finalized {sid!r} in a loop while update_data and put wrote it; then "
    hint = "update_data or put saving back a whole row it read before a finalize committed"
    if hasattr(store, "final"):
        final = await store.final(sid)
        expect(
            isinstance(final, FinalizeSummary) and final.status is RunStatus.completed,
            did=did + f"final({sid!r})",
            expected="a completed summary, one the finalize tasks wrote",
            got=final,
            hint=hint,
        )
    if hasattr(store, "list_sessions"):
        infos = [i for i in await store.list_sessions(limit=1000) if i.id == sid]
        expect(
            [(i.status, i.step_count) for i in infos] == [(RunStatus.completed, written)],
            did=did + "list_sessions()",
            expected=f"{sid!r} listed once, completed, step_count {written} (the sum of "
            "every finalize that returned)",
            got=infos,
            hint=hint,
        )


Rule = dict[str, Any]
"""A session as the rules say it must be: exists, model, prompt, data, final, status, total."""

NEW: Rule = {
    "exists": False,
    "model": "",
    "system_prompt": "",
    "data": None,
    "final": None,
    "status": None,
    "total": 0,
}
SEEDED: Rule = {  # what seed_session writes
    **NEW,
    "exists": True,
    "data": {"before": 1},
    "final": FinalizeSummary(RunStatus.error, step_count=1),
    "status": RunStatus.error,
    "total": 1,
}


def shown(store: Any, rule: Rule) -> dict[str, object]:
    """What :func:`session_state` must read for a session in the state ``rule``."""
    state: dict[str, object] = {k: rule[k] for k in ("exists", "model", "system_prompt", "data")}
    if hasattr(store, "final"):
        state["final"] = rule["final"]
    if hasattr(store, "list_sessions"):
        state["listed"] = [(rule["status"], rule["total"])] if rule["exists"] else []
    return state


async def _cancel_write(
    h: Harness,
    what: str,
    on: str,
    setup: Callable[[Any, str], Awaitable[None]],
    write: Callable[[Any, str], Awaitable[None]],
    rule: Callable[[Any, Rule], Rule],
) -> None:
    """Cancel ``write`` at each checkpoint; the session must then be wholly before or after.

    Before and after are the states the rules give (``rule`` turns the one
    into the other), never what this store did with an uncancelled call.
    Under asyncio each point is tried again with a native ``Task.cancel()``.
    """
    async with open_sessions(h) as store:
        prefix = f"{what.partition('(')[0]}-{setup.__name__.strip('_')}"
        start = SEEDED if setup is seed_session else NEW
        before, after = shown(store, start), shown(store, rule(store, start))
        for points, point, native in each_way():
            sid = f"{prefix}-{'task-' if native else ''}{point}"
            await setup(store, sid)
            done = await cancel_either(partial(write, store, sid), point, native, f"{what} {sid!r}")
            points.finished(done)
            got = await still_usable(f"reading {sid!r} back", partial(session_state, store, sid))
            allowed = [after] if done else [before, after]
            expect(
                got in allowed,
                did=f"{what} on {on} {sid!r}, cancelled after {point} checkpoint(s), "
                "then read the session back",
                expected=_clip(" or ".join(repr(a) for a in allowed)) + " (whole)",
                got=_clip(repr(got)),
                hint="two round trips without a transaction, or a cache updated before the "
                "write committed",
            )
            await still_usable(
                f"update_data({sid!r}, ...)", partial(store.update_data, sid, '{"after": "cancel"}')
            )
            await expect_data(
                store,
                sid,
                '{"after": "cancel"}',
                f"cancelled {what} on {sid!r}, wrote again, then get",
            )


async def session_state(store: Any, sid: str) -> dict[str, object]:
    """Everything the base protocol (and the capabilities present) shows of a session."""
    got: Session = await store.get(sid)
    state: dict[str, object] = {
        "exists": await store.exists(sid),
        "model": got.model,
        "system_prompt": got.system_prompt,
        "data": None if got.data is None else json.loads(got.data),
    }
    if hasattr(store, "final"):
        state["final"] = await store.final(sid)
    if hasattr(store, "list_sessions"):
        info = [i for i in await store.list_sessions(limit=1000) if i.id == sid]
        state["listed"] = [(i.status, i.step_count) for i in info]
    return state


BIG_DATA = json.dumps({"blob": "y" * 150_000})
"""Data past 128 KiB: a write that may take more than one round trip, page or chunk."""


def _clip(text: str) -> str:
    return text if len(text) <= 800 else f"{text[:800]}... ({len(text):,} chars)"


@clause(
    "session.cancel.writes",
    "update_data, finalize and put cancelled at each checkpoint: all or nothing",
    why=(
        "the loop finalizes under cancellation (shielded, with a short deadline); a "
        "half-applied write leaves a summary without its data or a row nobody wrote"
    ),
)
async def _cancel_writes(h: Harness) -> None:
    summary = FinalizeSummary(RunStatus.completed, 5, 6, 7, 8, 9)

    async def update(store: Any, sid: str) -> None:
        await store.update_data(sid, '{"after": [1, 2, 3]}')

    def updated(store: Any, s: Rule) -> Rule:
        return {**s, "exists": True, "data": {"after": [1, 2, 3]}}

    async def finalize(store: Any, sid: str) -> None:
        await store.finalize(sid, summary)

    def finalized(store: Any, s: Rule) -> Rule:
        return {**s, "exists": True, "final": summary, "status": summary.status,
                "total": s["total"] + summary.step_count}  # fmt: skip

    async def put(store: Any, sid: str) -> None:
        if hasattr(store, "put"):
            await store.put(Session(sid, "model-x", "prompt-x", '{"put": true}'))

    def was_put(store: Any, s: Rule) -> Rule:  # put keeps the run summary and the total
        if not hasattr(store, "put"):
            return s
        return {**s, "exists": True, "model": "model-x", "system_prompt": "prompt-x",
                "data": {"put": True}}  # fmt: skip

    async def new(store: Any, sid: str) -> None:
        pass

    async def update_big(store: Any, sid: str) -> None:
        await store.update_data(sid, BIG_DATA)

    def updated_big(store: Any, s: Rule) -> Rule:
        return {**s, "exists": True, "data": json.loads(BIG_DATA)}

    what = f"update_data(<id>, <{len(BIG_DATA):,} characters of JSON>)"
    await _cancel_write(h, what, "the written session", seed_session, update_big, updated_big)
    for setup, on in ((new, "the new session"), (seed_session, "the written session")):
        what = "update_data(<id>, '{\"after\": [1, 2, 3]}')"
        await _cancel_write(h, what, on, setup, update, updated)
        await _cancel_write(
            h, "finalize(<id>, <completed summary>)", on, setup, finalize, finalized
        )
        await _cancel_write(h, "put(Session(<id>, 'model-x', ...))", on, setup, put, was_put)


@clause(
    "session.cancel.reads",
    "get, exists, final and list_sessions cancelled at each checkpoint leave the store usable",
    why="a read that leaks a lock or connection when cancelled wedges every later run",
)
async def _session_cancel_reads(h: Harness) -> None:
    async with open_sessions(h) as store:
        await seed_session(store, "r")
        want = shown(store, SEEDED)
        reads: list[tuple[str, Callable[[], Awaitable[object]]]] = [
            ("get('r')", partial(store.get, "r")),
            ("exists('r')", partial(store.exists, "r")),
        ]
        if hasattr(store, "final"):
            reads.append(("final('r')", partial(store.final, "r")))
        if hasattr(store, "list_sessions"):
            reads.append(("list_sessions()", partial(store.list_sessions, limit=10)))
        for what, read in reads:
            points = Points()
            for point in points:
                points.finished(await cancel_at(read, point))
                got = await still_usable("reading 'r' back", partial(session_state, store, "r"))
                expect(
                    got == want,
                    did=f"cancelled {what} after {point} checkpoint(s), then read",
                    expected=repr(want),
                    got=got,
                )


@clause(
    "session.cancel.delete",
    "delete_session cancelled at each checkpoint: the session is wholly there or wholly gone",
    capability="delete_session",
    why=(
        "an erasure cut short must not leave a session half deleted: data gone but the "
        "summary listed (or steps left behind) is state no later call can explain"
    ),
)
async def _session_cancel_delete(h: Harness) -> None:
    async with open_sessions(h) as store:
        steps = Steps(h, store) if isinstance(store, StepStore) else None

        async def state(sid: str) -> dict[str, object]:
            seen = await session_state(store, sid)
            if steps is not None:
                seen["steps"] = [s.content for s in await steps.last_n(sid, 10)]
            return seen

        async def seed(sid: str) -> None:
            if steps is not None:
                await steps.append_all([step(sid, k, content=f"seeded #{k}") for k in range(2)])
            await seed_session(store, sid)

        before, after = shown(store, SEEDED), shown(store, NEW)  # as the rules say
        if steps is not None:
            before["steps"], after["steps"] = ["seeded #0", "seeded #1"], []
        points = Points()
        for point in points:
            sid = f"delete-{point}"
            await seed(sid)
            done = await cancel_at(partial(store.delete_session, sid), point)
            points.finished(done)
            got = await still_usable(f"reading {sid!r} back", partial(state, sid))
            allowed = [after] if done else [before, after]
            expect(
                got in allowed,
                did=f"delete_session({sid!r}), cancelled after {point} checkpoint(s), then read",
                expected=" or ".join(repr(a) for a in allowed) + " (whole)",
                got=got,
            )
