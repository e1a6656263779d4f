"""Conversions between the value types and database columns, shared by both stores.

**Rows back into steps** (:func:`step_of`). Every row a store inserts came
from a ``RunStep`` that passed its validators, so reading it back through them
again (about 4-9 us a step, most of a ``last_n(20)``) buys nothing. But the
database is shared: another program, or a hand-written ``INSERT``, can put a
row there that was never valid. So trust is decided per row, on what the row
holds, never on where it came from: each integer field an ``int`` in
``RunStep``'s range, ``step_type`` one of :class:`~agentloop.StepType`'s
values, ``content`` a ``str``, ``created_at`` an aware UTC ``datetime``,
``tool_args`` JSON text by ``RunStep``'s own rule (``validate_json``, which
takes ``"{}"`` at once); the session id is the one the query asked for
(already validated), and text read through either driver is valid UTF-8. A
row that passes all of these is built by ``trusted_builder``; any other row
goes through ``RunStep(...)`` and raises what its validators say. Measured in
``docs/decisions.md`` ("Rows back into steps"), where it shows in the
newest-20 read against the peers.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from agentloop import (
    FinalizeSummary,
    RunStatus,
    RunStep,
    Session,
    SessionInfo,
    StepType,
    validate_json,
    validate_session_id,
)
from agentloop._shared import INT32_MAX, trusted_builder

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def to_micros(moment: datetime) -> int:
    """Microseconds since the Unix epoch: a fixed-width, sortable, exact UTC form."""
    return (moment - EPOCH) // _MICROSECOND


def from_micros(micros: int) -> datetime:
    """The aware UTC datetime ``to_micros`` encoded."""
    return EPOCH + timedelta(microseconds=micros)


def as_utc(moment: datetime) -> datetime:
    """``moment`` (aware, from a driver in any time zone) in UTC."""
    return moment if moment.tzinfo is UTC else moment.astimezone(UTC)


def now() -> datetime:
    """The wall-clock time that stamps session writes."""
    return datetime.now(UTC)


def split_nul(text: str) -> tuple[str | None, bytes | None]:
    """``(text, None)``, or ``(None, utf8)`` when ``text`` holds NUL (PostgreSQL TEXT cannot)."""
    if "\x00" in text:
        return None, text.encode("utf-8")
    return text, None


def join_nul(text: str | None, raw: bytes | None) -> str:
    """Undo :func:`split_nul`."""
    if text is not None:
        return text
    if raw is None:
        raise ValueError("a text column and its NUL-safe twin are both NULL")
    return bytes(raw).decode("utf-8")


# The finalize columns, in the order every query selects them.
FINAL_COLUMNS = (
    "final_status",
    "final_prompt_tokens",
    "final_completion_tokens",
    "final_step_count",
    "final_duration_ms",
    "final_data_bytes",
)


def final_params(summary: FinalizeSummary) -> tuple[str, int, int, int, int, int]:
    """The values of :data:`FINAL_COLUMNS` for ``summary``."""
    return (
        summary.status.value,
        summary.prompt_tokens,
        summary.completion_tokens,
        summary.step_count,
        summary.duration_ms,
        summary.data_bytes_carried,
    )


def final_from_row(row: tuple[Any, ...]) -> FinalizeSummary | None:
    """The summary held in :data:`FINAL_COLUMNS`, ``None`` before any finalize."""
    status, prompt, completion, steps, duration, carried = row
    if status is None:
        return None
    return FinalizeSummary(
        status=RunStatus(status),
        prompt_tokens=prompt,
        completion_tokens=completion,
        step_count=steps,
        duration_ms=duration,
        data_bytes_carried=carried,
    )


def info(
    session_id: str,
    status: str | None,
    total: int,
    created: datetime,
    updated: datetime,
    labels: str = "{}",
) -> SessionInfo:
    """One ``list_sessions`` row; ``labels`` is the stored JSON text (:func:`labels_text`).

    Built without ``SessionInfo``'s validators when the row plainly keeps their
    rules (a valid id, a known status or none, a total in [0, 2**63), UTC times, no
    labels), as :func:`session_of` builds sessions; any other row goes
    through ``SessionInfo(...)``.

    Raises:
        TypeError, ValueError: the row breaks ``SessionInfo``'s rules.
    """
    kind = _STATUSES.get(status) if status.__class__ is str else None
    if (
        (status is None or kind is not None)
        and total.__class__ is int
        and 0 <= total < INT64_LIMIT
        and created.__class__ is datetime
        and created.tzinfo is UTC
        and updated.__class__ is datetime
        and updated.tzinfo is UTC
        and labels == "{}"
        and _id_ok(session_id)
    ):
        return _build_info(session_id, kind, total, created, updated, labels=_NO_LABELS)
    return SessionInfo(
        id=session_id,
        status=RunStatus(status) if status is not None else None,
        step_count=total,
        created_at=created,
        updated_at=updated,
        labels=json.loads(labels) if labels != "{}" else {},
    )


def _id_ok(session_id: object) -> bool:
    try:
        validate_session_id(session_id)
    except (TypeError, ValueError):
        return False
    return True


def labels_text(labels: Mapping[str, str]) -> str:
    """Labels as the canonical JSON text the ``labels`` columns hold (keys sorted)."""
    return json.dumps(dict(sorted(labels.items())), ensure_ascii=False, separators=(",", ":"))


_KINDS = {kind.value: kind for kind in StepType}
_build_step = trusted_builder(RunStep)
_build_session = trusted_builder(Session)
_build_info = trusted_builder(SessionInfo)
_STATUSES = {status.value: status for status in RunStatus}
INT64_LIMIT = 2**63  # step_count is an int in [0, 2**63 - 1]
# The one empty labels mapping SessionInfo's converter gives, taken from a checked value.
_NO_LABELS = SessionInfo("-", None, 0, EPOCH, EPOCH).labels


def _json_ok(text: object) -> bool:
    try:
        validate_json(text, "tool_args")
    except (TypeError, ValueError):
        return False
    return True


def step_of(
    session_id: str,
    index: object,
    kind: object,
    content: object,
    args: object,
    duration: object,
    prompt: object,
    completion: object,
    created: object,
) -> RunStep:
    """The ``RunStep`` a row holds, of the session the query asked for (see the module docstring).

    Raises:
        TypeError, ValueError, OverflowError: the row breaks ``RunStep``'s rules
            (it was not written by this store); the message names the field.
    """
    # Spelled out, with no helper calls: this runs for every step a read returns.
    step_type = _KINDS.get(kind) if type(kind) is str else None
    if (
        step_type is not None
        and type(index) is int
        and type(duration) is int
        and type(prompt) is int
        and type(completion) is int
        and 0 <= index <= INT32_MAX
        and 0 <= duration <= INT32_MAX
        and 0 <= prompt <= INT32_MAX
        and 0 <= completion <= INT32_MAX
        and type(content) is str
        and isinstance(created, datetime)
        and created.tzinfo is UTC
        and (args == "{}" or _json_ok(args))
    ):
        return _build_step(
            session_id, index, step_type, content, args, duration, prompt, completion, created
        )
    return _checked_step(
        session_id, index, kind, content, args, duration, prompt, completion, created
    )


def session_of(session_id: str, model: object, prompt: object, data: object) -> Session:
    """The ``Session`` a row holds, of an id the query asked for (already validated).

    Built without ``Session``'s validators when the row plainly keeps their
    rules: ASCII text (which holds no lone surrogate), no NUL in ``model``,
    ``data`` ``None`` or JSON by ``validate_json``'s rule. Any other row goes
    through ``Session(...)``.

    Raises:
        TypeError, ValueError: the row breaks ``Session``'s rules (it was not
            written by this store); the message names the field.
    """
    if (
        type(model) is str
        and model.isascii()
        and "\x00" not in model
        and type(prompt) is str
        and prompt.isascii()
        and (data is None or _json_ok(data))
    ):
        return _build_session(session_id, model, prompt, data)
    return Session(session_id, model, prompt, data)  # type: ignore[arg-type]


def _checked_step(session_id: str, *fields: object) -> RunStep:
    """The row through ``RunStep``'s validators: raises what they say about it."""
    index, kind, content, args, duration, prompt, completion, created = fields
    return RunStep(
        session_id=session_id,
        step_index=index,  # type: ignore[arg-type]
        step_type=kind,
        content=content,  # type: ignore[arg-type]
        tool_args=args,  # type: ignore[arg-type]
        duration_ms=duration,  # type: ignore[arg-type]
        prompt_tokens=prompt,  # type: ignore[arg-type]
        completion_tokens=completion,  # type: ignore[arg-type]
        created_at=created,
    )
