"""Step clauses under stress: fresh stores, concurrency, cancellation, closing."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import trio

from agentloop import RunStep, SupportsAll
from agentlooptest._cancel import Points, cancel_at, still_usable
from agentlooptest._clause import Violation, clause, expect, expect_closed
from agentlooptest._data import describe, mismatch, same_steps, step
from agentlooptest._stores import Steps, open_steps

if TYPE_CHECKING:
    from agentlooptest._harness import Harness

SENTINEL = "agentlooptest-sentinel"


@clause(
    "step.fresh-store",
    "each new_step_store() call gives an empty store, not one sharing another's state",
    why=(
        "the loop and eval suites count on fresh stores starting empty; state shared "
        "between instances leaks one suite's (or tenant's) history into another"
    ),
)
async def _fresh(h: Harness) -> None:
    async with open_steps(h) as first:
        got = await first.last_n(SENTINEL, 10)
        expect(
            got == [],
            did=f"opened a store with new_step_store(), then last_n({SENTINEL!r}, 10)",
            expected="[] (a fresh store is empty)",
            got=describe(got),
        )
        await first.append(step(SENTINEL, 0))
        async with open_steps(h) as second:
            got = await second.last_n(SENTINEL, 10)
            expect(
                got == [],
                did=f"appended to {SENTINEL!r} in one store, opened a second with "
                "new_step_store() and called last_n on it",
                expected="[] (the second store is fresh and empty)",
                got=describe(got),
            )


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

    async with trio.open_nursery() as nursery:
        for t in range(tasks_per_session):
            for sid in sessions:
                nursery.start_soon(writer, sid, t)
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
                await trio.lowlevel.checkpoint()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(writer)
            for what, read in reads:
                for _ in range(2):
                    nursery.start_soon(reader, what, read)
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
    await still_usable(f"append to {sid!r}", lambda: s.store.append(extra))
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
async def _cancel_reads(h: Harness) -> None:
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
async def _cancel_delete(h: Harness) -> None:
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


@clause(
    "step.closed",
    "after aclose, every call raises StoreClosedError; aclose is idempotent",
    capability="aclose",
    why=(
        "a closed store that keeps answering (or fails with some other error) hides "
        "shutdown-ordering bugs: writes after close are silently lost"
    ),
)
async def _closed(h: Harness) -> None:
    async with open_steps(h) as s:
        await s.append_all([step("s", 0)])
        await s.store.aclose()
        await expect_closed("append(<a step>)", lambda: s.store.append(step("s", 1)))
        await expect_closed("last_n('s', 1)", lambda: s.store.last_n("s", 1))
        if hasattr(s.store, "all"):
            await expect_closed("all('s')", lambda: s.store.all("s"))
        if hasattr(s.store, "delete_session"):
            await expect_closed("delete_session('s')", lambda: s.store.delete_session("s"))
        try:
            await s.store.aclose()
        except Exception as exc:
            raise Violation(
                "closed the store with aclose(), then called aclose() again",
                "no error (aclose is idempotent)",
                f"{type(exc).__name__}: {exc}",
            ) from None
