"""``step.concurrency.*``: concurrent appends and reads lose, duplicate and reorder nothing."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING

import anyio

from agentloop import RunStep, SupportsAll
from agentlooptest._clause import clause, expect
from agentlooptest._data import describe, step
from agentlooptest._stores import Steps, open_steps

if TYPE_CHECKING:
    from agentlooptest._harness import Harness


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
