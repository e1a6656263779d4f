"""``session.data.*``: the data snapshot round-trips JSON-semantically, and non-JSON is refused."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from agentlooptest._clause import Violation, clause, expect
from agentlooptest._clauses._shared import expect_data, expect_exists
from agentlooptest._data import JSON_DOCS, json_equal
from agentlooptest._stores import open_sessions

if TYPE_CHECKING:
    from agentlooptest._harness import Harness


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
