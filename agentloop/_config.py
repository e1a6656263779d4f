"""The loop's settings and the result of one run."""

from __future__ import annotations

import math
from typing import Any

import attrs

from agentloop._types import RunStatus
from agentloop._validate import check_int, check_text, preview


def _text(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    check_text(value, attribute.name, allow_nul=False)


def _positive(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    check_int(value, attribute.name, minimum=1)


def _optional_positive(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None:
        _positive(inst, attribute, value)


def _count(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    check_int(value, attribute.name)


def _check_seconds(value: object, field: str, hint: str = "") -> None:
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise TypeError(f"{field} must be a number of seconds, got {preview(value)}")
    # inf is refused too: an unbounded deadline must be asked for, not typed by accident
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{field} must be > 0 seconds and finite{hint}, got {value!r}")


def _seconds(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    _check_seconds(value, attribute.name)


def _optional_seconds(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None:
        _check_seconds(value, attribute.name, " (None for no limit)")


@attrs.frozen
class LoopConfig:
    """How a :class:`Loop` runs.

    - ``model``: the model name sent in each request, unless the session names one.
    - ``max_iterations``: model calls per run before it stops with ``max_iterations``.
    - ``history_window``: how many stored steps a run loads (``last_n``).
    - ``token_budget``: prompt + completion tokens per run (compaction included);
      once reached, no further model call is made (``budget_exhausted``).
    - ``run_timeout``: seconds per run, from the moment it holds its session
      lock; when it expires the run stops with ``timeout``. ``None``: no limit.
    - ``finalize_timeout``: seconds allowed to record a run that was cancelled,
      timed out or failed (the shielded ``finalize`` must always be bounded).

    Raises:
        TypeError: a field has the wrong type (``bool`` is not a number here).
        ValueError: a count < 1, or a duration <= 0, NaN or infinite.
    """

    model: str = attrs.field(default="", validator=_text)
    max_iterations: int = attrs.field(default=20, validator=_positive)
    history_window: int = attrs.field(default=80, validator=_positive)
    token_budget: int | None = attrs.field(default=None, validator=_optional_positive)
    run_timeout: float | None = attrs.field(default=None, validator=_optional_seconds)
    finalize_timeout: float = attrs.field(default=5.0, validator=_seconds)


def _status(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, RunStatus):
        raise TypeError(f"{attribute.name} must be a RunStatus, got {preview(value)}")


@attrs.frozen
class RunResult:
    """How one run ended: its status, final text, steps appended, tokens and duration.

    ``text`` is the final response for ``completed`` and ``""`` otherwise;
    ``steps`` counts the steps this run appended.
    """

    status: RunStatus = attrs.field(validator=_status)
    text: str = attrs.field(validator=attrs.validators.instance_of(str))
    steps: int = attrs.field(validator=_count)
    prompt_tokens: int = attrs.field(validator=_count)
    completion_tokens: int = attrs.field(validator=_count)
    duration_ms: int = attrs.field(validator=_count)
