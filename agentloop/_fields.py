"""The checks of :mod:`agentloop._checks` as attrs validators and converters.

Compose with ``attrs.validators.optional`` where ``None`` is allowed. Import
them from ``agentloop._validate``.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Collection
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import attrs

from agentloop._checks import (
    INT32_MAX,
    INT64_MAX,
    check_int,
    check_seconds,
    check_text,
    preview,
    validate_json,
    validate_session_id,
)

Validator = Callable[[Any, "attrs.Attribute[Any]", Any], None]
E = TypeVar("E", bound=enum.StrEnum)


def _type_name(value: object) -> str:
    return type(value).__name__


def text(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """A ``str`` a store can hold; NUL allowed (content, prompts, arguments)."""
    if value.__class__ is str and value.isascii():
        return  # the common case: ASCII holds no lone surrogate
    check_text(value, attribute.name)


def key_text(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """A ``str`` without NUL (key-like text: model names), possibly empty."""
    check_text(value, attribute.name, allow_nul=False)


def name(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """A non-empty ``str`` without NUL (tool names, call ids)."""
    if not check_text(value, attribute.name, allow_nul=False):
        raise ValueError(f"{attribute.name} must be a non-empty str, got ''")


def session_id(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """A session id; see :func:`validate_session_id`."""
    validate_session_id(value, attribute.name)


def json_text(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """JSON text every store can keep; see :func:`parse_json`."""
    validate_json(value, attribute.name)


def int32(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """An ``int`` in ``[0, 2**31 - 1]``."""
    if value.__class__ is int and 0 <= value <= INT32_MAX:
        return  # the common case, without a call (bool's class is not int)
    check_int(value, attribute.name)


def positive_int32(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """An ``int`` in ``[1, 2**31 - 1]``."""
    check_int(value, attribute.name, minimum=1)


def int64(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """An ``int`` in ``[0, 2**63 - 1]``."""
    check_int(value, attribute.name, maximum=INT64_MAX)


def seconds(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """A duration; see :func:`check_seconds`."""
    check_seconds(value, attribute.name)


def _seconds_or_none(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    check_seconds(value, attribute.name, none_allowed=True)


seconds_or_none: Validator = attrs.validators.optional(_seconds_or_none)
"""A duration, or ``None`` for no limit."""


def schema(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """A ``dict`` (a JSON schema; its content is checked by :func:`check_json_value`)."""
    if not isinstance(value, dict):
        raise TypeError(f"{attribute.name} must be a dict (a JSON schema), got {preview(value)}")


def one_of(choices: Collection[str]) -> Validator:
    """A ``str`` among ``choices``."""
    allowed = ", ".join(choices)

    def check(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if check_text(value, attribute.name) not in choices:
            raise ValueError(f"{attribute.name} must be one of {allowed}, got {preview(value)}")

    return check


def to_member(enum_type: type[E], value: object) -> object:
    """Convert a member's value (``"completed"``) into the member; anything else is kept.

    For a named converter (``def _to_status(v): return to_member(RunStatus, v)``):
    an unknown value is left for :func:`member_of`, which names the field.
    """
    if isinstance(value, str) and not isinstance(value, enum_type):
        return enum_type._value2member_map_.get(value, value)
    return value


def member_of(enum_type: type[enum.StrEnum]) -> Validator:
    """A member of ``enum_type`` (after :func:`to_member`).

    An unknown ``str`` is a ``ValueError`` listing the values; anything else
    that is not a member is a ``TypeError``.
    """
    allowed = ", ".join(member.value for member in enum_type)

    def check(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if isinstance(value, enum_type):
            return
        if isinstance(value, str):
            raise ValueError(f"{attribute.name} must be one of {allowed}, got {preview(value)}")
        raise TypeError(
            f"{attribute.name} must be a {enum_type.__name__} (one of {allowed}), "
            f"got {preview(value)} ({_type_name(value)})"
        )

    return check


def to_tuple(value: object) -> object:
    """A converter turning a ``list`` into a ``tuple``, so the stored value is immutable."""
    return tuple(value) if isinstance(value, list) else value


def tuple_of(kind: type) -> Validator:
    """A ``tuple`` whose items are all ``kind``."""

    def check(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if not isinstance(value, tuple):
            raise TypeError(f"{attribute.name} must be a tuple, got {preview(value)}")
        for item in value:
            if not isinstance(item, kind):
                raise TypeError(
                    f"{attribute.name} must hold only {kind.__name__} values, got {preview(item)}"
                )

    return check


def to_utc(value: object) -> object:
    """A converter holding an aware ``datetime`` in UTC (same instant); anything else is kept."""
    if isinstance(value, datetime) and value.tzinfo is not UTC and value.utcoffset() is not None:
        try:
            return value.astimezone(UTC)
        except OverflowError:
            return value  # outside UTC's range: left for aware_datetime, which names the field
    return value


def aware_datetime(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """An aware ``datetime`` within range once in UTC (after :func:`to_utc`)."""
    if not isinstance(value, datetime):
        raise TypeError(f"{attribute.name} must be a datetime, got {preview(value)}")
    if value.tzinfo is UTC:
        return
    if value.utcoffset() is None:
        raise ValueError(f"{attribute.name} must be timezone-aware, got {value!r}")
    if value.utcoffset() != timedelta(0):
        raise ValueError(
            f"{attribute.name} must be within datetime's range once converted to UTC, got {value!r}"
        )
