"""Argument checks shared by the value types and every store.

Each check raises ``TypeError`` for the wrong type, then ``ValueError`` for a
bad value, with a message naming the field, the rule and the value.
"""

from __future__ import annotations

import json
import math
from typing import Any

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

_PREVIEW = 60


def preview(value: object) -> str:
    """``repr(value)`` cut to a length that fits in one error line."""
    text = repr(value)
    if len(text) > _PREVIEW:
        return f"{text[:_PREVIEW]}...({len(text)} chars)"
    return text


def _type_name(value: object) -> str:
    return type(value).__name__


def has_lone_surrogate(text: str) -> bool:
    """Whether ``text`` holds a lone surrogate, which no UTF-8 store can encode."""
    if text.isascii():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def check_text(value: object, field: str, *, allow_nul: bool = True) -> str:
    """Check that ``value`` is a ``str`` every durable store can hold."""
    if not isinstance(value, str):
        raise TypeError(f"{field} must be a str, got {preview(value)} ({_type_name(value)})")
    if not allow_nul and "\x00" in value:
        raise ValueError(f"{field} must not contain NUL characters, got {preview(value)}")
    if has_lone_surrogate(value):
        raise ValueError(
            f"{field} must not contain lone surrogates (not encodable as UTF-8), "
            f"got {preview(value)}"
        )
    return value


def validate_session_id(value: object, field: str = "session_id") -> str:
    """Check a session id: a non-empty ``str`` without NUL or lone surrogates.

    Ids are opaque: nothing is trimmed or case-folded.

    Raises:
        TypeError: ``value`` is not a ``str``.
        ValueError: ``value`` is empty, holds NUL or a lone surrogate.
    """
    if isinstance(value, str) and value and value.isascii() and "\x00" not in value:
        return value  # the common case, checked without the slower path below
    check_text(value, field, allow_nul=False)
    if not value:
        raise ValueError(f"{field} must be a non-empty str, got ''")
    return value  # type: ignore[return-value]


def check_int(value: object, field: str, *, minimum: int = 0, maximum: int = INT32_MAX) -> int:
    """Check an ``int`` (``bool`` refused) within ``[minimum, maximum]``."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{field} must be an int, got {preview(value)} ({_type_name(value)})")
    if not minimum <= value <= maximum:
        raise ValueError(f"{field} must be an int in [{minimum}, {maximum}], got {value!r}")
    return value


def validate_n(n: object, field: str = "n") -> int:
    """Check a window size: an ``int`` >= 1 (``bool`` refused).

    Raises:
        TypeError: ``n`` is not an ``int``, or is a ``bool``.
        ValueError: ``n`` < 1.
    """
    if not isinstance(n, int) or isinstance(n, bool):
        raise TypeError(f"{field} must be an int >= 1, got {preview(n)} ({_type_name(n)})")
    if n < 1:
        raise ValueError(f"{field} must be an int >= 1, got {n!r}")
    return n


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"number {text} is out of range for a double")
    return value


_DECODER = json.JSONDecoder(parse_constant=_refuse_constant, parse_float=_finite_float)


def _check_strings(value: Any, field: str) -> None:
    """Refuse decoded strings no store can keep (NUL: PostgreSQL jsonb; surrogates: UTF-8)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item or has_lone_surrogate(item):
                raise ValueError(
                    f"{field} must not encode NUL or lone surrogates in its strings, "
                    f"got {preview(item)}"
                )
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def parse_json(value: object, field: str) -> Any:
    """Check that ``value`` is JSON text every store can keep, and return it decoded.

    JSON here is strict RFC 8259: ``NaN``/``Infinity`` are refused, and so are
    numbers that overflow a double (``1e400``) and strings holding NUL or lone
    surrogates (escaped or not) — every store can keep and re-encode the rest.

    Raises:
        TypeError: ``value`` is not a ``str``.
        ValueError: ``value`` is not such JSON text.
    """
    check_text(value, field)
    assert isinstance(value, str)
    try:
        decoded = _DECODER.decode(value)
    except ValueError as exc:
        raise ValueError(f"{field} must be JSON text, got {preview(value)}: {exc}") from None
    except RecursionError:
        raise ValueError(
            f"{field} must be JSON text nested less deeply, got {preview(value)}"
        ) from None
    if "\\u" in value:  # only an escape can smuggle NUL or a surrogate into JSON text
        _check_strings(decoded, field)
    return decoded


def validate_json(value: object, field: str) -> str:
    """Check that ``value`` is JSON text every store can keep; see :func:`parse_json`."""
    parse_json(value, field)
    return value  # type: ignore[return-value]
