"""The values that cross the store seam: sessions, steps, run summaries."""

from __future__ import annotations

import enum
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs

from agentloop._validate import (
    INT64_MAX,
    check_int,
    check_text,
    parse_json,
    preview,
    validate_json,
    validate_session_id,
)


class StepType(enum.StrEnum):
    """What one stored step records."""

    user = "user"
    tool_call = "tool_call"
    tool_result = "tool_result"
    response = "response"
    error = "error"
    summary = "summary"


class RunStatus(enum.StrEnum):
    """How one run of the loop ended."""

    completed = "completed"
    error = "error"
    max_iterations = "max_iterations"
    cancelled = "cancelled"
    timeout = "timeout"
    budget_exhausted = "budget_exhausted"


def _session_id(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    validate_session_id(value, attribute.name)


def _short_text(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    check_text(value, attribute.name, allow_nul=False)


def _text(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    check_text(value, attribute.name)


def _json_text(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    validate_json(value, attribute.name)


def _optional_json_text(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None:
        validate_json(value, attribute.name)


def _int32(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    check_int(value, attribute.name)


def _int64(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    check_int(value, attribute.name, maximum=INT64_MAX)


def _to_member(enum_type: type[enum.StrEnum], value: object) -> object:
    if isinstance(value, str) and not isinstance(value, enum_type):
        try:
            return enum_type(value)
        except ValueError:
            return value  # left for the validator, which names the field
    return value


def _check_member(enum_type: type[enum.StrEnum], field: str, value: object) -> None:
    if not isinstance(value, enum_type):
        allowed = ", ".join(member.value for member in enum_type)
        raise ValueError(f"{field} must be one of {allowed}, got {preview(value)}")


def _to_step_type(value: object) -> object:
    return _to_member(StepType, value)


def _to_status(value: object) -> object:
    return _to_member(RunStatus, value)


def _step_type(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    _check_member(StepType, attribute.name, value)


def _status(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    _check_member(RunStatus, attribute.name, value)


def _optional_status(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None:
        _check_member(RunStatus, attribute.name, value)


def _to_utc(value: object) -> object:
    if isinstance(value, datetime) and value.utcoffset() is not None:
        try:
            return value.astimezone(UTC)
        except OverflowError:
            return value  # outside UTC's range: left for the validator, which names the field
    return value  # left for the validator, which names the field


def _aware_datetime(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, datetime):
        raise TypeError(f"{attribute.name} must be a datetime, got {preview(value)}")
    if value.utcoffset() is None:
        raise ValueError(f"{attribute.name} must be timezone-aware, got {value!r}")
    if value.tzinfo is not UTC and value.utcoffset() != timedelta(0):
        raise ValueError(
            f"{attribute.name} must be within datetime's range once converted to UTC, got {value!r}"
        )


def _now() -> datetime:
    return datetime.now(UTC)


@attrs.frozen
class Session:
    """A session's settings and working memory, as a :class:`SessionStore` keeps them.

    ``id`` is opaque and case-sensitive: any non-empty text without NUL or lone
    surrogates. ``data`` is JSON text (or ``None``); stores compare it
    JSON-semantically, never byte for byte.
    """

    id: str = attrs.field(validator=_session_id)
    model: str = attrs.field(default="", validator=_short_text)
    system_prompt: str = attrs.field(default="", validator=_text)
    data: str | None = attrs.field(default=None, validator=_optional_json_text)

    def with_data(self, data: str | None) -> Session:
        """A copy with ``data`` replaced; only the new ``data`` is validated.

        The other fields were validated when ``self`` was built, so this is the
        cheap path for stores that replace working memory on every write.

        Raises:
            TypeError: ``data`` is neither ``str`` nor ``None``.
            ValueError: ``data`` is not JSON text a store can keep.
        """
        if data is not None:
            validate_json(data, "data")
        return replace_checked_data(self, data)


def replace_checked_data(session: Session, data: str | None) -> Session:
    """``session`` with ``data`` swapped in, skipping validation: ``data`` must be checked already.

    For stores that validate a snapshot outside their lock and swap it in
    under it; everything else uses :meth:`Session.with_data`.
    """
    copy = object.__new__(Session)
    setattr_ = object.__setattr__  # the frozen class's own __setattr__ refuses
    setattr_(copy, "id", session.id)
    setattr_(copy, "model", session.model)
    setattr_(copy, "system_prompt", session.system_prompt)
    setattr_(copy, "data", data)
    return copy


@attrs.frozen
class RunStep:
    """One entry of a session's trace.

    Stores keep steps in insertion order; ``step_index`` and ``created_at`` are
    data, never the order. ``created_at`` must be timezone-aware and is held in
    UTC. ``tool_args`` is JSON text: for a ``summary`` step it carries the
    :class:`CompactionCheckpoint`.
    """

    session_id: str = attrs.field(validator=_session_id)
    step_index: int = attrs.field(validator=_int32)
    step_type: StepType = attrs.field(converter=_to_step_type, validator=_step_type)
    content: str = attrs.field(default="", validator=_text)
    tool_args: str = attrs.field(default="{}", validator=_json_text)
    duration_ms: int = attrs.field(default=0, validator=_int32)
    prompt_tokens: int = attrs.field(default=0, validator=_int32)
    completion_tokens: int = attrs.field(default=0, validator=_int32)
    created_at: datetime = attrs.field(factory=_now, converter=_to_utc, validator=_aware_datetime)


@attrs.frozen
class FinalizeSummary:
    """What one run reports when it ends; the latest ``finalize`` of a session wins."""

    status: RunStatus = attrs.field(converter=_to_status, validator=_status)
    prompt_tokens: int = attrs.field(default=0, validator=_int32)
    completion_tokens: int = attrs.field(default=0, validator=_int32)
    step_count: int = attrs.field(default=0, validator=_int32)
    duration_ms: int = attrs.field(default=0, validator=_int32)
    data_bytes_carried: int = attrs.field(default=0, validator=_int64)


@attrs.frozen
class CompactionCheckpoint:
    """Marks where a compacted history resumes: steps before ``retain_from_step`` are summarized.

    Kept as the ``tool_args`` of a ``summary`` step, in the JSON form
    ``{"retain_from_step": N}``.
    """

    retain_from_step: int = attrs.field(validator=_int32)

    def to_json(self) -> str:
        """The JSON text stored in a ``summary`` step's ``tool_args``."""
        return json.dumps({"retain_from_step": self.retain_from_step})

    @classmethod
    def from_json(cls, text: str) -> CompactionCheckpoint:
        """Parse the JSON form back.

        Raises:
            TypeError: ``text`` is not a ``str``.
            ValueError: ``text`` is not a JSON object with an int ``retain_from_step`` >= 0.
        """
        decoded = parse_json(text, "checkpoint")
        if not isinstance(decoded, dict) or "retain_from_step" not in decoded:
            raise ValueError(
                f'checkpoint must be a JSON object {{"retain_from_step": N}}, got {preview(text)}'
            )
        value = decoded["retain_from_step"]
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(f"retain_from_step must be an int, got {preview(value)}")
        return cls(retain_from_step=value)


@attrs.frozen
class SessionInfo:
    """One row of ``list_sessions``: a session's identity, latest run and times.

    ``status`` is the latest run's status (``None`` before any ``finalize``);
    ``step_count`` totals ``FinalizeSummary.step_count`` over every finalized
    run. ``created_at`` is the first write through the session store,
    ``updated_at`` the latest, both aware UTC.
    """

    id: str = attrs.field(validator=_session_id)
    status: RunStatus | None = attrs.field(converter=_to_status, validator=_optional_status)
    step_count: int = attrs.field(validator=_int64)
    created_at: datetime = attrs.field(converter=_to_utc, validator=_aware_datetime)
    updated_at: datetime = attrs.field(converter=_to_utc, validator=_aware_datetime)
