"""Typed events the loop reports to ``on_event``, and a collector for eval suites."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import attrs

from agentloop._types import FinalizeSummary, RunStep


@attrs.frozen
class RunStarted:
    """A run acquired its session and is about to load it."""

    session_id: str
    message: str


@attrs.frozen
class StepAppended:
    """A step was appended to the step store (emitted after ``append`` returned)."""

    step: RunStep


@attrs.frozen
class Compacted:
    """The compactor summarized history; its ``summary`` step was appended.

    ``retain_from_step`` is the first step index replayed verbatim after the summary.
    """

    session_id: str
    summary: str
    retain_from_step: int
    prompt_tokens: int
    completion_tokens: int


@attrs.frozen
class LoopWarning:
    """Something went wrong that the run survived or that its own exception would hide.

    E.g. a compaction error, session data that cannot be loaded, or a
    ``finalize`` that failed or was abandoned at ``finalize_timeout`` while the
    run was already ending with an exception or a cancellation.
    """

    session_id: str
    message: str


@attrs.frozen
class Finalized:
    """``finalize`` returned: ``summary`` is how the run was recorded."""

    session_id: str
    summary: FinalizeSummary


Event = RunStarted | StepAppended | Compacted | LoopWarning | Finalized
"""Every event type the loop emits."""

EventHandler = Callable[[Event], None]

E = TypeVar("E", RunStarted, StepAppended, Compacted, LoopWarning, Finalized)


class EventCollector:
    """An ``on_event`` handler that keeps every event, in order, for assertions.

    ``Loop(model, on_event=collector)``; then ``collector.events`` or
    ``collector.of_type(StepAppended)``.
    """

    def __init__(self) -> None:
        self.events: list[Event] = []

    def __call__(self, event: Event) -> None:
        """Record ``event``."""
        self.events.append(event)

    def of_type(self, kind: type[E]) -> list[E]:
        """The recorded events of type ``kind``, in order."""
        return [event for event in self.events if isinstance(event, kind)]

    def clear(self) -> None:
        """Forget every recorded event."""
        self.events.clear()
