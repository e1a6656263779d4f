"""Batches for every store: ``append_all`` and ``get_all``.

``append_all`` and ``get_all`` give a store without the batch capabilities
(``SupportsAppendMany``, ``SupportsGetMany``) a working default: one call at a
time, in order. Only the capability is atomic; the fallback is not. The
argument checks live in :mod:`agentloop._batch_checks`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentloop._backend import checkpoint
from agentloop._batch_checks import check_session_ids, check_steps
from agentloop._protocols import SupportsAppendMany, SupportsGetMany

if TYPE_CHECKING:
    from collections.abc import Sequence

    from agentloop._protocols import SessionStore, StepStore
    from agentloop._types import RunStep, Session


async def append_all(store: StepStore, steps: Sequence[RunStep]) -> None:
    """Append ``steps`` in order: one ``append_many`` call when the store has it.

    With ``SupportsAppendMany`` the batch is all or nothing, as the store
    guarantees. Without it, the steps are appended one call at a time, in
    order, and this is **not atomic**: an error or a cancellation part way
    leaves the steps before it stored and the rest not. Every step is checked
    before the first call either way.

    Raises:
        TypeError: ``steps`` is not a sequence of ``RunStep`` (naming the
            position of the first bad item); nothing was written.
        Whatever the store's ``append``/``append_many`` raises.

    **Cancellation**: with the capability, as the store's ``append_many`` (all or
    nothing); without it, a prefix of the steps may have been appended.
    """
    batch = check_steps(steps)
    if isinstance(store, SupportsAppendMany):
        await store.append_many(batch)
        return
    if not batch:
        await checkpoint()
    for step in batch:
        await store.append(step)


async def get_all(store: SessionStore, session_ids: Sequence[str]) -> list[Session]:
    """The sessions asked for, in order (duplicates too): one ``get_many`` call when the
    store has it, else one ``get`` per id.

    Unknown ids give ``Session(id)`` and create nothing either way. Without
    ``SupportsGetMany`` the reads are separate calls, so they may see
    different moments of a store being written to (not a snapshot).

    Raises:
        TypeError, ValueError: ``session_ids`` is not a sequence of valid
            session ids (naming the position of the first bad one).
        Whatever the store's ``get``/``get_many`` raises.
    """
    ids = check_session_ids(session_ids)
    if isinstance(store, SupportsGetMany):
        return await store.get_many(ids)
    if not ids:
        await checkpoint()
    return [await store.get(session_id) for session_id in ids]
