"""``step.closed``, ``session.closed`` (capability ``aclose``): a closed store refuses every
call with ``StoreClosedError``, and ``aclose`` is idempotent; an ``aclose``
cancelled halfway leaves the store open or closed, never half closed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial

from agentloop import Session, StepStore, StoreClosedError
from agentlooptest._cancel import cancel_either, each_way
from agentlooptest._clause import Violation, clause, expect, expect_closed
from agentlooptest._data import DONE, seed_session, step
from agentlooptest._harness import Harness, Steps, open_sessions, open_steps


@clause(
    "step.closed",
    "after aclose, every call raises StoreClosedError; aclose is idempotent",
    capability="aclose",
    why=(
        "a closed store that keeps answering (or fails with some other error) hides "
        "shutdown-ordering bugs: writes after close are silently lost"
    ),
)
async def _step_closed(h: Harness) -> None:
    async with open_steps(h) as s:
        await s.append_all([step("s", 0)])
        await s.store.aclose()
        await expect_closed("append(<a step>)", lambda: s.store.append(step("s", 1)))
        await expect_closed("last_n('s', 1)", lambda: s.store.last_n("s", 1))
        if hasattr(s.store, "all"):
            await expect_closed("all('s')", lambda: s.store.all("s"))
        if hasattr(s.store, "delete_session"):
            await expect_closed("delete_session('s')", lambda: s.store.delete_session("s"))
        if hasattr(s.store, "append_many"):
            await expect_closed(
                "append_many([<a step>])", lambda: s.store.append_many([step("s", 1)])
            )
        try:
            await s.store.aclose()
        except Exception as exc:
            raise Violation(
                "closed the store with aclose(), then called aclose() again",
                "no error (aclose is idempotent)",
                f"{type(exc).__name__}: {exc}",
            ) from None


@clause(
    "session.closed",
    "after aclose, every call raises StoreClosedError; aclose is idempotent",
    capability="aclose",
    why=(
        "a closed store that keeps answering (or fails with some other error) hides "
        "shutdown-ordering bugs: writes after close are silently lost"
    ),
)
async def _session_closed(h: Harness) -> None:
    async with open_sessions(h) as store:
        await seed_session(store, "s")
        leased = hasattr(store, "acquire_lease")
        lease = await store.acquire_lease("s", "closing-owner", 30.0) if leased else None
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
            ("get_many", "get_many(['s'])", lambda: store.get_many(["s"])),
            ("revision", "revision('s')", lambda: store.revision("s")),
            (
                "update_data_if",
                "update_data_if('s', '{}', 1)",
                lambda: store.update_data_if("s", "{}", 1),
            ),
            (
                "acquire_lease",
                "acquire_lease('t', ...)",
                lambda: store.acquire_lease("t", "o", 30.0),
            ),
            ("renew_lease", "renew_lease(<its lease>, 30)", lambda: store.renew_lease(lease, 30.0)),
            ("release_lease", "release_lease(<its lease>)", lambda: store.release_lease(lease)),
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


@clause(
    "session.closed.cancel",
    "aclose cancelled at each checkpoint (and, under asyncio, by Task.cancel()) leaves the "
    "store open or closed, never half closed",
    capability="aclose",
    why=(
        "a shutdown cancelled halfway (a second Ctrl-C, a deadline) must leave a store that "
        "either still works or refuses every call: one that refuses writes but answers reads "
        "loses the writes a retry makes"
    ),
    hint="aclose closing its parts one after another with a checkpoint between them",
)
async def _session_closed_cancel(h: Harness) -> None:
    for points, point, native in each_way():
        async with open_sessions(h) as store:
            await seed_session(store, "s")
            if isinstance(store, StepStore):
                await Steps(h, store).ensure("s")  # a session row first, where steps need one
            done = await cancel_either(store.aclose, point, native, "aclose()")
            points.finished(done)
            calls = [("get('s')", partial(store.get, "s"))]
            calls += [("update_data('s', '{}')", partial(store.update_data, "s", "{}"))]
            if isinstance(store, StepStore):
                calls += [("append(<a step>)", partial(store.append, step("s", 7)))]
            outcomes = [(what, await _closed_or_not(call)) for what, call in calls]
            kinds = {closed for _, closed in outcomes}
            how = (
                f"by Task.cancel() at suspension #{point + 1}"
                if native
                else f"after {point} checkpoint(s)"
            )
            did = f"aclose() cancelled {how}, then " + ", ".join(what for what, _ in outcomes)
            expect(
                kinds == {True} if done else len(kinds) == 1,
                did=did + (" (aclose returned)" if done else ""),
                expected="every call refused with StoreClosedError"
                if done
                else "every call to work (still open) or every one refused (closed)",
                got=", ".join(
                    f"{what}: {'StoreClosedError' if closed else 'worked'}"
                    for what, closed in outcomes
                ),
            )


async def _closed_or_not(call: Callable[[], Awaitable[object]]) -> bool:
    """Whether ``call`` raised ``StoreClosedError`` (any other error propagates)."""
    try:
        await call()
    except StoreClosedError:
        return True
    return False
