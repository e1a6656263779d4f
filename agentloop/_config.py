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


LEASE_TTL_MIN = 0.03
"""The shortest ``lease_ttl`` (seconds): renewals come every ``lease_ttl / 3``, so a
run never renews more often than every 10 ms, however short a TTL is asked for."""


def _lease_ttl(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    check.check_seconds(value, attribute.name)
    if value < LEASE_TTL_MIN:  # type: ignore[operator]
        raise ValueError(
            f"{attribute.name} must be >= {LEASE_TTL_MIN} seconds (the loop renews every "
            f"lease_ttl / 3), got {value!r}"
        )


def _keep_steps(instance: LoopConfig, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is None:
        return
    check.check_int(value, attribute.name, minimum=1)
    if value < instance.history_window:  # type: ignore[operator]
        raise ValueError(
            f"{attribute.name} must be >= history_window ({instance.history_window}) so that "
            f"replay and retention agree, got {value!r}"
        )


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
      At least 0.03 s, so renewals come at most every 10 ms.
    - ``lease_wait``: seconds a run waits for a session lease another owner
      holds, before ``run_timeout`` starts, then raises ``SessionBusyError``;
      ``0`` tries once and never waits.
    - ``keep_steps``: when set, a ``completed`` run prunes its session to its
      newest ``keep_steps`` steps afterwards (``prune_steps``, through the run's
      fenced view), so the store keeps what replay reads and no more; at least
      ``history_window``. Ignored, with one ``LoopWarning`` per ``Loop``, when
      the step store has no ``SupportsPrune``.
    - ``strict``: a tool error (an unknown tool, arguments that are not a JSON
      object, a tool that raised or returned no text, working memory left
      unstorable) or a ``LoopWarning`` raised by the run itself (unreadable
      session data, a failed compaction) ends the run: an ``error`` step naming
      it, status ``error``. Off, those become ``Error:`` tool results the model
      sees (or warnings) and the run goes on. For eval suites, where a broken
      tool must fail the eval. Warnings from the lease's renewal and release,
      outside the run's own work, are reported either way.

    Raises:
        TypeError: a field has the wrong type (``bool`` is not a number here).
        ValueError: a count < 1, or a duration <= 0 (< 0 for ``lease_wait``),
            NaN, infinite or above ``SECONDS_MAX`` (2**31 - 1 ms, about 24.8 days);
            ``lease_ttl`` below 0.03 s; ``keep_steps`` below
            ``history_window``.
    """

    model: str = attrs.field(default="", validator=check.key_text)
    max_iterations: int = attrs.field(default=20, validator=check.positive_int32)
    history_window: int = attrs.field(default=80, validator=check.positive_int32)
    token_budget: int | None = attrs.field(
        default=None, validator=attrs.validators.optional(check.positive_int32)
    )
    run_timeout: float | None = attrs.field(default=None, validator=check.seconds_or_none)
    finalize_timeout: float = attrs.field(default=5.0, validator=check.seconds)
    lease_ttl: float = attrs.field(default=30.0, validator=_lease_ttl)
    lease_wait: float = attrs.field(default=10.0, validator=_seconds_or_zero)
    keep_steps: int | None = attrs.field(default=None, validator=_keep_steps)
    strict: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))


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
