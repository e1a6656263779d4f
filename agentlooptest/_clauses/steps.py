"""The base ``StepStore`` clauses: what ``append`` keeps and ``last_n`` returns.

(Concurrent and cancelled calls are in ``concurrency.py``.) By family, in run order:

- ``step.order.*``: insertion order, oldest first, whatever a step's index or time says;
- ``step.window.*``: exactly the newest ``n`` steps, at every size;
- ``step.roundtrip.*``: every ``RunStep`` field survives ``append`` / ``last_n`` exactly;
- ``step.ids.*``: session ids are plain, case-sensitive, verbatim text;
- ``step.n.*``: ``last_n`` checks its ``n``;
- ``step.unknown-session-empty``: ``last_n`` of an unknown session is ``[]``;
- ``step.isolation``: one session's steps never appear in another's;
- ``step.no-alias``: what ``last_n`` returns is the caller's, not the store's;
- ``step.bad-input.*``: ``append`` refuses bad steps and ids;
- ``step.fresh-store``: each ``new_step_store()`` call gives an empty store.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from functools import partial

from agentloop import CompactionCheckpoint, RunStep, StepType, SupportsAppendMany
from agentlooptest._clause import Violation, clause, expect, expect_refused
from agentlooptest._data import (
    CASE_IDS,
    CONTROL_TEXTS,
    INT32_MAX,
    JSON_DOCS,
    LONG_HINT,
    LONG_IDS,
    OTHER_TZ,
    SENTINEL,
    SQL_IDS,
    T0,
    TEXTS,
    VERBATIM_IDS,
    describe,
    indices,
    same_steps,
    short_id,
    step,
    step_diff,
    steps,
)
from agentlooptest._harness import Harness, Steps, open_steps

REPLAY = (
    "the loop replays last_n straight into the model's context; a wrong window or order "
    "silently corrupts every multi-turn conversation"
)


@clause(
    "step.order.oldest-first",
    "last_n returns its window oldest first",
    why=(
        "the loop replays last_n straight into the model's context: newest-first history "
        "would feed the model its conversation backwards"
    ),
)
async def _oldest_first(h: Harness) -> None:
    async with open_steps(h) as s:
        sent = steps("s", 5)
        await s.append_all(sent)
        got = await s.last_n("s", 5)
        expect(
            same_steps(sent, got),
            did="appended steps 0..4 to session 's', then last_n('s', 5)",
            expected="step_index [0, 1, 2, 3, 4] (oldest first), every field as appended",
            got=indices(got),
        )


@clause(
    "step.order.insertion-not-index",
    "order is insertion order, even with repeated, decreasing and huge step indices",
    why=(
        "step_index is data, not order: a store that sorts by it reorders history whenever "
        "indices repeat or restart, and the model sees events out of sequence"
    ),
    hint="ORDER BY step_index instead of insertion order",
)
async def _not_index(h: Harness) -> None:
    async with open_steps(h) as s:
        wanted = [5, 5, 3, 2**31 - 1, 0, 7, 7, 1, 0]
        sent = [step("s", i, content=f"inserted #{k}") for k, i in enumerate(wanted)]
        await s.append_all(sent)
        got = await s.last_n("s", len(sent))
        expect(
            same_steps(sent, got),
            did=f"appended steps with step_index {wanted} to session 's', then last_n",
            expected=f"{describe(sent)} (insertion order)",
            got=describe(got),
        )
        tail = await s.last_n("s", 4)
        expect(
            same_steps(sent[-4:], tail),
            did="then last_n('s', 4)",
            expected=f"{describe(sent[-4:])} (the last four inserted)",
            got=describe(tail),
        )


@clause(
    "step.order.insertion-not-time",
    "order is insertion order, even when created_at ties or steps backwards",
    why=(
        "clocks tie and step backwards (NTP, several hosts): a store that orders by "
        "created_at reorders history and the model sees events out of sequence"
    ),
    hint="ORDER BY created_at instead of insertion order (a sequence or rowid)",
)
async def _not_time(h: Harness) -> None:
    async with open_steps(h) as s:
        times = [
            T0,
            T0,
            T0 - timedelta(hours=1),
            T0 + timedelta(days=1),
            T0 - timedelta(days=400),
            T0,
        ]
        sent = [step("s", k, created_at=t, content=f"inserted #{k}") for k, t in enumerate(times)]
        await s.append_all(sent)
        got = await s.last_n("s", len(sent))
        expect(
            same_steps(sent, got),
            did="appended 6 steps whose created_at ties and steps backwards, then last_n",
            expected=f"{describe(sent)} (insertion order)",
            got=describe(got),
        )
        tail = await s.last_n("s", 3)
        expect(
            same_steps(sent[-3:], tail),
            did="then last_n('s', 3)",
            expected=f"{describe(sent[-3:])} (the last three inserted)",
            got=describe(tail),
        )
        # A store may take another path for long windows (an ORDER BY only there):
        # 50 steps whose clock runs backwards, ties and jumps, shuffled deterministically.
        offsets = [((k * 37) % 50 - 25) * (-1) ** k // 2 for k in range(50)]
        long = [
            step("long", k, created_at=T0 + timedelta(seconds=o), content=f"inserted #{k}")
            for k, o in enumerate(offsets)
        ]
        await s.append_all(long)
        for n in (50, 20):
            got = await s.last_n("long", n)
            expect(
                same_steps(long[-n:], got),
                did=f"appended 50 steps to 'long' with created_at shuffled (ties, backwards "
                f"jumps), then last_n('long', {n})",
                expected=f"{describe(long[-n:])} (insertion order)",
                got=describe(got),
            )


@clause(
    "step.order.interleaved-sessions",
    "appends interleaved across sessions keep each session's own insertion order",
    why=REPLAY,
)
async def _interleaved(h: Harness) -> None:
    async with open_steps(h) as s:
        a, b = steps("a", 6), steps("b", 6, start=100)
        for x, y in zip(a, b, strict=True):
            await s.append(x)
            await s.append(y)
        for sid, sent in (("a", a), ("b", b)):
            got = await s.last_n(sid, 4)
            expect(
                same_steps(sent[-4:], got),
                did="appended to sessions 'a' and 'b' alternately, then last_n(<session>, 4)",
                expected=f"session {sid!r}: {indices(sent[-4:])}",
                got=describe(got),
            )


@clause(
    "step.window.newest-n",
    "last_n returns the most recent n steps, not the first n",
    why=(
        "the loop asks for the newest history_window steps; the oldest n would replay the "
        "start of the conversation and drop everything the model said since"
    ),
    hint="LIMIT n in ascending order: the oldest n, not the newest",
)
async def _newest_n(h: Harness) -> None:
    async with open_steps(h) as s:
        sent = steps("s", 10)
        await s.append_all(sent)
        got = await s.last_n("s", 3)
        expect(
            same_steps(sent[-3:], got),
            did="appended steps 0..9 to session 's', then last_n('s', 3)",
            expected="step_index [7, 8, 9]",
            got=indices(got),
        )


@clause(
    "step.window.sizes",
    "last_n with n = 1, n = count, n > count and n past a 64-bit LIMIT (2**63 and up)",
    why=REPLAY,
)
async def _sizes(h: Harness) -> None:
    async with open_steps(h) as s:
        sent = steps("s", 7)
        await s.append_all(sent)
        sizes = [(1, sent[-1:]), (7, sent), (8, sent), (1000, sent), (2**31 - 1, sent)]
        sizes += [(2**63 - 1, sent), (2**63, sent), (2**64 + 1, sent)]  # past a 64-bit LIMIT
        for n, want in sizes:
            got = await s.last_n("s", n)
            expect(
                same_steps(want, got),
                did=f"appended steps 0..6 to session 's', then last_n('s', {n})",
                expected=f"{indices(want)} (n > count returns every step, n = 1 the newest)",
                got=indices(got),
            )


LONG_HISTORY = 5000
"""Steps in the long history: past the few thousand where rings and caps cut a session off."""

BATCH = 1000
"""Steps per ``append_many`` call when the long history is written in batches."""

SINGLY = 100
"""The long history's last steps, always appended one by one."""


