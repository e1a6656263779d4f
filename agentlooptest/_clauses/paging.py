"""``session.paging.*`` (capability ``page_sessions``): ``page_sessions`` returns every session
exactly once, in order, however the store is written meanwhile; cursors are the store's own.

Also the helpers the other lifecycle modules read sessions with (:func:`page_all`,
:func:`info_of`, :func:`labels_of`).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import anyio

from agentloop import SessionInfo, SessionPage, SupportsListSessions, SupportsPaging
from agentlooptest._clause import Violation, clause, expect
from agentlooptest._data import expect_exists
from agentlooptest._harness import Harness, open_sessions, reopened

LISTING = (
    "an admin screen, an export or a retention job pages through every session; a page "
    "that repeats or skips one shows a session twice, exports it twice or never expires it"
)

PAGE_ROUNDS = 64
"""Pages a clause reads before it calls the paging endless (a cursor that never ends)."""


async def page_all(
    store: Any,
    *,
    limit: int,
    did: str,
    between: Callable[[int], Awaitable[None]] | None = None,
    **query: Any,
) -> list[SessionInfo]:
    """Every session ``page_sessions`` returns, page after page (``between(k)`` after page k)."""
    got: list[SessionInfo] = []
    cursor: str | None = None
    for k in range(PAGE_ROUNDS):
        page = await store.page_sessions(limit=limit, cursor=cursor, **query)
        expect(
            isinstance(page, SessionPage) and len(page.sessions) <= limit,
            did=f"{did}: page {k + 1} of page_sessions(limit={limit})",
            expected=f"a SessionPage of at most {limit} sessions",
            got=page,
        )
        got.extend(page.sessions)
        if page.cursor is None:
            return got
        expect(
            bool(page.sessions),
            did=f"{did}: page {k + 1} of page_sessions(limit={limit})",
            expected="sessions on every page but the last (a cursor after an empty page)",
            got=page,
        )
        cursor = page.cursor
        if between is not None:
            await between(k)
    raise Violation(did, f"the last page within {PAGE_ROUNDS} pages", "a cursor on every page")


def has(store: object, capability: type) -> bool:
    """Whether ``store`` has ``capability``, without narrowing its type as ``isinstance`` does."""
    return isinstance(store, capability)


def ids(infos: list[SessionInfo]) -> list[str]:
    """The ids of ``infos``, in order."""
    return [i.id for i in infos]


async def info_of(store: Any, session_id: str) -> SessionInfo | None:
    """The session's info: ``session_info`` where the store pages, else from ``list_sessions``."""
    if isinstance(store, SupportsPaging):
        return await store.session_info(session_id)
    if isinstance(store, SupportsListSessions):
        for info in await store.list_sessions(limit=10_000):
            if info.id == session_id:
                return info
    return None


async def labels_of(store: Any, session_id: str) -> dict[str, str] | None:
    """The session's labels as the store reads them back (``None``: it cannot say)."""
    if not isinstance(store, SupportsPaging | SupportsListSessions):
        return None
    info = await info_of(store, session_id)
    return dict(info.labels) if info is not None else {}


async def write_sessions(store: Any, names: list[str]) -> None:
    """One session write each, in order: the first is the oldest."""
    for name in names:
        await store.update_data(name, json.dumps({"name": name}))


@clause(
    "session.paging.exactly-once",
    "page_sessions walks list_sessions' order (newest write first), every session exactly "
    "once, while other sessions are created between the pages and meanwhile; "
    "session_info matches",
    capability="page_sessions",
    why=LISTING,
    hint="an OFFSET cursor: a session created between pages shifts every later page by one",
)
async def _exactly_once(h: Harness) -> None:
    async with open_sessions(h) as store:
        names = [f"p{k:02}" for k in range(23)]
        await write_sessions(store, names)
        want = names[::-1]
        if isinstance(store, SupportsListSessions):
            listed = [i.id for i in await store.list_sessions(limit=100)]
            expect(
                listed == want,
                did="wrote 23 sessions, then list_sessions",
                expected=repr(want),
                got=listed,
            )

        async def create_others(k: int) -> None:
            await write_sessions(store, [f"new-{k}-a", f"new-{k}-b"])

        did = "wrote p00..p22, then paged 5 at a time, creating 2 other sessions between pages"
        got = ids(await page_all(store, limit=5, did=did, between=create_others))
        mine = [i for i in got if not i.startswith("new-")]
        expect(mine == want, did=did, expected=f"p22 down to p00, each once: {want}", got=got)
        whole = ids(await page_all(store, limit=1000, did="then page_sessions(limit=1000)"))
        expect(
            len(whole) == len(set(whole)) and whole[-len(want) :] == want,
            did="then page_sessions(limit=1000): one page of everything",
            expected="every session once, the p.. ones last, newest first",
            got=whole,
        )
        await _racing(store, want)
        await _info_matches(store, "p07")


