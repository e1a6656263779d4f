"""Step clauses on ids, arguments and returned lists: opaque ids, n checks, isolation, aliasing."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from agentlooptest._clause import Violation, clause, expect, expect_refused
from agentlooptest._data import (
    CASE_IDS,
    SQL_IDS,
    VERBATIM_IDS,
    describe,
    same_steps,
    step,
    steps,
)
from agentlooptest._stores import open_steps

if TYPE_CHECKING:
    from agentlooptest._harness import Harness


async def _ids_round_trip(h: Harness, ids: tuple[str, ...], what: str) -> None:
    async with open_steps(h) as s:
        for k, sid in enumerate(ids):
            await s.append(step(sid, k, content=f"for {sid!r}"))
        for k, sid in enumerate(ids):
            got = await s.last_n(sid, 5)
            want = [step(sid, k, content=f"for {sid!r}")]
            expect(
                same_steps(want, got),
                did=f"appended one step to each of {len(ids)} sessions whose ids {what}, "
                f"then last_n({sid!r}, 5)",
                expected=f"exactly that session's step: {describe(want)}",
                got=describe(got),
            )


@clause(
    "step.ids.sql-text",
    "ids that look like SQL, LIKE wildcards or escapes are plain, distinct ids",
    why=(
        "session ids come from users and apps: a store that splices them into SQL or "
        "patterns mixes sessions or can be attacked through them"
    ),
)
async def _sql_ids(h: Harness) -> None:
    await _ids_round_trip(h, (*SQL_IDS, "100x", "aXb", "a%b"), "look like SQL or patterns")


@clause(
    "step.ids.case-sensitive",
    "ids that differ only in case are different sessions",
    why=(
        "ids are opaque and case-sensitive: a store that case-folds them (a NOCASE "
        "collation, lower()) merges two users' conversations"
    ),
)
async def _case_ids(h: Harness) -> None:
    await _ids_round_trip(h, CASE_IDS, "differ only in case")


@clause(
    "step.ids.verbatim",
    "ids with spaces, newlines, other scripts and normalization forms are kept verbatim",
    why=(
        "ids are opaque: a store that trims or normalizes them merges distinct sessions "
        "or loses a session's history"
    ),
)
async def _verbatim_ids(h: Harness) -> None:
    await _ids_round_trip(h, VERBATIM_IDS, "hold spaces, newlines, other scripts or forms")


@clause(
    "step.n.validation",
    "n must be an int >= 1: ValueError for 0 or less, TypeError for bool and non-ints",
    why=(
        "a window of 0 or -1 is a caller bug; a store that answers it with all or no "
        "history (steps[-0:] is the whole list) hides the bug and floods or empties the context"
    ),
)
async def _n_validation(h: Harness) -> None:
    async with open_steps(h) as s:
        await s.append_all(steps("s", 3))
        bad: list[tuple[object, type[Exception]]] = [
            (0, ValueError),
            (-1, ValueError),
            (-(2**40), ValueError),
            (True, TypeError),
            (False, TypeError),
            (1.0, TypeError),
            ("3", TypeError),
            (None, TypeError),
        ]
        for n, error in bad:
            try:
                got = await s.store.last_n("s", n)
            except error:
                continue
            except Exception as exc:
                raise Violation(
                    f"called last_n('s', {n!r}) on a session with 3 steps",
                    f"{error.__name__}",
                    f"{type(exc).__name__}: {exc}",
                ) from None
            raise Violation(
                f"called last_n('s', {n!r}) on a session with 3 steps",
                f"{error.__name__}",
                f"no error; it returned {describe(got)}",
            )
        got = await s.last_n("s", 3)
        expect(
            len(got) == 3,
            did="after the refused calls, last_n('s', 3)",
            expected="the 3 steps, untouched",
            got=describe(got),
        )


@clause(
    "step.unknown-session-empty",
    "last_n of an unknown session returns [] (not an error, not None)",
    why=(
        "every new conversation starts with last_n of an id never seen: an error or None "
        "there fails the first run of every session"
    ),
)
async def _unknown(h: Harness) -> None:
    async with open_steps(h) as s:
        await s.append_all(steps("known", 2))
        for sid in ("never-seen", "know", "known ", "KNOWN"):
            got = await s.last_n(sid, 10)
            expect(
                got == [] and isinstance(got, list),
                did=f"appended to session 'known' only, then last_n({sid!r}, 10)",
                expected="[] (an empty list)",
                got=got,
            )


@clause(
    "step.isolation",
    "steps of one session never appear in another's, prefixes included",
    why=(
        "sessions are separate users and conversations: a leak feeds one user's history "
        "into another's model context"
    ),
)
async def _isolation(h: Harness) -> None:
    async with open_steps(h) as s:
        ids = ("a", "ab", "a/b", "b", "a.", "conversation-1", "conversation-2")
        sent = {sid: steps(sid, 3, start=10 * k) for k, sid in enumerate(ids)}
        for k in range(3):
            for sid in ids:
                await s.append(sent[sid][k])
        for sid in ids:
            got = await s.last_n(sid, 10)
            expect(
                same_steps(sent[sid], got),
                did=f"appended 3 steps to each of sessions {list(ids)}, then last_n({sid!r}, 10)",
                expected=f"only that session's steps: {describe(sent[sid])}",
                got=describe(got),
            )


@clause(
    "step.no-alias",
    "mutating a list last_n returned never changes the store",
    why=(
        "the loop edits the history it gets back (rehydrating, trimming); if that list is "
        "the store's own, the edit silently rewrites the stored trace"
    ),
)
async def _no_alias(h: Harness) -> None:
    async with open_steps(h) as s:
        sent = steps("s", 4)
        await s.append_all(sent)
        first = await s.last_n("s", 4)
        first.reverse()
        first.append(step("s", 99))
        first.pop(0)
        everything = await s.last_n("s", 10)
        everything.clear()
        got = await s.last_n("s", 10)
        expect(
            same_steps(sent, got),
            did="reversed, appended to, popped from and cleared lists returned by last_n, "
            "then called last_n again",
            expected=describe(sent),
            got=describe(got),
        )
        # Unknown sessions too: a shared empty list handed to every caller is store state.
        empty = await s.last_n("unknown-1", 10)
        empty.append(step("unknown-1", 0))
        for sid in ("unknown-1", "unknown-2"):
            got = await s.last_n(sid, 10)
            expect(
                got == [],
                did="appended to the list last_n('unknown-1', 10) returned, "
                f"then last_n({sid!r}, 10)",
                expected="[] (the session has no steps)",
                got=describe(got),
            )


@clause(
    "step.bad-input.refused",
    "a non-RunStep, an empty id or an id with NUL is refused with TypeError/ValueError",
    why=(
        "bad input must fail loudly and leave the trace as it was: a store that stores "
        "garbage or half of it corrupts the history every later run replays"
    ),
)
async def _bad_input(h: Harness) -> None:
    async with open_steps(h) as s:
        sent = steps("s", 2)
        await s.append_all(sent)
        good = step("s", 5)
        bad_steps: list[object] = [
            None,
            "not a step",
            {f: getattr(good, f) for f in ("session_id", "step_index", "step_type")},
            (good,),
        ]
        for bad in bad_steps:
            await expect_refused(
                f"called append({bad!r:.60})", partial(s.store.append, bad), TypeError, ValueError
            )
        bad_ids: list[tuple[object, type[Exception]]] = [
            ("", ValueError),
            ("a\x00b", ValueError),
            (None, TypeError),
            (b"s", TypeError),
        ]
        for sid, error in bad_ids:
            await expect_refused(
                f"called last_n({sid!r}, 1)", partial(s.store.last_n, sid, 1), error
            )
            if hasattr(s.store, "all"):
                await expect_refused(f"called all({sid!r})", partial(s.store.all, sid), error)
        got = await s.last_n("s", 10)
        expect(
            same_steps(sent, got),
            did="after the refused calls, last_n('s', 10)",
            expected=describe(sent),
            got=describe(got),
        )
