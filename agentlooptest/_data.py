"""Sample values the clauses write, how they compare and describe what came back,
and the session checks several clause modules share."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import attrs

from agentloop import FinalizeSummary, RunStatus, RunStep, Session, StepType
from agentlooptest._clause import expect

T0 = datetime(2026, 3, 14, 15, 9, 26, 535897, tzinfo=UTC)
"""A fixed base time with every microsecond digit set."""

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

SQL_IDS = (
    "'; DROP TABLE steps; --",
    'x" OR "1"="1',
    "100%",
    "a_b",
    "back\\slash",
    "$1",
    "?",
)
"""Ids that break a store which splices ids into SQL, LIKE patterns or regexes."""

CASE_IDS = ("Session", "session", "SESSION", "sessIon", "ß", "SS", "ǅ", "ǆ")
"""Ids that differ only in case (or fold to each other)."""

VERBATIM_IDS = (
    "with space",
    " leading",
    "trailing ",
    "\ttab",
    "line\nbreak",
    "café",  # NFC
    "cafe\u0301",  # NFD: the same text to a reader, a different id
    "会话-🧪",
    "שלום-مرحبا",
    "a" * 512,
)
"""Ids a store must keep byte for byte: whitespace, normalization forms, scripts, length."""

TEXTS = (
    "",
    " ",
    "trailing space   ",
    "trailing newlines\n\n\n",
    "\n leading newline and tab\t",
    "crlf\r\nline",
    "multi-byte: é ß Ω ж 中文 日本語",
    "emoji: 🧪🚀👩‍👩‍👧‍👦🏳️‍🌈",
    "RTL: שלום עולם مرحبا بالعالم \u202eoverride",
    "combining: e\u0301 a\u0308 \u0915\u094d\u0937",
    "quotes ' \" ` and \\ backslash and %s {} $1",
    "astral: \U0001d54f\U0001d538\U0001d544 \U0010fffd",
    "\ufeffleading byte order mark",
    "NFD, not NFC: cafe\u0301 \u1100\u1161",
)
"""Step contents that a store must return exactly."""

CONTROL_TEXTS = ("nul:\x00:in the middle", "\x01\x02\x7f control", "\x00")
"""Contents with control characters, NUL included: ``RunStep`` accepts them."""

JSON_DOCS = (
    "{}",
    "[]",
    "null",
    "0",
    '"just a string"',
    "true",
    '{"retain_from_step": 17}',
    '{"nested": {"list": [1, 2.5, -3, 1e-07, 12345678901234567890], "empty": {}, "none": null}}',
    '{"unicode": "é 中 🧪 שלום", "escaped": "\\u00e9\\ud83e\\uddea", "quote": "\\"q\\""}',
    '{"b": 1, "a": 2}',
    '{"mode": null, "path": "a.txt", "limit": null}',
    '{"nfd": "cafe\\u0301", "raw nfd": "cafe\u0301", "bom": "\\ufeffhi", "raw bom": "\ufeffhi"}',
    '  {"spaced" :  [ 1 , 2 ] }  ',
    '{"big": 9223372036854775807, "neg": -9223372036854775808, "float": 0.1}',
    '{"integral floats": [1.0, 1E2, -0.0, 2.50]}',
    '{"deep": ' + "[" * 64 + "]" * 64 + "}",
)
"""JSON texts to round-trip; a store may re-serialize them, so equality is semantic."""


def json_equal(a: str | None, b: str | None) -> bool:
    """JSON-semantic equality (``None`` only equals ``None``)."""
    if a is None or b is None:
        return a is b
    same: bool = _canon(json.loads(a)) == _canon(json.loads(b))
    return same


def _canon(value: Any) -> Any:
    # JSON has one number type: 1 and 1.0 are equal (a JSONB column may turn one into the
    # other), compared exactly, not through a double. true is not 1, which Python says it is.
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int | float):
        return ("number", value)
    if isinstance(value, list):
        return [_canon(v) for v in value]
    if isinstance(value, dict):
        return {k: _canon(v) for k, v in value.items()}
    return value


def step(session_id: str, index: int, **fields: Any) -> RunStep:
    """A step with every field set to something distinctive (``index`` drives them)."""
    values: dict[str, Any] = {
        "session_id": session_id,
        "step_index": index,
        "step_type": list(StepType)[index % len(StepType)],
        "content": f"content of {session_id!r} #{index}",
        "tool_args": json.dumps({"call": index, "session": session_id}),
        "duration_ms": 1000 + index % 1000,
        "prompt_tokens": 10 + index % 1000,
        "completion_tokens": 20 + index % 1000,
        "created_at": T0 + timedelta(microseconds=index % 10**6),
    }
    values.update(fields)
    return RunStep(**values)


def steps(session_id: str, count: int, start: int = 0) -> list[RunStep]:
    """``count`` distinctive steps with indices ``start``...``start+count-1``."""
    return [step(session_id, i) for i in range(start, start + count)]


def step_diff(sent: RunStep, got: object) -> list[str]:
    """The fields of ``got`` that differ from ``sent`` (JSON-semantic ``tool_args``)."""
    if not isinstance(got, RunStep):
        return [f"not a RunStep: {type(got).__name__}"]
    diffs = []
    for field in attrs.fields(RunStep):
        a, b = getattr(sent, field.name), getattr(got, field.name)
        if field.name == "tool_args":
            same = _json_or_false(a, b)
        elif field.name == "created_at":
            same = a == b and b.utcoffset() == timedelta(0)
        else:
            same = a == b
        if not same:
            diffs.append(f"{field.name}: sent {_short(a)}, got {_short(b)}")
    return diffs


def _json_or_false(a: str, b: object) -> bool:
    try:
        return isinstance(b, str) and json_equal(a, b)
    except ValueError:
        return False


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 120 else f"{text[:120]}... ({len(text)} chars)"


def same_steps(sent: list[RunStep], got: object) -> bool:
    """Whether ``got`` is a list holding ``sent``, step for step, field for field."""
    return (
        isinstance(got, list)
        and len(got) == len(sent)
        and all(not step_diff(a, b) for a, b in zip(sent, got, strict=True))
    )


def describe(steps: object) -> str:
    """A compact view of a returned list of steps: (session, index, content) each."""
    if not isinstance(steps, list):
        return repr(steps)
    items = [
        f"({s.session_id!r}, #{s.step_index}, {s.content[:24]!r})"
        if isinstance(s, RunStep)
        else repr(s)
        for s in steps[:12]
    ]
    more = f", ... {len(steps) - 12} more" if len(steps) > 12 else ""
    return f"{len(steps)} step(s): [{', '.join(items)}{more}]"


def indices(steps: object) -> str:
    """The ``step_index`` values of a returned list (or its repr if it is not one)."""
    if not isinstance(steps, list) or not all(isinstance(s, RunStep) for s in steps):
        return repr(steps)
    if len(steps) > 16:
        head = [s.step_index for s in steps[:8]]
        tail = [s.step_index for s in steps[-8:]]
        return f"step_index {head} ... {tail} ({len(steps)} steps)"
    return f"step_index {[s.step_index for s in steps]}"


OTHER_TZ = timezone(timedelta(hours=-7, minutes=-30))


def mismatch(want: list[RunStep], got: object) -> str:
    """What came back, and where it first differs from ``want``, field by field."""
    shown = describe(got)
    if not isinstance(got, list):
        return shown
    for i, (a, b) in enumerate(zip(want, got, strict=False)):
        diffs = step_diff(a, b)
        if diffs:
            return f"{shown}; step [{i}] differs: {'; '.join(diffs)}"
    return shown


SENTINEL = "agentlooptest-sentinel"
"""A session id the fresh-store clauses write in one store and look for in another."""

DONE = FinalizeSummary(RunStatus.completed, 10, 20, 3, 400, 17)
"""A completed run's summary with every field distinct: what the session clauses finalize."""


