"""``session.closed``: a closed session store refuses every call with ``StoreClosedError``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING

from agentloop import Session
from agentlooptest._clause import Violation, clause, expect_closed
from agentlooptest._clauses._shared import DONE, seed_session
from agentlooptest._stores import open_sessions

if TYPE_CHECKING:
    from agentlooptest._harness import Harness


@clause(
    "session.closed",
    "after aclose, every call raises StoreClosedError; aclose is idempotent",
    capability="aclose",
    why=(
        "a closed store that keeps answering (or fails with some other error) hides "
        "shutdown-ordering bugs: writes after close are silently lost"
    ),
)
async def _closed(h: Harness) -> None:
    async with open_sessions(h) as store:
        await seed_session(store, "s")
        await store.aclose()
        calls: list[tuple[str, Callable[[], Awaitable[object]]]] = [
            ("get('s')", partial(store.get, "s")),
            ("exists('s')", partial(store.exists, "s")),
            ("update_data('s', '{}')", partial(store.update_data, "s", "{}")),
            ("finalize('s', ...)", partial(store.finalize, "s", DONE)),
        ]
        optional: list[tuple[str, str, Callable[[], Awaitable[object]]]] = [
            ("put", "put(Session('s'))", lambda: store.put(Session("s"))),
            ("final", "final('s')", lambda: store.final("s")),
            ("list_sessions", "list_sessions()", lambda: store.list_sessions()),
            ("delete_session", "delete_session('s')", lambda: store.delete_session("s")),
        ]
        calls += [(what, call) for name, what, call in optional if hasattr(store, name)]
        for what, call in calls:
            await expect_closed(what, call)
        try:
            await store.aclose()
        except Exception as exc:
            raise Violation(
                "closed the store with aclose(), then called aclose() again",
                "no error (aclose is idempotent)",
                f"{type(exc).__name__}: {exc}",
            ) from None
