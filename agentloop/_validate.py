"""The one home of argument checks, field validators and trusted construction.

Every check of a field or argument lives here: text, key text, names, session
ids, lease owners, int32/int64, seconds, JSON text and values, enum members,
revisions and batches of ids. Each raises ``TypeError`` for the wrong type,
then ``ValueError`` for a bad value, with a message naming the field, the rule
and at most ~60 characters of the value (:func:`preview`). The same checks
come in two forms: plain functions (``check_*``, ``validate_*``) for
arguments, and attrs validators and converters (``text``, ``session_id``,
``int32``, ...) for the value types' fields. :func:`trusted_builder` builds a
value from fields checked already, without checking them again.

Text rules differ on purpose (``docs/decisions.md``): NUL is refused in ids
and names (``key_text``, ``name``, session ids) and allowed in content
(``text``); lone surrogates are refused everywhere.
"""

from __future__ import annotations

import enum
import json
import math
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import attrs

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
SESSION_ID_MAX_BYTES = 1024
"""The longest session id, in UTF-8 bytes: every store indexes ids this long."""
OWNER_MAX_BYTES = 256
"""The longest lease owner, in UTF-8 bytes: host, pid and a run id fit with room to spare."""
SECONDS_MAX = INT32_MAX / 1000
"""The longest duration a seconds argument accepts: 2**31 - 1 ms (~24.8 days).

(``expire_sessions``' ``idle_for`` has its own bound, :data:`IDLE_FOR_MAX`.)

The most SQLite's ``busy_timeout`` and PostgreSQL's ``statement_timeout`` can
hold (a C ``int`` of milliseconds); one ceiling for every seconds argument, so
a value valid in one place is valid in all. ``None`` asks for no limit where
that is allowed.
"""
LABELS_MAX = 32
"""The most labels one session may carry."""
LABEL_MAX_BYTES = 256
"""The longest label key or value, in UTF-8 bytes."""
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
    return _short_text(value, field, SESSION_ID_MAX_BYTES)


def _short_text(value: object, field: str, max_bytes: int) -> str:
    """Non-empty text without NUL of at most ``max_bytes`` UTF-8 bytes (ids, labels)."""
    text = check_text(value, field, allow_nul=False)
    if not text:
        raise ValueError(f"{field} must be a non-empty str, got ''")
    size = len(text.encode("utf-8"))
    if size > max_bytes:
        raise ValueError(
            f"{field} must be at most {max_bytes} UTF-8 bytes, got {size} bytes: {preview(text)}"
        )
    return text


def _label_text(value: object, field: str) -> str:
    return _short_text(value, field, LABEL_MAX_BYTES)


def validate_labels(labels: object, field: str = "labels") -> dict[str, str]:
    """Check a session's labels; a fresh ``dict`` of them.

    At most 32 pairs; each key and value non-empty text of at most 256 UTF-8
    bytes, without NUL or lone surrogates (checked like session ids, and kept
    verbatim: nothing is trimmed or case-folded).

    Raises:
        TypeError: ``labels`` is not a mapping, or a key or value is not a ``str``.
        ValueError: more than 32 pairs, or a key or value breaks the text rule
            (the message names it: ``labels['team']``).
    """
    if not isinstance(labels, Mapping):
        raise TypeError(f"{field} must be a mapping of str to str, got {preview(labels)}")
    checked: dict[str, str] = {}
    for key, value in labels.items():
        name = _label_text(key, f"{field} key")
        checked[name] = _label_text(value, f"{field}[{name!r}]")
    if len(checked) > LABELS_MAX:
        raise ValueError(f"{field} must hold at most {LABELS_MAX} pairs, got {len(checked)}")
    return checked


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
    value: object,
    field: str,
    *,
    minimum: float = 0.0,
    maximum: float = SECONDS_MAX,
    none_allowed: bool = False,
) -> float:
    """Check a duration: finite seconds > 0 (or >= ``minimum``) and <= ``maximum``
    (``SECONDS_MAX`` unless given).

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
    if not (low_ok and value <= maximum):  # NaN fails both comparisons
        low = f">= {minimum:g}" if minimum > 0 else "> 0"
        raise ValueError(
            f"{field} must be a finite number of seconds {low} and <= {maximum}{or_none}, "
            f"got {value!r}"
        )
    return float(value)


IDLE_FOR_MAX = 100 * 365.25 * 86_400
"""The longest ``idle_for`` ``expire_sessions`` accepts: 100 years, in seconds.

Retention is set in days or months, far past ``SECONDS_MAX`` (a bound that
exists for timeouts the databases take in milliseconds); a cutoff this far
back is still a valid time on every store.
"""


def check_idle_for(value: object) -> float:
    """Check ``expire_sessions``' ``idle_for``: finite seconds > 0 and <= ``IDLE_FOR_MAX``."""
    return check_seconds(value, "idle_for", maximum=IDLE_FOR_MAX)


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


