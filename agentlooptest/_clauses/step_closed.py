"""``step.closed``: a closed step store refuses every call with ``StoreClosedError``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentlooptest._clause import Violation, clause, expect_closed
from agentlooptest._data import step
from agentlooptest._stores import open_steps

if TYPE_CHECKING:
    from agentlooptest._harness import Harness


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
