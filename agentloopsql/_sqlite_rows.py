"""``steps`` rows back into ``RunStep`` values, without re-validating the rows the store wrote.

Every row ``SqliteStore`` inserts came from a ``RunStep`` that passed its
validators, so reading it back through them again (about 4 us a step) buys
nothing. But the file is shared: another program, or a hand-written
``INSERT``, can put a row there that was never valid. So trust is decided
per row, on what the row holds, never on where it came from (:func:`steps`):

- each integer field is an ``int`` in ``RunStep``'s range, ``step_type`` is
  one of :class:`~agentloop.StepType`'s values, ``content`` is a ``str`` and
  ``created_us`` is within ``datetime``'s range — the same rules as the
  validators, checked inline without a call each;
- ``tool_args`` is JSON text by ``RunStep``'s own rule
  (:func:`~agentloop._validate.validate_json`, which takes ``"{}"`` at once);
- the session id is the one the query asked for (already validated), and
  text read through ``sqlite3`` is always valid UTF-8 (no lone surrogate).

A row that passes all of these is built by
:func:`~agentloop._validate.trusted_builder`; any other row goes through
``RunStep(...)`` and raises what its validators say, exactly as before.
(These checks run in Python: the same rules as a SQL expression in the
query cost SQLite more than they save.)
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from agentloop import RunStep, StepType, validate_json
from agentloop._shared import INT32_MAX, trusted_builder
from agentloopsql import _codec

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)  # times an int: cheaper than timedelta(0, 0, n)
MICROS_MIN = _codec.to_micros(datetime.min.replace(tzinfo=UTC))
MICROS_MAX = _codec.to_micros(datetime.max.replace(tzinfo=UTC))


READ_COLUMNS = (
    "step_index, step_type, content, tool_args, duration_ms, prompt_tokens, "
    "completion_tokens, created_us"
)
"""What a read selects, in the order :func:`steps` takes: the fields but the session id."""

_KINDS = {kind.value: kind for kind in StepType}
_build = trusted_builder(RunStep)


def _checked(session_id: str, row: tuple[Any, ...]) -> RunStep:
    """The row through ``RunStep``'s validators: raises what they say about it."""
    return RunStep(
        session_id=session_id,
        step_index=row[0],
        step_type=row[1],
        content=row[2],
        tool_args=row[3],
        duration_ms=row[4],
        prompt_tokens=row[5],
        completion_tokens=row[6],
        created_at=_codec.from_micros(row[7]),
    )


def _json_ok(text: object) -> bool:
    try:
        validate_json(text, "tool_args")
    except (TypeError, ValueError):
        return False
    return True


def steps(session_id: str, rows: list[tuple[Any, ...]]) -> list[RunStep]:
    """The ``RunStep`` of each row of :data:`READ_COLUMNS`, in order, of the session asked for.

    Raises:
        TypeError, ValueError, OverflowError: a row breaks ``RunStep``'s rules
            (it was not written by this store); the message names the field.
    """
    found = []
    for row in rows:
        index, kind, content, args, duration, prompt, completion, micros = row
        step_type = _KINDS.get(kind)
        if (
            step_type is not None
            and index.__class__ is duration.__class__ is prompt.__class__ is int
            and completion.__class__ is micros.__class__ is int
            and 0 <= index <= INT32_MAX
            and 0 <= duration <= INT32_MAX
            and 0 <= prompt <= INT32_MAX
            and 0 <= completion <= INT32_MAX
            and MICROS_MIN <= micros <= MICROS_MAX
            and content.__class__ is str
            and (args == "{}" or _json_ok(args))
        ):
            created = _EPOCH + _MICROSECOND * micros
            found.append(
                _build(
                    session_id,
                    index,
                    step_type,
                    content,
                    args,
                    duration,
                    prompt,
                    completion,
                    created,
                )
            )
        else:
            found.append(_checked(session_id, row))
    return found
