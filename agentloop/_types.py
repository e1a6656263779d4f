"""The values that cross the store seam: sessions, steps, run summaries."""

from __future__ import annotations

import enum
import json
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, cast

import attrs

from agentloop import _validate as check
from agentloop._validate import (
    parse_json,
    preview,
    trusted_builder,
    validate_json,
    validate_labels,
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


def _to_step_type(value: object) -> object:
    return check.to_member(StepType, value)


def to_status(value: object) -> object:
    """Convert a status value (``"completed"``) into the :class:`RunStatus` member."""
    return check.to_member(RunStatus, value)


def _now() -> datetime:
    return datetime.now(UTC)


@attrs.frozen
class Session:
    """A session's settings and working memory, as a :class:`SessionStore` keeps them.

    ``id`` is opaque and case-sensitive: any non-empty text of at most 1,024
    UTF-8 bytes, without NUL or lone surrogates. ``data`` is JSON text (or
    ``None``); stores compare it JSON-semantically, never byte for byte.
    """

    id: str = attrs.field(validator=check.session_id)
    model: str = attrs.field(default="", validator=check.key_text)
    system_prompt: str = attrs.field(default="", validator=check.text)
    data: str | None = attrs.field(
        default=None, validator=attrs.validators.optional(check.json_text)
    )

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
        return _trusted_session(self.id, self.model, self.system_prompt, data)


_trusted_session = trusted_builder(Session)


@attrs.frozen
class RunStep:
    """One entry of a session's trace.

    Stores keep steps in insertion order; ``step_index`` and ``created_at`` are
    data, never the order. ``created_at`` must be timezone-aware and is held in
    UTC. ``tool_args`` is JSON text: for a ``summary`` step it carries the
    :class:`CompactionCheckpoint`.
    """

    session_id: str = attrs.field(validator=check.session_id)
    step_index: int = attrs.field(validator=check.int32)
    step_type: StepType = attrs.field(converter=_to_step_type, validator=check.member_of(StepType))
    content: str = attrs.field(default="", validator=check.text)
    tool_args: str = attrs.field(default="{}", validator=check.json_text)
    duration_ms: int = attrs.field(default=0, validator=check.int32)
    prompt_tokens: int = attrs.field(default=0, validator=check.int32)
    completion_tokens: int = attrs.field(default=0, validator=check.int32)
    created_at: datetime = attrs.field(
        factory=_now, converter=check.to_utc, validator=check.aware_datetime
    )


def check_steps(steps: object) -> list[RunStep]:
    """A fresh list of a batch's steps, every one checked before anything is written.

    Raises:
        TypeError: ``steps`` is not a sequence (a ``str`` neither), or the item
            at some position is not a ``RunStep`` (the message names it:
            ``steps[3] must be a RunStep``).
    """
    if not isinstance(steps, list | tuple) and (
        not isinstance(steps, Sequence) or isinstance(steps, str | bytes)
    ):
        raise TypeError(f"steps must be a sequence of RunStep, got {preview(steps)}")
    batch: list[RunStep] = list(cast("Sequence[RunStep]", steps))
    for position, step in enumerate(batch):
        if not isinstance(step, RunStep):
            raise TypeError(f"steps[{position}] must be a RunStep, got {preview(step)}")
    return batch


@attrs.frozen
class FinalizeSummary:
    """What one run reports when it ends; the latest ``finalize`` of a session wins."""

    status: RunStatus = attrs.field(converter=to_status, validator=check.member_of(RunStatus))
    prompt_tokens: int = attrs.field(default=0, validator=check.int32)
    completion_tokens: int = attrs.field(default=0, validator=check.int32)
    step_count: int = attrs.field(default=0, validator=check.int32)
    duration_ms: int = attrs.field(default=0, validator=check.int32)
    data_bytes_carried: int = attrs.field(default=0, validator=check.int64)


@attrs.frozen
class CompactionCheckpoint:
    """Marks where a compacted history resumes: steps before ``retain_from_step`` are summarized.

    Kept as the ``tool_args`` of a ``summary`` step, in the JSON form
    ``{"retain_from_step": N}``.
    """

    retain_from_step: int = attrs.field(validator=check.int32)

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


class _Labels(Mapping[str, str]):
    """A session's labels: a read-only, hashable mapping (what ``SessionInfo.labels`` holds)."""

    __slots__ = ("_pairs",)

    def __init__(self, pairs: dict[str, str]) -> None:
        self._pairs = pairs

    def __getitem__(self, key: str) -> str:
        return self._pairs[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._pairs)

    def __len__(self) -> int:
        return len(self._pairs)

    def __hash__(self) -> int:
        return hash(frozenset(self._pairs.items()))

    def __repr__(self) -> str:
        return repr(self._pairs)


_NO_LABELS = _Labels({})


def _to_labels(value: object) -> object:
    if value is None or isinstance(value, _Labels):
        return _NO_LABELS if value is None else value
    if isinstance(value, Mapping):
        return _Labels(validate_labels(value)) if value else _NO_LABELS
    return value  # not a mapping: the validator names it


def _labels(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, _Labels):
        validate_labels(value, attribute.name)


@attrs.frozen
class SessionInfo:
    """One session's identity, latest run, times and labels, as listings return it.

    ``status`` is the latest run's status (``None`` before any ``finalize``);
    ``step_count`` totals ``FinalizeSummary.step_count`` over every finalized
    run. ``created_at`` is the first write through the session store,
    ``updated_at`` the latest, both aware UTC. ``labels`` is a read-only
    mapping (empty when the session has none, or the store keeps none).

    Raises:
        TypeError, ValueError: a field breaks its rule (``labels``: at most 32
            pairs of non-empty text of at most 256 UTF-8 bytes each).
    """

    id: str = attrs.field(validator=check.session_id)
    status: RunStatus | None = attrs.field(
        converter=to_status, validator=attrs.validators.optional(check.member_of(RunStatus))
    )
    step_count: int = attrs.field(validator=check.int64)
    created_at: datetime = attrs.field(converter=check.to_utc, validator=check.aware_datetime)
    updated_at: datetime = attrs.field(converter=check.to_utc, validator=check.aware_datetime)
    labels: Mapping[str, str] = attrs.field(
        default=None, converter=_to_labels, validator=_labels, kw_only=True
    )


@attrs.frozen
class SessionPage:
    """One page of ``page_sessions``: its sessions, and the cursor of the next page.

    ``cursor`` is ``None`` on the last page; pass it back (to any handle onto
    the same backend) for the next one. Only the store that made a cursor
    understands it.
    """

    sessions: tuple[SessionInfo, ...] = attrs.field(
        converter=check.to_tuple, validator=check.tuple_of(SessionInfo)
    )
    cursor: str | None = attrs.field(
        default=None, validator=attrs.validators.optional(check.key_text)
    )