async def write_long(s: Steps, sent: list[RunStep]) -> str:
    """Append ``sent`` (one session): in batches of :data:`BATCH` when the store has
    ``append_many``, the last :data:`SINGLY` one by one either way. Returns what it did,
    as a failure message shows it.

    The history's length is the point, not its round trips: a store that caps or rings
    its steps past a few thousand is caught by the reads after either way, and the single
    appends past that length still meet an ``append`` that trims on write.
    """
    sid, last = sent[0].session_id, len(sent) - 1
    if not isinstance(s.store, SupportsAppendMany):
        await s.append_all(sent)
        return f"appended steps 0..{last} to session {sid!r}, one by one"
    head, tail = sent[:-SINGLY], sent[-SINGLY:]
    await s.ensure(sid)
    for start in range(0, len(head), BATCH):
        await s.store.append_many(head[start : start + BATCH])
    await s.append_all(tail)
    return (
        f"appended steps 0..{last} to session {sid!r}: 0..{len(head) - 1} by append_many "
        f"in batches of {BATCH}, the rest one by one"
    )


@clause(
    "step.window.long-history",
    "after a 5,000-step history is appended, last_n returns exactly the newest n",
    why=(
        "long sessions are the normal case; a window that drifts, truncates or duplicates "
        "after thousands of steps corrupts exactly the conversations that matter most"
    ),
)
async def _long_history(h: Harness) -> None:
    async with open_steps(h) as s:
        sent = steps("long", LONG_HISTORY)
        wrote = await write_long(s, sent)
        for n in (1, 80, 4999, 5000, 5001):
            got = await s.last_n("long", n)
            want = sent[-n:]
            expect(
                same_steps(want, got),
                did=f"{wrote}, then last_n('long', {n})",
                expected=indices(want),
                got=indices(got),
            )
        if hasattr(s.store, "all"):
            got = await s.store.all("long")
            expect(
                same_steps(sent, got),
                did=f"{wrote}, then all('long')",
                expected=indices(sent),
                got=indices(got),
                hint="all() answered from its first page of rows",
            )


