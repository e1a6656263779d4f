"""``session.fresh-store``: each ``new_session_store()`` call gives an empty store."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentlooptest._clause import clause
from agentlooptest._clauses._shared import SENTINEL, expect_data, expect_exists
from agentlooptest._stores import open_sessions

if TYPE_CHECKING:
    from agentlooptest._harness import Harness


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