Validator = Callable[[Any, "attrs.Attribute[Any]", Any], None]
E = TypeVar("E", bound=enum.StrEnum)


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
        try:
            return enum_type(value)
        except ValueError:
            return value
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


T = TypeVar("T")

_BUILDERS: dict[type, Callable[..., Any]] = {}
_UNSET = object()


def trusted_builder(cls: type[T]) -> Callable[..., T]:
    """A function building ``cls`` from checked values, skipping its converters and validators.

    The function takes the fields as ``cls(...)`` does (same names, order,
    defaults and factories) and sets the slots directly: several times faster
    than ``cls(...)``, for values that passed the same checks before — fields
    of another checked value, constants, rows a store reads back from its own
    schema. Never for a caller's values: nothing is checked, nothing
    converted. One function per class, built once and cached.

    Raises:
        TypeError: ``cls`` is not a slotted attrs class, or has a default that
            needs ``self`` (``attrs.Factory(..., takes_self=True)``).
    """
    builder = _BUILDERS.get(cls)
    if builder is None:
        builder = _BUILDERS[cls] = _compile(cls)
    return builder


def _compile(cls: type[T]) -> Callable[..., T]:
    if not attrs.has(cls) or "__slots__" not in cls.__dict__:
        raise TypeError(f"trusted_builder needs a slotted attrs class, got {cls!r}")
    scope: dict[str, Any] = {
        "_new": object.__new__,
        "_twin": _twin(cls),
        "_cls": cls,
        "_UNSET": _UNSET,
    }
    params: list[str] = []
    keyword_only: list[str] = []
    body: list[str] = []
    for index, field in enumerate(attrs.fields(cls)):
        arg = field.alias
        default = field.default
        if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
            if default.takes_self:
                raise TypeError(f"trusted_builder cannot fill {cls.__name__}.{field.name}")
            scope[f"_factory{index}"] = default.factory
            body.append(f"    if {arg} is _UNSET: {arg} = _factory{index}()")
            param = f"{arg}=_UNSET"
        elif default is attrs.NOTHING:
            param = arg
        else:
            scope[f"_default{index}"] = default
            param = f"{arg}=_default{index}"
        (keyword_only if field.kw_only else params).append(param)
        body.append(f"    self.{field.name} = {arg}")
    signature = ", ".join(params + (["*", *keyword_only] if keyword_only else []))
    source = (
        f"def build_{cls.__name__}({signature}):\n"
        "    self = _new(_twin)\n"
        + "\n".join(body)
        + "\n    self.__class__ = _cls\n    return self\n"
    )
    exec(source, scope)  # generated from field names only, as attrs itself does
    builder: Callable[..., T] = scope[f"build_{cls.__name__}"]
    return builder


def _twin(cls: type[T]) -> type[T]:
    """A subclass of ``cls`` adding no slot, whose attributes are set the plain way.

    The builder fills a value of it with plain attribute stores, then gives it its
    class (``__class__`` may change between layouts this alike): a slot set through
    its descriptor, past a frozen class's ``__setattr__``, costs several times more (a
    call through a method wrapper per field). Both ``__setattr__`` and ``__delattr__``
    are ``object``'s, so its stores take the interpreter's fast path for slots.
    """
    namespace = {
        "__slots__": (),
        "__setattr__": object.__setattr__,
        "__delattr__": object.__delattr__,
    }
    return type(f"_Trusted{cls.__name__}", (cls,), namespace)


def check_session_ids(session_ids: object) -> list[str]:
    """A fresh list of the ids asked for, every one checked before anything is read.

    Raises:
        TypeError: ``session_ids`` is not a sequence, or is a single ``str``,
            or an item is not a ``str`` (the message names its position).
        ValueError: an item is not a valid session id (named as ``session_ids[i]``).
    """
    if not isinstance(session_ids, Sequence) or isinstance(session_ids, str | bytes):
        raise TypeError(f"session_ids must be a sequence of str, got {preview(session_ids)}")
    ids = list(session_ids)
    for position, session_id in enumerate(ids):
        try:
            validate_session_id(session_id)
        except (TypeError, ValueError):
            # Named by position only when it fails: building the name costs more
            # than checking an id.
            validate_session_id(session_id, f"session_ids[{position}]")
    return ids


def check_revision(revision: object) -> int:
    """Check a revision passed to ``update_data_if``: an int in ``[0, 2**63 - 1]``.

    Raises:
        TypeError: ``revision`` is not an ``int`` (``bool`` refused).
        ValueError: ``revision`` is negative or past int64.
    """
    return check_int(revision, "revision", minimum=0, maximum=INT64_MAX)
