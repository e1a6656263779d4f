"""The base ``SessionStore`` clauses: what ``get`` returns after each kind of write.

(Concurrent and cancelled calls are in ``concurrency.py``.) By family, in run order:

- ``session.get.*``: ``get`` of an unknown id returns a fresh session and creates nothing;
- ``session.write.*``: ``update_data`` and ``finalize`` bring a session into being;
- ``session.data.*``: the data snapshot round-trips JSON-semantically; non-JSON is refused;
- ``session.finalize.*``: ``finalize`` is repeatable and keeps the data;
- ``session.isolation``: one session's data, summary and existence never leak into another;
- ``session.ids.*``: session ids are plain, case-sensitive, verbatim text;
- ``session.bad-input.*``: bad ids and argument types are refused, changing nothing;
- ``session.fresh-store``: each ``new_session_store()`` call gives an empty store.
"""

from __future__ import annotations

import json
from functools import partial
from typing import Any

from agentloop import FinalizeSummary, RunStatus, Session
from agentlooptest._clause import Violation, clause, expect, expect_refused
from agentlooptest._data import (
    CASE_IDS,
    DONE,
    JSON_DOCS,
    LONG_HINT,
    LONG_IDS,
    SENTINEL,
    SQL_IDS,
    VERBATIM_IDS,
    expect_data,
    expect_exists,
    json_equal,
    short_id,
)
from agentlooptest._harness import Harness, open_sessions


@clause(
    "session.get.unknown-returns-id",
    "get of an unknown id returns a fresh Session carrying that id",
    why=(
        "every first run calls get on an id never seen: an error fails it, and a Session "
        "with an empty or different id writes the run under the wrong session"
    ),
)
async def _get_unknown(h: Harness) -> None:
    async with open_sessions(h) as store:
        for sid in ("never-seen", "Ünïcode 🧪", " spaced "):
            got = await store.get(sid)
            expect(
                got == Session(id=sid),
                did=f"get({sid!r}) on a store where it was never written",
                expected=f"Session(id={sid!r}) with model '', system_prompt '', data None",
                got=got,
            )


@clause(
    "session.get.unknown-creates-nothing",
    "get and exists of an unknown id create nothing",
    why=(
        "reads must not write: a get that creates rows makes every probe, typo and crawler "
        "a session, and exists can no longer tell new users from returning ones"
    ),
    hint="get or exists inserting a row (an upsert on read)",
)
async def _creates_nothing(h: Harness) -> None:
    async with open_sessions(h) as store:
        await store.get("probe")
        await store.get("probe")
        await expect_exists(store, "probe", False, "get('probe') twice, then exists('probe')")
        await store.exists("other")
        await expect_exists(store, "other", False, "exists('other') twice")
        await expect_data(store, "probe", None, "get('probe') after those reads")


@clause(
    "session.write.creates",
    "update_data and finalize each bring the session into being",
    why=(
        "exists is how the app tells a returning session from a new one: a write that "
        "does not make the session exist loses returning users' state"
    ),
)
async def _write_creates(h: Harness) -> None:
    async with open_sessions(h) as store:
        await store.update_data("by-data", '{"k": 1}')
        await expect_exists(store, "by-data", True, "update_data('by-data', ...), then exists")
        await store.update_data("by-none", None)
        await expect_exists(store, "by-none", True, "update_data('by-none', None), then exists")
        await store.finalize("by-final", DONE)
        await expect_exists(store, "by-final", True, "finalize('by-final', ...), then exists")
        await expect_data(store, "by-final", None, "finalize('by-final', ...), then get")


@clause(
    "session.data.latest-wins",
    "get reflects the latest update_data, JSON-semantically, for every kind of document",
    why=(
        "data is the agent's working memory carried between runs: a stale or mangled "
        "snapshot makes the next run start from the wrong memory"
    ),
)
async def _latest(h: Harness) -> None:
    async with open_sessions(h) as store:
        for doc in JSON_DOCS:
            await store.update_data("s", doc)
            await expect_data(store, "s", doc, f"update_data('s', {doc!r:.80}), then get('s')")


@clause(
    "session.data.none",
    "update_data(id, None) is accepted and get then returns data=None",
    why=(
        "clearing working memory is a normal write; a store that refuses None or keeps the "
        "old snapshot resurrects memory the agent dropped"
    ),
)
async def _none(h: Harness) -> None:
    async with open_sessions(h) as store:
        await store.update_data("s", '{"old": true}')
        await store.update_data("s", None)
        await expect_data(store, "s", None, "update_data('s', '{\"old\": true}'), then None")


