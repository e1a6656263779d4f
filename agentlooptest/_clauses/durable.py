"""``step.durable``, ``session.durable`` (needs the harness's ``reopen``): what one handle
wrote is visible through a second handle onto the same backend, and no
per-handle cache serves it stale.

The batches and revisions have their own durability clauses,
``step.append-many.durable`` (``batches.py``) and ``session.revision.durable``
(``revisions.py``).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from agentloop import FinalizeSummary, RunStatus, RunStep, Session
from agentlooptest._clause import clause, expect
from agentlooptest._data import (
    T0,
    describe,
    expect_data,
    expect_exists,
    same_session,
    same_steps,
    step,
    steps,
)
from agentlooptest._harness import Harness, Steps, open_sessions, open_steps, reopened


@clause(
    "step.durable",
    "appended steps are visible, in order, through a second handle (reopen)",
    capability="reopen",
    why=(
        "a system of record must keep every append it acknowledged: a step visible only "
        "to the handle that wrote it is lost on restart or on another worker"
    ),
)
async def _steps_durable(h: Harness) -> None:
    async with open_steps(h) as s:
        sent = steps("d", 12)
        await s.append_all(sent)
        await s.append_all(steps("e", 2))
        async with reopened(h, s.store) as other:
            got = await other.last_n("d", 20)
            expect(
                same_steps(sent, got),
                did="appended 12 steps to 'd' with one handle, then last_n('d', 20) on reopen()",
                expected=describe(sent),
                got=describe(got),
            )
            more = step("d", 12, content="written through the second handle")
            await other.append(more)
        got = await s.last_n("d", 2)
        expect(
            same_steps([sent[-1], more], got),
            did="appended one more step through the reopened handle, then last_n('d', 2) "
            "on the first",
            expected=describe([sent[-1], more]),
            got=describe(got),
        )
        async with reopened(h, s.store) as other:
            await _stale_step_caches(s, other, more)
        await _order_after_reopen(h, s)


async def _order_after_reopen(h: Harness, s: Steps) -> None:
    """Steps whose indices and times both disagree with insertion: a second handle that
    reads them back sorted by either shows another history."""
    skewed = [
        step("z", index, created_at=T0 - timedelta(seconds=k))
        for k, index in enumerate((3, 1, 2, 0, 1))
    ]
    await s.append_all(skewed)
    async with reopened(h, s.store) as other:
        got = await other.last_n("z", 10)
        expect(
            same_steps(skewed, got),
            did="appended 'z' steps with indices 3, 1, 2, 0, 1 and created_at going back a "
            "second each, then last_n('z', 10) on reopen()",
            expected=describe(skewed) + ", in insertion order",
            got=describe(got),
            hint="a handle that loads rows ORDER BY step_index or created_at, not by insertion",
        )


STALE = "a per-process or per-handle cache that another handle's writes never invalidate"


async def _stale_step_caches(s: Steps, other: Any, more: RunStep) -> None:
    """The second handle reads first, so a cache has something to serve stale; then one writes."""
    await other.last_n("d", 2)
    extra = step("d", 13, content="appended on the first handle after the second one read")
    await s.append(extra)
    got = await other.last_n("d", 2)
    expect(
        same_steps([more, extra], got),
        did="last_n('d', 2) on the second handle, one append on the first, then last_n('d', 2) "
        "on the second again",
        expected=describe([more, extra]),
        got=describe(got),
        hint=STALE,
    )
    if hasattr(s.store, "delete_session"):
        await other.last_n("e", 5)
        await s.store.delete_session("e")
        gone = await other.last_n("e", 5)
        expect(
            gone == [],
            did="last_n('e', 5) on the second handle, delete_session('e') on the first, then "
            "last_n('e', 5) on the second again",
            expected="[]",
            got=describe(gone),
            hint=STALE,
        )


@clause(
    "session.durable",
    "data, settings and summaries are visible through a second handle (reopen)",
    capability="reopen",
    why=(
        "a system of record must keep every write it acknowledged: working memory visible "
        "only to the handle that wrote it is lost on restart or on another worker"
    ),
)
async def _sessions_durable(h: Harness) -> None:
    async with open_sessions(h) as store:
        await store.update_data("d", '{"memory": [1, 2]}')
        summary = FinalizeSummary(RunStatus.max_iterations, 1, 2, 3, 4, 5)
        await store.finalize("d", summary)
        if hasattr(store, "put"):
            await store.put(Session("p", "model-p", "prompt-p", '{"p": 1}'))
        async with reopened(h, store) as other:
            await expect_data(
                other,
                "d",
                '{"memory": [1, 2]}',
                "wrote 'd' with one handle, then get('d') on reopen()",
            )
            await expect_exists(other, "d", True, "then exists('d') on the reopened handle")
            if hasattr(other, "final"):
                got = await other.final("d")
                expect(
                    got == summary,
                    did="then final('d') on the reopened handle",
                    expected=repr(summary),
                    got=got,
                )
            if hasattr(store, "put"):
                got_p = await other.get("p")
                want = Session("p", "model-p", "prompt-p", '{"p": 1}')
                expect(
                    same_session(want, got_p),
                    did="put('p') on one handle, get('p') on the other",
                    expected=repr(want),
                    got=got_p,
                )
            await other.update_data("d", '{"memory": [3]}')
        await expect_data(
            store,
            "d",
            '{"memory": [3]}',
            "update_data('d') through the reopened handle, then get('d') on the first",
        )
        async with reopened(h, store) as other:
            await _stale_session_caches(store, other)


SPECIAL_JSON = (
    "null",
    '"just a string"',
    "[]",
    '{"big": 123456789012345678901234567890, "tiny": 1e-300, "neg": -0.5}',
    '{"deep": [[[[{"a": null, "b": [true, false]}]]]], "é": "🧪\\n\\"q\\""}',
)
"""Data a second handle must read back JSON-equal: null, scalars, huge numbers, nesting."""


async def _stale_session_caches(store: Any, other: Any) -> None:
    """Each handle reads first, so a cache has something to serve stale; then the other writes."""
    await expect_data(other, "d", '{"memory": [3]}', "get('d') on a new second handle")
    await store.update_data("d", '{"memory": [4]}')
    await expect_data(
        other,
        "d",
        '{"memory": [4]}',
        "get('d') on the second handle, update_data('d') on the first, then get('d') on the "
        "second again",
        hint=STALE,
    )
    for k, doc in enumerate(SPECIAL_JSON):
        await other.get(f"j{k}")  # cache the absence
        await store.update_data(f"j{k}", doc)
        await expect_data(
            other, f"j{k}", doc, f"update_data('j{k}', {doc!r}) on one handle, get on the other"
        )
    if hasattr(store, "list_sessions"):
        listed = [i.id for i in await other.list_sessions(limit=1000)]
        want = {"d", *(f"j{k}" for k in range(len(SPECIAL_JSON)))}
        expect(
            want <= set(listed),
            did="wrote sessions on one handle, then list_sessions() on the other",
            expected=f"every one of {sorted(want)} listed",
            got=listed,
            hint=STALE,
        )
    if hasattr(store, "delete_session"):
        await expect_exists(other, "d", True, "exists('d') on the second handle")
        await store.delete_session("d")
        await expect_exists(
            other,
            "d",
            False,
            "exists('d') on the second handle, delete_session('d') on the first, then "
            "exists('d') on the second again",
            hint=STALE,
        )
        await expect_data(other, "d", None, "then get('d') on the second handle", hint=STALE)
