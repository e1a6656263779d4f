"""The checks themselves: one value, one field name, a clear error.

Each check raises ``TypeError`` for the wrong type, then ``ValueError`` for a
bad value, with a message naming the field, the rule and the value (at most
~60 characters of it, see :func:`preview`). Import them from
``agentloop._validate``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
SESSION_ID_MAX_BYTES = 1024
"""The longest session id, in UTF-8 bytes (DESIGN §1): every store indexes ids this long."""
OWNER_MAX_BYTES = 256
"""The longest lease owner, in UTF-8 bytes: host, pid and a run id fit with room to spare."""
SECONDS_MAX = INT32_MAX / 1000
"""The longest duration any seconds argument accepts: 2**31 - 1 ms (~24.8 days).

The most SQLite's ``busy_timeout`` and PostgreSQL's ``statement_timeout`` can
hold (a C ``int`` of milliseconds); one ceiling for every seconds argument, so
a value valid in one place is valid in all. ``None`` asks for no limit where
that is allowed.
"""
JSON_DEPTH_MAX = 100
"""How deeply a JSON value given as Python objects (a tool's schema) may nest."""

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
    """Check a session id: non-empty text of at most 1,024 UTF-8 bytes, no NUL or lone surrogate.

    Ids are opaque: nothing is trimmed or case-folded.

    Raises:
        TypeError: ``value`` is not a ``str``.
        ValueError: ``value`` is empty, longer than 1,024 UTF-8 bytes, or holds
            NUL or a lone surrogate.
    """
    if (
        isinstance(value, str)
        and value
        and value.isascii()  # then len() is the UTF-8 byte count
        and len(value) <= SESSION_ID_MAX_BYTES
        and "\x00" not in value
    ):
        return value  # the common case, checked without the slower path below
    text = check_text(value, field, allow_nul=False)
    if not text:
        raise ValueError(f"{field} must be a non-empty str, got ''")
    size = len(text.encode("utf-8"))
    if size > SESSION_ID_MAX_BYTES:
        raise ValueError(
            f"{field} must be at most {SESSION_ID_MAX_BYTES} UTF-8 bytes, "
            f"got {size} bytes: {preview(text)}"
        )
    return text


def validate_owner(value: object, field: str = "owner") -> str:
    """Check a lease owner: a non-empty ``str`` of at most 256 UTF-8 bytes, without NUL.

    Raises:
        TypeError: ``value`` is not a ``str``.
        ValueError: ``value`` is empty, too long, or holds NUL or a lone surrogate.
    """
    check_text(value, field, allow_nul=False)
    assert isinstance(value, str)
    if not value:
        raise ValueError(f"{field} must be a non-empty str, got ''")
    size = len(value.encode("utf-8"))
    if size > OWNER_MAX_BYTES:
        raise ValueError(
            f"{field} must be at most {OWNER_MAX_BYTES} UTF-8 bytes, "
            f"got {size} bytes: {preview(value)}"
        )
    return value


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


def check_seconds(
    value: object, field: str, *, minimum: float = 0.0, none_allowed: bool = False
) -> float:
    """Check a duration: finite seconds > 0 (or >= ``minimum``) and <= ``SECONDS_MAX``.

    ``bool`` is not a number here; infinity is refused too: an unbounded wait
    must be asked for (``None`` where ``none_allowed``), not typed by accident.
    ``none_allowed`` only adds "or None" to the messages: pass ``None`` past
    this check (``attrs.validators.optional``) where it means "no limit".

    Raises:
        TypeError: ``value`` is not an ``int`` or ``float``.
        ValueError: ``value`` is NaN, infinite, out of range.
    """
    or_none = " or None (no limit)" if none_allowed else ""
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise TypeError(
            f"{field} must be a number of seconds{or_none}, "
            f"got {preview(value)} ({_type_name(value)})"
        )
    low_ok = value >= minimum if minimum > 0 else value > 0
    if not (low_ok and value <= SECONDS_MAX):  # NaN fails both comparisons
        low = f">= {minimum:g}" if minimum > 0 else "> 0"
        raise ValueError(
            f"{field} must be a finite number of seconds {low} and <= {SECONDS_MAX}{or_none}, "
            f"got {value!r}"
        )
    return float(value)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"number {text} is out of range for a double")
    return value


