"""The argument checks of batch and revision calls, shared by every store.

Each checks the whole argument before a store touches anything, so a bad
item anywhere refuses the whole call, naming its position.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

from agentloop._checks import INT64_MAX, check_int, preview, validate_session_id

if TYPE_CHECKING:
    from agentloop._types import RunStep


def check_steps(steps: object) -> list[RunStep]:
    """A fresh list of the batch's steps, every one checked before anything is written.

    Raises:
        TypeError: ``steps`` is not a sequence (a ``str`` neither), or the item
            at some position is not a ``RunStep`` (the message names it:
            ``steps[3] must be a RunStep``).
    """
    kind = type(steps)
    if (kind is not list and kind is not tuple) and (  # the usual batches skip the ABC check
        not isinstance(steps, Sequence) or isinstance(steps, str | bytes)
    ):
        raise TypeError(f"steps must be a sequence of RunStep, got {preview(steps)}")
    step_type = _run_step()
    batch: list[RunStep] = list(cast("Sequence[RunStep]", steps))
    for step in batch:
        if type(step) is not step_type and not isinstance(step, step_type):
            position = next(i for i, item in enumerate(batch) if not isinstance(item, step_type))
            raise TypeError(f"steps[{position}] must be a RunStep, got {preview(step)}")
    return batch


_RUN_STEP: list[type[RunStep]] = []


def _run_step() -> type[RunStep]:
    """``RunStep``, imported on first use: ``agentloop._types`` imports
    ``agentloop._validate``, which re-exports this module."""
    if not _RUN_STEP:
        from agentloop._types import RunStep

        _RUN_STEP.append(RunStep)
    return _RUN_STEP[0]


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
        validate_session_id(session_id, f"session_ids[{position}]")
    return ids


def check_revision(revision: object) -> int:
    """Check a revision passed to ``update_data_if``: an int in ``[0, 2**63 - 1]``.

    Raises:
        TypeError: ``revision`` is not an ``int`` (``bool`` refused).
        ValueError: ``revision`` is negative or past int64.
    """
    return check_int(revision, "revision", minimum=0, maximum=INT64_MAX)
