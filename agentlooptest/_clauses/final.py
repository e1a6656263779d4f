"""``session.final.*`` (capability ``final``): the optional ``final`` returns the latest
summary."""

from __future__ import annotations

from agentloop import FinalizeSummary, RunStatus
from agentlooptest._clause import clause, expect
from agentlooptest._data import INT32_MAX, INT64_MAX, expect_data, expect_exists
from agentlooptest._harness import Harness, open_sessions


@clause(
    "session.final.latest",
    "final returns the latest finalize field by field; None before any (creating nothing)",
    capability="final",
    why=(
        "final is how apps and evals read how the last run ended; a stale or clipped "
        "summary misreports status, tokens and cost"
    ),
)
async def _final(h: Harness) -> None:
    async with open_sessions(h) as store:
        got = await store.final("never")
        expect(got is None, did="final('never') on an unknown session", expected="None", got=got)
        await expect_exists(store, "never", False, "final('never'), then exists('never')")
        await store.update_data("s", '{"d": 1}')
        got = await store.final("s")
        expect(
            got is None,
            did="update_data('s', ...) without finalize, then final('s')",
            expected="None",
            got=got,
        )
        summaries = [
            FinalizeSummary(status, k, 2 * k, 3 * k, 4 * k, 5 * k)
            for k, status in enumerate(RunStatus)
        ]
        summaries.append(FinalizeSummary(RunStatus.completed, 0, 0, 0, 0, 0))
        summaries.append(
            FinalizeSummary(
                RunStatus.budget_exhausted, INT32_MAX, INT32_MAX, INT32_MAX, INT32_MAX, INT64_MAX
            )
        )
        for summary in summaries:
            await store.finalize("s", summary)
            got = await store.final("s")
            expect(
                got == summary,
                did=f"finalize('s', {summary!r}), then final('s')",
                expected=repr(summary),
                got=got,
            )
        await expect_data(store, "s", '{"d": 1}', "after those finalizes, get('s')")