_DECODER = json.JSONDecoder(parse_constant=_refuse_constant, parse_float=_finite_float)
_SCAN: Callable[[str, int], tuple[Any, int]] = _DECODER.scan_once  # type: ignore[attr-defined]


def _decode(text: str) -> Any:
    """``_DECODER.decode(text)``, with the same errors; an object or array with no
    whitespace around it skips the two whitespace scans (a third of a small decode)."""
    if text and text[0] in "{[" and text[-1] in "}]":
        try:
            decoded, end = _SCAN(text, 0)
        except StopIteration:
            pass  # decode() below raises the error
        else:
            if end == len(text):
                return decoded
    return _DECODER.decode(text)


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
    text = check_text(value, field)
    try:
        decoded = _decode(text)
    except ValueError as exc:
        raise ValueError(f"{field} must be JSON text, got {preview(text)}: {exc}") from None
    except RecursionError:
        raise ValueError(
            f"{field} must be JSON text nested less deeply, got {preview(text)}"
        ) from None
    if "\\u" in text:  # only an escape can smuggle NUL or a surrogate into JSON text
        _check_strings(decoded, field)
    return decoded


def validate_json(value: object, field: str) -> str:
    """Check that ``value`` is JSON text every store can keep, and return it unchanged.

    JSON here is strict RFC 8259: ``NaN``/``Infinity`` are refused, and so are
    numbers that overflow a double (``1e400``) and strings holding NUL or lone
    surrogates (escaped or not); every store can keep and re-encode the rest.

    Raises:
        TypeError: ``value`` is not a ``str``.
        ValueError: ``value`` is not such JSON text; the message names ``field``.
    """
    if value == "{}":
        return "{}"  # the default of every JSON field, checked without parsing it
    if value.__class__ is str and value.isascii() and "\\u" not in value:
        # No lone surrogate and no escape to decode into NUL or one: only the syntax
        # is left to check, without parse_json's layers.
        try:
            _decode(value)
        except (ValueError, RecursionError):
            pass  # parse_json below raises the error, worded as always
        else:
            return value
    parse_json(value, field)
    return value  # type: ignore[return-value]


_JSON_SCALARS = (str, int, float, bool, type(None))


def check_json_value(value: object, field: str, *, max_depth: int = JSON_DEPTH_MAX) -> None:
    """Check that ``value`` is made only of JSON: ``dict`` with ``str`` keys, ``list``/``tuple``,
    ``str``, ``int``, finite ``float``, ``bool`` and ``None``, nested at most ``max_depth`` deep.

    Errors name the path inside ``value``, e.g. ``parameters['properties']['x']``.

    Raises:
        TypeError: a part of ``value`` is of a non-JSON type (a set, bytes, a
            datetime, ...) or a key is not a ``str``.
        ValueError: a float is NaN or infinite, a string holds a lone
            surrogate, a container holds itself (a cycle) or nests too deeply.
    """
    _check_json_part(value, field, 0, max_depth, set())


def _check_json_part(value: object, path: str, depth: int, max_depth: int, open_: set[int]) -> None:
    if isinstance(value, _JSON_SCALARS):
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(
                f"{path} must be a finite number (JSON has no NaN or Infinity), got {value!r}"
            )
        if isinstance(value, str) and has_lone_surrogate(value):
            raise ValueError(f"{path} must not contain lone surrogates, got {preview(value)}")
        return
    if not isinstance(value, dict | list | tuple):
        raise TypeError(
            f"{path} must be JSON (dict, list, str, int, float, bool or None), "
            f"got {preview(value)} ({_type_name(value)})"
        )
    if depth >= max_depth:
        raise ValueError(f"{path} nests deeper than {max_depth} levels")
    if id(value) in open_:
        raise ValueError(f"{path} contains itself (a cycle), which JSON cannot encode")
    open_.add(id(value))
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(
                    f"{path} keys must be str (JSON object keys), "
                    f"got {preview(key)} ({_type_name(key)})"
                )
            _check_json_part(item, f"{path}[{preview(key)}]", depth + 1, max_depth, open_)
    else:
        for index, item in enumerate(value):
            _check_json_part(item, f"{path}[{index}]", depth + 1, max_depth, open_)
    open_.discard(id(value))
