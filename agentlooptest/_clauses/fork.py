"""``session.fork.*`` (capability ``fork_session``): a fork copies settings, data, labels and
the first steps in one atomic step, shares nothing with its source, and refuses clearly."""

from __future__ import annotations

from functools import partial
from typing import Any

from agentloop import (
    RunStep,
    Session,
    SessionExistsError,
    StoreError,
    SupportsFinal,
    SupportsLabels,
    SupportsLease,
    SupportsPaging,
    SupportsPut,
    SupportsRevisions,
)
from agentlooptest._cancel import Points, cancel_at, still_usable
from agentlooptest._clause import Violation, clause, expect
from agentlooptest._clauses.paging import has, labels_of
from agentlooptest._data import (
    DONE,
    describe,
    expect_data,
    expect_exists,
    mismatch,
    same_session,
    same_steps,
    steps,
)
from agentlooptest._harness import Harness, Steps, open_sessions

FORKS = (
    "a fork retries a conversation from a point or branches an eval: a fork that drags "
    "the source's run summary along, shares its steps or half-happens corrupts both"
)

SOURCE = Session("src", "model-f", "prompt-f", '{"memory": [1, 2]}')
LABELS = {"team": "a", "eval": "e1"}


async def _seed(h: Harness, store: Any, count: int = 6) -> list[RunStep]:
    if has(store, SupportsPut):
        await store.put(SOURCE)
    else:
        await store.update_data(SOURCE.id, SOURCE.data)
    if has(store, SupportsLabels):
        await store.set_labels(SOURCE.id, LABELS)
    sent = steps(SOURCE.id, count)
    await Steps(h, store).append_all(sent)
    await store.finalize(SOURCE.id, DONE)
    return sent


def _as(sent: list[RunStep], sid: str) -> list[RunStep]:
    return [RunStep(**{**_fields(x), "session_id": sid}) for x in sent]


def _fields(x: RunStep) -> dict[str, Any]:
    names = ("step_index", "step_type", "content", "tool_args", "duration_ms", "prompt_tokens")
    return {n: getattr(x, n) for n in (*names, "completion_tokens", "created_at")}


async def _expect_steps(store: Any, sid: str, want: list[RunStep], did: str, **kw: Any) -> None:
    got = await store.last_n(sid, 1000)
    expect(same_steps(want, got), did=did, expected=describe(want), got=mismatch(want, got), **kw)


async def _expect_copy(store: Any, new: str, sent: list[RunStep], did: str) -> None:
    want = Session(new, SOURCE.model, SOURCE.system_prompt, SOURCE.data)
    got = await store.get(new)
    expect(same_session(want, got), did=did + f", then get({new!r})", expected=repr(want), got=got)
    await _expect_steps(store, new, _as(sent, new), did + f", then last_n({new!r})")
    if has(store, SupportsLabels):
        labels = await labels_of(store, new)
        if labels is not None:
            expect(
                labels == LABELS, did=did + ", then its labels", expected=repr(LABELS), got=labels
            )
    if has(store, SupportsFinal):
        final = await store.final(new)
        expect(
            final is None,
            did=did + f", then final({new!r})",
            expected="None: no run summaries",
            got=final,
        )
    if has(store, SupportsPaging):
        info = await store.session_info(new)
        expect(
            info is not None and info.status is None and info.step_count == 0,
            did=did + f", then session_info({new!r})",
            expected="no status and a run total of 0",
            got=info,
        )


@clause(
    "session.fork.copies",
    "fork_session copies model, prompt, data, labels and the first keep_first steps (all "
    "when None) with every field; no run summary, a fresh revision, no lease; source kept",
    capability="fork_session",
    why=FORKS,
    hint="the fork copying the session row whole, summary and totals included",
)
async def _copies(h: Harness) -> None:
    async with open_sessions(h) as store:
        sent = await _seed(h, store)
        await store.fork_session("src", "all")
        await _expect_copy(
            store, "all", sent, "seeded 'src' (6 steps, finalized), fork_session('src', 'all')"
        )
        for keep in (0, 2, 100):
            new = f"first-{keep}"
            await store.fork_session("src", new, keep_first=keep)
            await _expect_copy(
                store, new, sent[:keep], f"fork_session('src', {new!r}, keep_first={keep})"
            )
        await expect_data(store, "src", SOURCE.data, "forked 'src' four times, then get('src')")
        await _expect_steps(store, "src", sent, "forked 'src' four times, then last_n('src')")
        if has(store, SupportsFinal):
            final = await store.final("src")
            expect(
                final == DONE, did="forked 'src', then final('src')", expected=repr(DONE), got=final
            )
        if has(store, SupportsRevisions) and hasattr(store, "delete_session"):
            await store.update_data("reused", "{}")
            await store.delete_session("reused")
            kept = await store.revision("reused")
            await store.fork_session("src", "reused")
            rev = await store.revision("reused")
            did = "wrote and deleted 'reused', then fork_session('src', 'reused'), then revision"
            expect(rev > kept, did=did, expected=f"a revision above {kept}", got=rev)
        if has(store, SupportsLease):
            lease = await store.acquire_lease("all", "someone", 5.0)
            expect(
                lease is not None,
                did="then acquire_lease('all')",
                expected="a lease: a fork holds none",
                got=lease,
            )


