"""Conversions between the value types and database columns, shared by both stores."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from agentloop import FinalizeSummary, RunStatus, SessionInfo

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
    return moment.astimezone(UTC)


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
    session_id: str, status: str | None, total: int, created: datetime, updated: datetime
) -> SessionInfo:
    """One ``list_sessions`` row."""
    return SessionInfo(
        id=session_id,
        status=RunStatus(status) if status is not None else None,
        step_count=total,
        created_at=created,
        updated_at=updated,
    )