@clause(
    "session.data.json-null",
    "data 'null' (JSON null) stays distinct from None (no data)",
    why=(
        "'null' is a JSON document the agent wrote; turning it into None (or None into "
        "'null') changes what the next run rehydrates"
    ),
)
async def _json_null(h: Harness) -> None:
    async with open_sessions(h) as store:
        await store.update_data("s", "null")
        got = await store.get("s")
        expect(
            got.data is not None and json_equal("null", got.data),
            did="update_data('s', 'null'), then get('s')",
            expected="data JSON-equal to 'null' (not None)",
            got=got,
        )
        await store.update_data("t", None)
        got = await store.get("t")
        expect(
            got.data is None,
            did="update_data('t', None), then get('t')",
            expected="data None (not 'null')",
            got=got,
        )


@clause(
    "session.data.large",
    "a 1 MiB data snapshot round-trips",
    why="working memory can grow large; a store that truncates it loses the agent's memory",
)
async def _large_data(h: Harness) -> None:
    async with open_sessions(h) as store:
        doc = json.dumps({"notes": [f"é中🧪 line {i}" for i in range(2**20 // 20)]})
        await store.update_data("big", doc)
        await expect_data(store, "big", doc, f"update_data('big', <{len(doc)} chars>), then get")


@clause(
    "session.data.rejects-non-json",
    "non-JSON data raises ValueError (TypeError for non-str) and leaves prior data intact",
    why=(
        "bad data must fail loudly and change nothing: a store that writes it (or clears "
        "the old snapshot first) corrupts working memory the next run depends on"
    ),
)
async def _rejects(h: Harness) -> None:
    async with open_sessions(h) as store:
        prior = '{"kept": [1, 2, 3]}'
        await store.update_data("s", prior)
        bad: list[tuple[object, type[Exception]]] = [
            ("", ValueError),
            ("{", ValueError),
            ("{'a': 1}", ValueError),
            ("NaN", ValueError),
            ('{"x": Infinity}', ValueError),
            ('{"x": 1e400}', ValueError),
            ("{} trailing", ValueError),
            ("undefined", ValueError),
            ('"\\u0000"', ValueError),
            ('"\\ud800"', ValueError),
            (b"{}", TypeError),
            ({"a": 1}, TypeError),
            (1, TypeError),
        ]
        for value, error in bad:
            for sid in ("s", "unknown"):
                try:
                    await store.update_data(sid, value)
                except error:
                    pass
                except Exception as exc:
                    raise Violation(
                        f"update_data({sid!r}, {value!r})",
                        error.__name__,
                        f"{type(exc).__name__}: {exc}",
                    ) from None
                else:
                    raise Violation(f"update_data({sid!r}, {value!r})", error.__name__, "no error")
            await expect_data(
                store, "s", prior, f"update_data('s', {value!r}) was refused, then get"
            )
        await expect_exists(
            store, "unknown", False, "refused update_data('unknown', <bad>) calls, then exists"
        )


@clause(
    "session.finalize.repeatable",
    "finalize can be called again and again on one session (once per run)",
    why=(
        "every run finalizes; a store that allows one finalize per session (a unique "
        "summary row) fails the second run of every session"
    ),
)
async def _twice(h: Harness) -> None:
    async with open_sessions(h) as store:
        for status in (
            RunStatus.completed,
            RunStatus.error,
            RunStatus.cancelled,
            RunStatus.completed,
        ):
            await store.finalize("s", FinalizeSummary(status, step_count=2))
        await expect_exists(store, "s", True, "finalize('s', ...) four times, then exists")


@clause(
    "session.finalize.keeps-data",
    "finalize never discards the data snapshot",
    why=(
        "finalize ends every run: a store that resets the session row there wipes the "
        "agent's working memory after each run"
    ),
    hint="finalize writing the whole row, data column included",
)
async def _keeps(h: Harness) -> None:
    async with open_sessions(h) as store:
        doc = '{"memory": ["a", "b"], "n": 2}'
        await store.update_data("s", doc)
        await store.finalize("s", DONE)
        await store.finalize("s", FinalizeSummary(RunStatus.error))
        await expect_data(store, "s", doc, "update_data('s', <doc>), finalize twice, then get")
        await store.update_data("t", None)
        await store.finalize("t", DONE)
        await expect_data(store, "t", None, "update_data('t', None), finalize, then get")


@clause(
    "session.isolation",
    "data, summaries and existence of one session never leak into another, prefixes included",
    why="sessions are separate users: a leak hands one user's working memory to another",
)
async def _isolation(h: Harness) -> None:
    async with open_sessions(h) as store:
        ids = ("a", "ab", "a/b", "A", "a.", "conversation-1", "conversation-2")
        for k, sid in enumerate(ids):
            await store.update_data(sid, json.dumps({"owner": sid, "k": k}))
        await store.finalize("a", DONE)
        for k, sid in enumerate(ids):
            want = json.dumps({"owner": sid, "k": k})
            await expect_data(
                store, sid, want, f"wrote distinct data to {list(ids)}, then get({sid!r})"
            )
        await expect_exists(
            store, "b", False, "wrote to 'a', 'ab', ... but not 'b', then exists('b')"
        )
        if hasattr(store, "final"):
            for sid in ids:
                final = await store.final(sid)
                want_final = DONE if sid == "a" else None
                expect(
                    final == want_final,
                    did=f"finalized only 'a' among {list(ids)}, then final({sid!r})",
                    expected=repr(want_final),
                    got=final,
                )
        for k, sid in enumerate(LONG_IDS):
            await store.update_data(sid, json.dumps({"long": k}))
        for k, sid in enumerate(LONG_IDS):
            await expect_data(
                store,
                sid,
                json.dumps({"long": k}),
                f"wrote distinct data to {len(LONG_IDS)} sessions with ids of 301 to 1,024 bytes "
                f"differing only at the end, then get({short_id(sid)})",
                hint=LONG_HINT,
            )


async def _ids(h: Harness, ids: tuple[str, ...], what: str) -> None:
    async with open_sessions(h) as store:
        for k, sid in enumerate(ids):
            await store.update_data(sid, f'{{"k": {k}}}')
        for k, sid in enumerate(ids):
            await expect_data(
                store,
                sid,
                f'{{"k": {k}}}',
                f"update_data on {len(ids)} sessions whose ids {what}, then get({sid!r})",
            )
            await expect_exists(store, sid, True, f"then exists({sid!r})")


@clause(
    "session.ids.sql-text",
    "ids that look like SQL, LIKE wildcards or escapes are plain, distinct ids",
    why=(
        "session ids come from users and apps: a store that splices them into SQL or "
        "patterns mixes sessions or can be attacked through them"
    ),
    hint="an id spliced into SQL text or matched with LIKE",
)
async def _sql_ids(h: Harness) -> None:
    await _ids(h, (*SQL_IDS, "100x", "aXb", "a%b"), "look like SQL or patterns")


@clause(
    "session.ids.case-sensitive",
    "ids that differ only in case are different sessions",
    why="ids are opaque and case-sensitive: case-folding merges two users' working memory",
    hint="a case-insensitive collation (COLLATE NOCASE, MySQL's default)",
)
async def _case_ids(h: Harness) -> None:
    await _ids(h, CASE_IDS, "differ only in case")


@clause(
    "session.ids.verbatim",
    "ids with spaces, newlines, other scripts and normalization forms are kept verbatim",
    why="ids are opaque: trimming or normalizing them merges sessions or loses one",
)
async def _verbatim_ids(h: Harness) -> None:
    await _ids(h, VERBATIM_IDS, "hold spaces, newlines, other scripts or forms")


@clause(
    "session.bad-input.refused",
    "empty ids, ids with NUL and wrong argument types are refused; nothing changes",
    why=(
        "bad input must fail loudly and change nothing: a store that keeps a session under "
        "an empty id, or half-applies a bad call, corrupts the state later runs read"
    ),
)
async def _bad_input(h: Harness) -> None:
    async with open_sessions(h) as store:
        prior = '{"kept": true}'
        await store.update_data("s", prior)
        await store.finalize("s", DONE)
        calls: list[tuple[str, Any, tuple[type[Exception], ...]]] = []
        for sid, error in (("", ValueError), ("a\x00b", ValueError), (None, TypeError)):
            calls += [
                (f"get({sid!r})", partial(store.get, sid), (error,)),
                (f"exists({sid!r})", partial(store.exists, sid), (error,)),
                (f"update_data({sid!r}, '{{}}')", partial(store.update_data, sid, "{}"), (error,)),
                (f"finalize({sid!r}, <summary>)", partial(store.finalize, sid, DONE), (error,)),
            ]
        for summary in (None, "completed", {"status": "completed"}):
            calls.append(
                (f"finalize('s', {summary!r})", partial(store.finalize, "s", summary), (TypeError,))
            )
        if hasattr(store, "put"):
            for session in (None, "s", {"id": "s"}):
                calls.append((f"put({session!r})", partial(store.put, session), (TypeError,)))
        for did, call, errors in calls:
            await expect_refused(f"called {did}", call, *errors)
        await expect_data(store, "s", prior, "after the refused calls, get('s')")
        if hasattr(store, "final"):
            final = await store.final("s")
            expect(
                final == DONE,
                did="after the refused calls, final('s')",
                expected=repr(DONE),
                got=final,
            )


@clause(
    "session.fresh-store",
    "each new_session_store() call gives an empty store, not one sharing another's state",
    why=(
        "eval suites count on fresh stores starting empty; state shared between "
        "instances leaks one suite's (or tenant's) working memory into another"
    ),
)
async def _fresh(h: Harness) -> None:
    async with open_sessions(h) as first:
        await expect_exists(first, SENTINEL, False, "opened a store, then exists(<sentinel>)")
        await first.update_data(SENTINEL, '{"sentinel": true}')
        async with open_sessions(h) as second:
            await expect_exists(
                second,
                SENTINEL,
                False,
                "wrote the sentinel session in one store, opened a second with "
                "new_session_store(), then exists(<sentinel>) on it",
            )
            await expect_data(second, SENTINEL, None, "then get(<sentinel>) on the second store")
