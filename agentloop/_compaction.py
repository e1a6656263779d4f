"""Compaction: a summary of older history, and the protocol of what produces one."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import attrs

from agentloop import _validate as check

if TYPE_CHECKING:
    from agentloop._model import Message


@attrs.frozen
class Compaction:
    """What a :class:`Compactor` returns.

    ``summary`` replaces ``messages[:retained_from]`` of the messages it was
    given; ``messages[retained_from]`` is the first message kept verbatim
    (``retained_from == len(messages)`` keeps none). An empty ``summary``
    means "nothing to compact". The tokens are added to the run's totals.

    Raises:
        TypeError, ValueError: a field has the wrong type or a negative value.
    """

    summary: str = attrs.field(validator=check.text)
    retained_from: int = attrs.field(validator=check.int32)
    prompt_tokens: int = attrs.field(default=0, validator=check.int32)
    completion_tokens: int = attrs.field(default=0, validator=check.int32)


@runtime_checkable
class Compactor(Protocol):
    """Summarizes older history; the loop calls it once per run, after the ``user`` step.

    The summary is stored as a ``summary`` step and replayed first by later
    runs, but only while that step is within the last ``history_window``
    steps: rehydration reads nothing older. Once more steps follow it, later
    runs see un-summarized history again, so a compactor should expect to be
    handed history without a leading summary and summarize it anew.
    """

    async def compact(self, messages: Sequence[Message]) -> Compaction:
        """Summarize a prefix of ``messages`` (the rehydrated history plus the new user message).

        When the history starts with an earlier summary (a ``system`` message),
        a new summary supersedes it: fold it in (with ``retained_from=0`` too,
        the earlier summary is dropped). An exception, or a
        ``retained_from`` outside ``[0, len(messages)]``, is reported as a
        :class:`LoopWarning` and the run goes on uncompacted.
        """
        ...