async def expect_data(store: Any, sid: str, want: str | None, did: str, **kw: Any) -> Session:
    """``get(sid)`` and check it returns ``sid`` with data JSON-equal to ``want``."""
    got = await store.get(sid)
    expect(
        isinstance(got, Session) and got.id == sid and json_equal(want, got.data),
        did=did,
        expected=f"Session(id={sid!r}, data={want!r:.200})",
        got=got,
        **kw,
    )
    return got  # type: ignore[no-any-return]


async def expect_exists(store: Any, sid: str, want: bool, did: str, **kw: Any) -> None:
    """``exists(sid)`` is exactly ``want``."""
    got = await store.exists(sid)
    expect(got is want, did=did, expected=f"exists({sid!r}) is {want}", got=got, **kw)


async def seed_session(store: Any, sid: str) -> None:
    """Give ``sid`` data and an error summary, so a later call has something to lose."""
    await store.update_data(sid, '{"before": 1}')
    await store.finalize(sid, FinalizeSummary(RunStatus.error, step_count=1))


def same_session(want: Session, got: object) -> bool:
    """Whether ``got`` is a Session with ``want``'s id, model, system prompt and data."""
    return (
        isinstance(got, Session)
        and (got.id, got.model, got.system_prompt) == (want.id, want.model, want.system_prompt)
        and json_equal(want.data, got.data)
    )


LONG_IDS = ("x" * 300 + "1", "x" * 300 + "2", "é" * 511 + "a", "é" * 511 + "b", "é" * 512)
"""Ids past 255 and 512 characters that differ only at the end, up to the 1,024-byte maximum."""

LONG_HINT = "an id column or index key cut at a fixed length (VARCHAR(255), a key prefix)"


def short_id(sid: str) -> str:
    """A long id shown as its start, length and end."""
    if len(sid) <= 40:
        return repr(sid)
    return f"{sid[:6]!r}...<{len(sid)} chars>...{sid[-4:]!r}"
