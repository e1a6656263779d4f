"""Batches and revisions of the SQL stores: ``append_many``, ``get_many``, ``update_data_if``.

A session's revision is its ``write_seq``: every session write (``put``,
``update_data``, ``finalize``, ``update_data_if``) already sets it from a
store-wide counter that only grows, and lease calls never touch it.
``delete_session`` keeps the deleted session's last revision in
``revision_floors``, so its revision never gets smaller and a later write
goes above it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

import anyio

from agentloop import RevisionConflictError, Session, validate_session_id
from agentloop._shared import check_revision, check_session_ids, check_steps, preview
from agentloopsql._jobs import Append, AppendRow, FencedAppend, IdempotentWrite, Read
from agentloopsql._leases import LeaseMethods
from agentloopsql._ops import new_key

if TYPE_CHECKING:
    from collections.abc import Sequence

    from agentloop import Lease, RunStep
    from agentloopsql._ops import Ops

ConnT = TypeVar("ConnT")


class BatchMethods(LeaseMethods[ConnT]):
    """``SupportsAppendMany``, ``SupportsGetMany`` and ``SupportsRevisions`` for a SQL store.

    Each call is one job for the store's workers, run as one transaction.
    """

    _ops: Ops[ConnT]

    async def append_many(self, steps: Sequence[RunStep]) -> None:
        """Append every step of ``steps`` in the given order, in one transaction: all or none.

        The batch may span sessions; ``[]`` is a no-op. On PostgreSQL it is one
        multi-row ``INSERT``; on SQLite it may share a commit with other
        appends (group commit), and a refused call never fails another.

        Raises:
            TypeError: ``steps`` is not a sequence of ``RunStep`` (the message
                names the first bad position); nothing was appended.
            StoreClosedError: the store was closed.
            StoreUnavailableError: the backend failed; nothing was appended,
                unless the message says the outcome is unknown (then all or none).

        **Cancellation handling**: all-or-nothing (see ``SqlStoreBase``).
        """
        await self._append_many(check_steps(steps), None)

    async def _append_many(self, batch: list[RunStep], fence: Lease | None) -> None:
        if not batch:
            self._check_open()
            await anyio.lowlevel.checkpoint()
            return
        rows = tuple(AppendRow(step, new_key()) for step in batch)
        ops = self._ops
        first = rows[0]

        def insert(conn: ConnT) -> None:
            for step, key in rows:
                ops.append(conn, step, key)

        def committed(conn: ConnT) -> bool:
            return ops.append_landed(conn, first.step.session_id, first.key)

        if fence is None or all(step.session_id != fence.session_id for step in batch):
            await self._workers.call(Append(rows=rows, run=insert, committed=committed))
        else:
            run = self._fence(fence, fence.session_id, insert)
            await self._workers.call(
                FencedAppend(run=run, committed=committed, rows=rows, lease=fence)
            )

    async def get_many(self, session_ids: Sequence[str]) -> list[Session]:
        """One session per id, in the order asked (duplicates too), read by one query.

        An unknown id gives ``Session(id)``; creates nothing.

        Raises:
            TypeError, ValueError: ``session_ids`` is not a sequence of session
                ids (the message names the first bad position).
            StoreClosedError: the store was closed.
            StoreUnavailableError: the backend failed.

        **Cancellation handling**: all-or-nothing (see ``SqlStoreBase``).
        """
        ids = check_session_ids(session_ids)
        if not ids:
            self._check_open()
            await anyio.lowlevel.checkpoint()
            return []
        ops, unique = self._ops, list(dict.fromkeys(ids))
        found = await self._workers.call(Read(lambda conn: ops.get_many(conn, unique)))
        return [found.get(sid) or Session(id=sid) for sid in ids]

    async def revision(self, session_id: str) -> int:
        """The session's revision: 0 if never written, larger after every session write.

        Only order and equality mean anything. A deleted session keeps the
        revision it had, so a stale ``update_data_if`` fails; lease calls
        never change it. Creates nothing.

        Raises:
            TypeError, ValueError: a bad session id.
            StoreClosedError: the store was closed.
            StoreUnavailableError: the backend failed.

        **Cancellation handling**: all-or-nothing (see ``SqlStoreBase``).
        """
        validate_session_id(session_id)
        ops = self._ops
        return await self._workers.call(Read(lambda conn: ops.revision(conn, session_id)))

    async def update_data_if(self, session_id: str, snapshot: str | None, revision: int) -> int:
        """Replace the session's data if it is still at ``revision``; the new revision.

        The check and the write are one statement (PostgreSQL) or one
        transaction (SQLite): of several calls naming the same revision,
        across every handle onto the backend, exactly one wins.

        Raises:
            RevisionConflictError: the session is at another revision; nothing
                was written.
            TypeError, ValueError: a bad session id, snapshot (not JSON text or
                ``None``) or revision (not an int in ``[0, 2**63 - 1]``).
            StoreClosedError: the store was closed.
            StoreUnavailableError: the backend failed; nothing was written. A
                write retried after a lost connection whose first attempt had
                committed reports ``RevisionConflictError``: read it back.

        **Cancellation handling**: all-or-nothing (see ``SqlStoreBase``).
        """
        return await self._update_data_if(session_id, snapshot, revision, None)

    async def _update_data_if(
        self, session_id: str, snapshot: str | None, revision: int, fence: Lease | None
    ) -> int:
        validate_session_id(session_id)
        if snapshot is not None and not isinstance(snapshot, str):
            raise TypeError(f"snapshot must be JSON text or None, got {preview(snapshot)}")
        check_revision(revision)
        self._check_open()
        Session(session_id, data=snapshot)  # validates the JSON, naming the field "data"
        ops = self._ops
        write = self._fence(
            fence, session_id, lambda c: ops.update_data_if(c, session_id, snapshot, revision)
        )
        written, now = await self._workers.call(IdempotentWrite(write))
        if not written:
            raise RevisionConflictError(
                f"session {preview(session_id)} is at revision {now}, not {revision}; "
                "nothing was written (read the session again and retry)"
            )
        return now
