"""``step.roundtrip.*``: every ``RunStep`` field survives ``append`` / ``last_n`` exactly."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from agentloop import CompactionCheckpoint, RunStep, StepType
from agentlooptest._clause import Violation, clause, expect
from agentlooptest._data import (
    CONTROL_TEXTS,
    INT32_MAX,
    JSON_DOCS,
    OTHER_TZ,
    T0,
    TEXTS,
    describe,
    same_steps,
    step,
    step_diff,
)
from agentlooptest._stores import Steps, open_steps

if TYPE_CHECKING:
    from agentlooptest._harness import Harness


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
    "1 MiB of content (ASCII and multi-byte) survives exactly",
    why=(
        "tool results can be large (files, pages); a store that truncates them feeds the "
        "model a cut-off result with no sign of the cut"
    ),
)
async def _large(h: Harness) -> None:
    async with open_steps(h) as s:
        ascii_mib = "".join(f"line {i:07d}\n" for i in range(2**20 // 13 + 1))[: 2**20]
        wide_mib = "é中🧪" * (2**20 // 9)
        # tool_args too: a write tool's arguments carry whole files.
        big_args = json.dumps({"path": "notes.txt", "content": ascii_mib[: 2**20 - 40]})
        sent = [
            step("big", 0, content=ascii_mib),
            step("big", 1, content=wide_mib),
            step("big", 2, step_type=StepType.tool_call, tool_args=big_args),
        ]
        await _round_trip(s, sent, "1 MiB ASCII, 1 MiB of multi-byte UTF-8, 1 MiB of tool_args")