async def _racing(store: Any, want: list[str]) -> None:
    """Page while another task keeps creating sessions (at most 200)."""
    done = anyio.Event()

    async def write_others() -> None:
        for k in range(200):
            if done.is_set():
                return
            await store.update_data(f"race-{k}", "{}")

    got: list[SessionInfo] = []
    did = "paged the p.. sessions 4 at a time while another task created sessions"
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(write_others)
        try:
            got = await page_all(store, limit=4, did=did)
        finally:
            done.set()
    mine = [i for i in ids(got) if i.startswith("p")]
    expect(mine == want, did=did, expected=f"p22 down to p00, each once: {want}", got=ids(got))


async def _info_matches(store: Any, sid: str) -> None:
    listed = {i.id: i for i in await page_all(store, limit=1000, did="page_sessions")}
    info = await store.session_info(sid)
    expect(
        info == listed[sid],
        did=f"session_info({sid!r}), compared with its page_sessions row",
        expected=repr(listed[sid]),
        got=info,
    )
    unknown = await store.session_info("never-written")
    did = "session_info('never-written')"
    expect(unknown is None, did=did, expected="None", got=unknown)
    await expect_exists(store, "never-written", False, did + ", then exists('never-written')")


@clause(
    "session.paging.created-order",
    'page_sessions(order="created") walks sessions oldest first by first write, each once, '
    "while sessions already listed and not yet listed are written",
    capability="page_sessions",
    why=(
        "export and copy page by creation so that a session written while they run is still "
        "read once; an order that moves with writes skips or repeats it"
    ),
    hint='order="created" paging by updated_at (or by a row id a write replaces)',
)
async def _created_order(h: Harness) -> None:
    async with open_sessions(h) as store:
        names = [f"c{k:02}" for k in range(12)]
        await write_sessions(store, names)
        await write_sessions(store, ["c05", "c00"])  # written again: their creation stays

        async def rewrite(k: int) -> None:
            await write_sessions(store, [f"c{2 * k:02}", f"c{11 - k:02}", f"late-{k}"])

        did = "wrote c00..c11, c05 and c00 again, then paged 4 at a time by creation, "
        did += "rewriting a listed and an unlisted session between pages"
        got = ids(await page_all(store, limit=4, did=did, between=rewrite, order="created"))
        mine = [i for i in got if not i.startswith("late-")]
        late = [i for i in got if i.startswith("late-")]
        expect(
            mine == names and got[len(names) :] == late,
            did=did,
            expected=f"c00..c11 in creation order, each once, then any late ones: {names}",
            got=got,
        )


async def _refused(did: str, call: Callable[[], Awaitable[object]]) -> None:
    try:
        got = await call()
    except (ValueError, TypeError):
        return
    except Exception as exc:
        raise Violation(did, "ValueError", f"{type(exc).__name__}: {exc}") from None
    raise Violation(
        did, "ValueError: a cursor this store did not make", f"it returned {got!r:.300}"
    )


def _forged(cursor: str) -> list[str]:
    raw = json.dumps({"after": 3, "cursor": cursor[:8]}).encode()
    return ["3", "0", "not-a-cursor", base64.urlsafe_b64encode(raw).decode()]


@clause(
    "session.paging.cursors",
    "a cursor works on a second handle; a forged one, another store's, or one made for "
    "another order or label filter is a ValueError",
    capability="page_sessions",
    why=(
        "a cursor from a URL or another deployment's store, accepted as a position, pages "
        "from the wrong place silently: sessions are skipped or shown twice"
    ),
    hint="a cursor that is only a position (an offset, a row id), checked against nothing",
)
async def _cursors(h: Harness) -> None:
    async with open_sessions(h) as store:
        await write_sessions(store, [f"k{k}" for k in range(6)])
        first = await store.page_sessions(limit=2)
        cursor = first.cursor
        expect(
            isinstance(cursor, str),
            did="wrote 6 sessions, then page_sessions(limit=2)",
            expected="a str cursor",
            got=first,
        )
        assert isinstance(cursor, str)
        if h.reopen is not None:
            async with reopened(h, store) as other:
                page = await other.page_sessions(limit=2, cursor=cursor)
                expect(
                    [i.id for i in page.sessions] == ["k3", "k2"],
                    did="page 1's cursor passed to a second handle (reopen)",
                    expected="page 2: ['k3', 'k2']",
                    got=page,
                )
        for forged in _forged(cursor):
            await _refused(f"page_sessions(cursor={forged!r})", partial(_page, store, forged))
        await _other_store(h, store)
        await _refused(
            'a cursor of order="updated" passed with order="created"',
            lambda: _page(store, cursor, order="created"),
        )
        await _refused(
            "a cursor of no label filter passed with labels={'team': 'a'}",
            lambda: _page(store, cursor, labels={"team": "a"}),
        )
        await _refused("page_sessions(limit=0)", lambda: store.page_sessions(limit=0))


async def _page(store: Any, cursor: str, **query: Any) -> object:
    return await store.page_sessions(limit=2, cursor=cursor, **query)


async def _other_store(h: Harness, store: Any) -> None:
    async with open_sessions(h) as other:
        await write_sessions(other, [f"k{k}" for k in range(6)])
        foreign = (await other.page_sessions(limit=2)).cursor
    did = "a cursor another store (a second new_session_store()) made, passed to this one"
    await _refused(did, lambda: _page(store, foreign or ""))