_INT_FIELDS = ("step_index", "duration_ms", "prompt_tokens", "completion_tokens")


async def _round_trip(s: Steps, sent: list[RunStep], what: str) -> None:
    """Append ``sent`` (all one session) and compare last_n with it field by field."""
    sid = sent[0].session_id
    await s.append_all(sent)
    got = await s.last_n(sid, len(sent) + 1)
    if same_steps(sent, got):
        return
    if not isinstance(got, list) or len(got) != len(sent):
        raise Violation(
            f"appended {len(sent)} step(s) ({what}) to session {sid!r}, then last_n",
            f"{len(sent)} step(s) back",
            describe(got),
        )
    for a, b in zip(sent, got, strict=True):
        diffs = step_diff(a, b)
        if diffs:
            raise Violation(
                f"appended a step ({what}) to session {sid!r}, then read it back with last_n",
                "every field as appended (tool_args JSON-equal, created_at equal and UTC)",
                "; ".join(diffs),
            )


@clause(
    "step.roundtrip.fields",
    "every RunStep field survives append/last_n, for every step type",
    why=(
        "the loop rebuilds the conversation from these fields: a lost type, token count or "
        "duration turns into a wrong replay, wrong budgets and wrong reports"
    ),
)
async def _fields(h: Harness) -> None:
    async with open_steps(h) as s:
        sent = [
            step(
                "s",
                k,
                step_type=t,
                content=f"a {t.value} step",
                duration_ms=k * 7,
                prompt_tokens=k * 11,
                completion_tokens=k * 13,
            )
            for k, t in enumerate(StepType)
        ]
        await _round_trip(s, sent, "one of each step type, distinct numbers")


@clause(
    "step.roundtrip.int32-edges",
    "step_index, token counts and duration_ms keep 0 and 2**31 - 1",
    why=(
        "token counts and indices at the int32 edge are legal values; a store that clips, "
        "wraps or refuses them breaks budgets and step numbering on long runs"
    ),
)
async def _int32(h: Harness) -> None:
    async with open_steps(h) as s:
        edge = {name: INT32_MAX for name in _INT_FIELDS}
        zero = dict.fromkeys(_INT_FIELDS, 0)
        await _round_trip(s, [step("s", 0, **zero), step("s", 0, **edge)], "0 and 2**31 - 1")


@clause(
    "step.roundtrip.created-at",
    "created_at comes back equal to the microsecond, timezone-aware, in UTC",
    why=(
        "created_at is how people audit a run; a store that drops microseconds, the timezone "
        "or shifts by the local offset rewrites when things happened"
    ),
    hint="a timestamp column without microseconds or time zone",
)
async def _created_at(h: Harness) -> None:
    async with open_steps(h) as s:
        times = [
            T0,
            datetime(2026, 7, 1, 23, 59, 59, 999999, tzinfo=OTHER_TZ),
            datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=1),
            datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
            datetime(2000, 2, 29, 12, 0, 0, 1, tzinfo=UTC),
            datetime(2262, 4, 12, tzinfo=UTC),  # past the int64-nanosecond range
            datetime(2999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        ]
        sent = [step("s", k, created_at=t) for k, t in enumerate(times)]
        await _round_trip(s, sent, "created_at with microseconds, offsets, pre-1970 and far future")


@clause(
    "step.roundtrip.tool-args",
    "tool_args survives JSON-semantically, CompactionCheckpoint included",
    why=(
        "a summary step keeps its CompactionCheckpoint in tool_args: a store that drops it "
        "makes every session silently re-summarize itself on each run, and tool calls "
        "replay without their arguments"
    ),
)
async def _tool_args(h: Harness) -> None:
    async with open_steps(h) as s:
        checkpoint = CompactionCheckpoint(41).to_json()
        sent = [
            step("s", 0, step_type=StepType.summary, content="Summary.", tool_args=checkpoint),
            *[
                step("s", k + 1, step_type=StepType.tool_call, tool_args=doc)
                for k, doc in enumerate(JSON_DOCS)
            ],
        ]
        await _round_trip(s, sent, "a summary checkpoint and varied JSON documents")
        got = await s.last_n("s", len(sent))
        back = CompactionCheckpoint.from_json(got[0].tool_args)
        expect(
            back.retain_from_step == 41,
            did="read back the summary step's tool_args as a CompactionCheckpoint",
            expected="retain_from_step 41",
            got=back,
        )