@clause(
    "session.fork.isolation",
    "after a fork, appends and writes to either session leave the other unchanged",
    capability="fork_session",
    why=FORKS,
    hint="the fork sharing the source's step list or row object (a shallow copy)",
)
async def _isolation(h: Harness) -> None:
    async with open_sessions(h) as store:
        sent = await _seed(h, store, 3)
        await store.fork_session("src", "copy")
        s = Steps(h, store)
        extra = steps("copy", 2, start=3)
        await s.append_all(extra)
        await store.update_data("copy", '{"fork": true}')
        if has(store, SupportsLabels):
            await store.set_labels("copy", {"team": "fork"})
        did = "forked 'src' into 'copy', then appended to, wrote and relabelled 'copy'"
        await _expect_steps(store, "src", sent, did + ", then last_n('src')")
        await expect_data(store, "src", SOURCE.data, did + ", then get('src')")
        labels = await labels_of(store, "src") if has(store, SupportsLabels) else None
        expect(
            labels in (None, LABELS),
            did=did + ", then the labels of 'src'",
            expected=repr(LABELS),
            got=labels,
        )
        more = steps("src", 1, start=3)
        await s.append_all(more)
        want = _as(sent, "copy") + extra
        await _expect_steps(store, "copy", want, "then appended to 'src' and read 'copy'")


async def _refused(did: str, call: Any, *errors: type[Exception]) -> None:
    try:
        await call()
    except errors:
        return
    except Exception as exc:
        raise Violation(
            did, " or ".join(e.__name__ for e in errors), f"{type(exc).__name__}: {exc}"
        ) from None
    raise Violation(did, " or ".join(e.__name__ for e in errors) + ", nothing changed", "no error")


@clause(
    "session.fork.refused",
    "fork_session into an existing session (a row, or steps) is SessionExistsError, from an "
    "unknown source a LookupError, onto itself a ValueError; nothing changes",
    capability="fork_session",
    why=FORKS,
    hint="INSERT OR REPLACE (an upsert) for the new session",
)
async def _refused_clause(h: Harness) -> None:
    async with open_sessions(h) as store:
        sent = await _seed(h, store, 3)
        await store.update_data("taken", '{"mine": 1}')
        s = Steps(h, store)
        mine = steps("steps-only", 2)
        await s.append_all(mine)
        for new in ("taken", "steps-only"):
            did = f"fork_session('src', {new!r}) onto an existing session"
            await _refused(did, partial(store.fork_session, "src", new), SessionExistsError)
            expect(
                issubclass(SessionExistsError, StoreError),
                did=did,
                expected="a StoreError",
                got=SessionExistsError.__mro__,
            )
        await expect_data(store, "taken", '{"mine": 1}', "then get('taken')")
        await _expect_steps(store, "taken", [], "then last_n('taken')")
        await _expect_steps(store, "steps-only", mine, "then last_n('steps-only')")
        did = "fork_session('nobody', 'n') from a session never written"
        await _refused(did, partial(store.fork_session, "nobody", "n"), LookupError)
        await expect_exists(store, "n", False, did + ", then exists('n')")
        await _expect_steps(store, "n", [], did + ", then last_n('n')")
        await _refused(
            "fork_session('src', 'src')", partial(store.fork_session, "src", "src"), ValueError
        )
        bad = partial(store.fork_session, "src", "k", keep_first=-1)
        await _refused("fork_session('src', 'k', keep_first=-1)", bad, ValueError)
        await expect_exists(store, "k", False, "then exists('k')")
        await _expect_steps(store, "src", sent, "refused forks, then last_n('src')")


@clause(
    "session.fork.atomic",
    "fork_session cancelled at each checkpoint leaves the whole fork or nothing: no row "
    "without its steps, no steps without the row",
    capability="fork_session",
    why=FORKS,
    hint="the row and the steps copied in separate round trips, outside one transaction",
)
async def _atomic(h: Harness) -> None:
    async with open_sessions(h) as store:
        sent = await _seed(h, store, 12)
        points = Points()
        for point in points:
            new = f"fork-{point}"
            done = await cancel_at(partial(store.fork_session, "src", new), point)
            points.finished(done)
            there = await still_usable(f"exists({new!r})", partial(store.exists, new))
            got = await still_usable(f"last_n({new!r})", partial(store.last_n, new, 100))
            whole = there is True and same_steps(_as(sent, new), got)
            none = there is False and got == []
            did = f"fork_session('src', {new!r}) of 12 steps cancelled after {point} checkpoint(s)"
            expect(
                whole if done else whole or none,
                did=did + (" (the call returned)" if done else ""),
                expected="the whole fork" + ("" if done else ", or no trace of it"),
                got=f"exists {there!r}, {describe(got)}",
            )
