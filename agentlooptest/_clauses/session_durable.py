"""``session.durable``: data, settings and summaries survive into a second handle (``reopen``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentloop import FinalizeSummary, RunStatus, Session
from agentlooptest._clause import clause, expect
from agentlooptest._clauses._shared import expect_data, expect_exists, same_session
from agentlooptest._stores import open_sessions, reopened

if TYPE_CHECKING:
    from agentlooptest._harness import Harness


@clause(
    "session.durable",
    "data, settings and summaries are visible through a second handle (reopen)",
    capability="reopen",
    why=(
        "a system of record must keep every write it acknowledged: working memory visible "
        "only to the handle that wrote it is lost on restart or on another worker"
    ),
)
async def _durable(h: Harness) -> None:
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
            await _stale_caches(store, other)


SPECIAL_JSON = (
    "null",
    '"just a string"',
    "[]",
    '{"big": 123456789012345678901234567890, "tiny": 1e-300, "neg": -0.5}',
    '{"deep": [[[[{"a": null, "b": [true, false]}]]]], "é": "🧪\\n\\"q\\""}',
)
"""Data a second handle must read back JSON-equal: null, scalars, huge numbers, nesting."""

STALE = "a per-process or per-handle cache that another handle's writes never invalidate"


async def _stale_caches(store: Any, other: Any) -> None:
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