@clause(
    "step.roundtrip.text",
    "content survives exactly: empty, whitespace, newlines, multi-byte, emoji, RTL",
    why=(
        "content is what the model said and what tools returned; a trimmed newline or a "
        "mangled character changes the conversation the model is shown"
    ),
)
async def _text(h: Harness) -> None:
    async with open_steps(h) as s:
        sent = [step("s", k, content=text) for k, text in enumerate(TEXTS)]
        await _round_trip(s, sent, "contents with whitespace, newlines and varied Unicode")


@clause(
    "step.roundtrip.control-chars",
    "content keeps control characters, NUL included (RunStep accepts them)",
    why=(
        "tool output is arbitrary text and RunStep accepts NUL and control characters: a "
        "store that refuses or strips them fails or corrupts runs whose tools print them"
    ),
)
async def _control(h: Harness) -> None:
    async with open_steps(h) as s:
        sent = [step("s", k, content=text) for k, text in enumerate(CONTROL_TEXTS)]
        await _round_trip(s, sent, "contents holding NUL and control characters")


@clause(
    "step.roundtrip.large-content",
    "1 MiB of content (ASCII, and over 2 MiB of multi-byte UTF-8) survives exactly",
    why=(
        "tool results can be large (files, pages); a store that truncates them feeds the "
        "model a cut-off result with no sign of the cut"
    ),
)
async def _large(h: Harness) -> None:
    async with open_steps(h) as s:
        ascii_mib = "".join(f"line {i:07d}\n" for i in range(2**20 // 13 + 1))[: 2**20]
        wide_mib = "é中🧪" * (2**21 // 9 + 1)  # 2 MiB + 9 bytes: past a 1 or 2 MiB byte cap
        # tool_args too: a write tool's arguments carry whole files.
        big_args = json.dumps({"path": "notes.txt", "content": ascii_mib[: 2**20 - 40]})
        sent = [
            step("big", 0, content=ascii_mib),
            step("big", 1, content=wide_mib),
            step("big", 2, step_type=StepType.tool_call, tool_args=big_args),
        ]
        await _round_trip(s, sent, "1 MiB ASCII, 2 MiB of multi-byte UTF-8, 1 MiB of tool_args")


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
    hint="an id spliced into SQL text or matched with LIKE",
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
    hint="a case-insensitive collation (COLLATE NOCASE, MySQL's default)",
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
        long_sent = {sid: steps(sid, 2, start=100 * k) for k, sid in enumerate(LONG_IDS)}
        for sid in LONG_IDS:
            await s.append_all(long_sent[sid])
        for sid in LONG_IDS:
            got = await s.last_n(sid, 10)
            expect(
                same_steps(long_sent[sid], got),
                did=f"appended 2 steps to each of {len(LONG_IDS)} sessions with ids of 301 to "
                f"1,024 bytes differing only at the end, then last_n({short_id(sid)}, 10)",
                expected=f"only that session's steps: {describe(long_sent[sid])}",
                got=describe(got),
                hint=LONG_HINT,
            )


@clause(
    "step.no-alias",
    "mutating a list last_n returned never changes the store",
    why=(
        "the loop edits the history it gets back (rehydrating, trimming); if that list is "
        "the store's own, the edit silently rewrites the stored trace"
    ),
    hint="returning the store's own list (or its objects) instead of a copy",
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


@clause(
    "step.fresh-store",
    "each new_step_store() call gives an empty store, not one sharing another's state",
    why=(
        "the loop and eval suites count on fresh stores starting empty; state shared "
        "between instances leaks one suite's (or tenant's) history into another"
    ),
)
async def _fresh(h: Harness) -> None:
    async with open_steps(h) as first:
        got = await first.last_n(SENTINEL, 10)
        expect(
            got == [],
            did=f"opened a store with new_step_store(), then last_n({SENTINEL!r}, 10)",
            expected="[] (a fresh store is empty)",
            got=describe(got),
        )
        await first.append(step(SENTINEL, 0))
        async with open_steps(h) as second:
            got = await second.last_n(SENTINEL, 10)
            expect(
                got == [],
                did=f"appended to {SENTINEL!r} in one store, opened a second with "
                "new_step_store() and called last_n on it",
                expected="[] (the second store is fresh and empty)",
                got=describe(got),
            )
