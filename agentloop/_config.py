"""The loop's settings and the result of one run."""

from __future__ import annotations

from typing import Any

import attrs

from agentloop import _validate as check
from agentloop._types import RunStatus, to_status


def _seconds_or_zero(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """A duration that may be 0 (``lease_wait``: 0 means "try once, never wait")."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value == 0:
        return
    try:
        check.check_seconds(value, attribute.name)
    except ValueError:
        raise ValueError(
            f"{attribute.name} must be a finite number of seconds >= 0 and "
            f"<= {check.SECONDS_MAX}, got {value!r}"
        ) from None


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
      timed out or failed (the shielded ``finalize`` must always be bounded), and
      again to release the session's lease at the end of a leased run.
    - ``lease_ttl``: seconds a run's session lease lives unless renewed (stores
      with ``SupportsLease`` only); the loop renews it every ``lease_ttl / 3``.
    - ``lease_wait``: seconds a run waits for a session lease another owner
      holds, before ``run_timeout`` starts, then raises ``SessionBusyError``;
      ``0`` tries once and never waits.

    Raises:
        TypeError: a field has the wrong type (``bool`` is not a number here).
        ValueError: a count < 1, or a duration <= 0 (< 0 for ``lease_wait``),
            NaN, infinite or above ``SECONDS_MAX`` (2**31 - 1 ms, about 24.8 days).
    """

    model: str = attrs.field(default="", validator=check.key_text)
    max_iterations: int = attrs.field(default=20, validator=check.positive_int32)
    history_window: int = attrs.field(default=80, validator=check.positive_int32)
    token_budget: int | None = attrs.field(
        default=None, validator=attrs.validators.optional(check.positive_int32)
    )
    run_timeout: float | None = attrs.field(default=None, validator=check.seconds_or_none)
    finalize_timeout: float = attrs.field(default=5.0, validator=check.seconds)
    lease_ttl: float = attrs.field(default=30.0, validator=check.seconds)
    lease_wait: float = attrs.field(default=10.0, validator=_seconds_or_zero)


@attrs.frozen
class RunResult:
    """How one run ended: its status, final text, steps appended, tokens and duration.

    ``text`` is the final response for ``completed`` and ``""`` otherwise;
    ``steps`` counts the steps this run appended.
    """

    status: RunStatus = attrs.field(converter=to_status, validator=check.member_of(RunStatus))
    text: str = attrs.field(validator=attrs.validators.instance_of(str))
    steps: int = attrs.field(validator=check.int32)
    prompt_tokens: int = attrs.field(validator=check.int32)
    completion_tokens: int = attrs.field(validator=check.int32)
    duration_ms: int = attrs.field(validator=check.int32)
