"""``RedisSessionStore``: sessions, revisions and leases, each write one atomic Lua script."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentloop import (
    FinalizeSummary,
    Lease,
    LeaseLostError,
    RevisionConflictError,
    Session,
    SessionInfo,
    validate_json,
    validate_n,
    validate_session_id,
)

from ._base import REDIS_URL
from ._checks import check_lease, check_revision, check_session_ids, preview, still_latest
from ._codec import decode_summary, encode_summary, from_micros
from ._fenced import FencedRedisSessionStore
from ._lease import LeaseMethods, grant
from ._scripts import DELETE, LIST, WRITE

_FIELDS = ("created", "model", "prompt", "data")


def _session(session_id: str, row: list[Any]) -> Session:
    created, model, prompt, data = row
    if created is None:
        return Session(id=session_id)
    return Session(id=session_id, model=model, system_prompt=prompt, data=data)


def _check_snapshot(snapshot: object) -> str:
    """The snapshot as the script's argument: ``''`` stands for ``None`` (never JSON)."""
    if snapshot is None:
        return ""
    if not isinstance(snapshot, str):
        raise TypeError(f"snapshot must be JSON text or None, got {preview(snapshot)}")
    validate_json(snapshot, "data")
    return snapshot


class RedisSessionStore(LeaseMethods):
    """Sessions in Redis hashes under ``prefix``; asyncio only.

    Implements ``SessionStore`` and every optional capability: ``put``,
    ``final``, ``list_sessions``, ``delete_session``, ``aclose``, ``get_many``,
    revisions and leases (``fenced`` views fence session writes; appends are
    not fenced: this store keeps no steps). Each write is one Lua script:
    the fence check, the revision check, the revision bump and the write
    happen atomically on the server. Times come from the server's clock.

    **Cancellation**: a cancelled call did nothing; a call that returns did
    everything (see ``_call``).
    """

    def __init__(self, prefix: str, url: str = REDIS_URL) -> None:
        super().__init__(prefix, url)
        self._write_script = self._redis.register_script(WRITE)
        self._delete_script = self._redis.register_script(DELETE)
        self._list_script = self._redis.register_script(LIST)

    def _session_keys(self, session_id: str) -> list[str]:
        return [
            self._key("s", session_id),
            self._key("rev", session_id),
            self._key("order"),
            self._key("seq"),
            self._key("lease", session_id),
        ]

    async def _run(
        self,
        script: Any,
        session_id: str,
        mode: str,
        *rest: object,
        fence: Lease | None = None,
        expected: int | None = None,
    ) -> int:
        """Run a write script; the new revision (or, for delete, 1 if it existed)."""
        fenced = fence is not None and fence.session_id == session_id
        owner, token = (fence.owner, str(fence.token)) if fenced and fence else ("", "")
        keys = self._session_keys(session_id)
        args = [session_id, mode, owner, token, "" if expected is None else str(expected), *rest]
        got = await self._call(lambda: script(keys=keys, args=args))
        if got[0] == "fence":
            assert fence is not None
            still_latest(fence, grant(*got[1:]))  # raises: the script refused this very grant
            raise LeaseLostError(f"lease {fence.token} of {preview(session_id)} is lost")
        if got[0] == "conflict":
            raise RevisionConflictError(
                f"session {preview(session_id)} is at revision {got[1]}, not {expected}; "
                "nothing was written (read the session again and retry)"
            )
        return int(got[1])

    async def get(self, session_id: str) -> Session:
        """The stored session, or ``Session(id=session_id)`` when unknown; creates nothing."""
        validate_session_id(session_id)
        key = self._key("s", session_id)
        row = await self._call(lambda: self._redis.hmget(key, _FIELDS))
        return _session(session_id, row)

    async def get_many(self, session_ids: Sequence[str]) -> list[Session]:
        """One session per id, in the order asked (duplicates too), read in one
        ``MULTI``/``EXEC``; an unknown id gives ``Session(id)``. Creates nothing."""
        ids = check_session_ids(session_ids)

        async def work() -> list[Any]:
            if not ids:
                return []
            async with self._redis.pipeline(transaction=True) as pipe:
                for session_id in ids:
                    pipe.hmget(self._key("s", session_id), _FIELDS)
                rows: list[Any] = await pipe.execute()
                return rows

        rows = await self._call(work)
        return [_session(sid, row) for sid, row in zip(ids, rows, strict=True)]

    async def exists(self, session_id: str) -> bool:
        """Whether a write brought the session into being; creates nothing."""
        validate_session_id(session_id)
        key = self._key("s", session_id)
        found: int = await self._call(lambda: self._redis.exists(key))
        return found > 0

    async def update_data(self, session_id: str, snapshot: str | None) -> None:
        """Replace the session's data (JSON text, or ``None`` to clear it).

        Raises:
            TypeError, ValueError: not JSON text or ``None``; nothing written.
        """
        await self._update_data(session_id, snapshot, None)

    async def _update_data(
        self,
        session_id: str,
        snapshot: str | None,
        fence: Lease | None,
        expected: int | None = None,
    ) -> int:
        validate_session_id(session_id)
        data = _check_snapshot(snapshot)
        return await self._run(
            self._write_script, session_id, "data", data, fence=fence, expected=expected
        )

    async def update_data_if(self, session_id: str, snapshot: str | None, revision: int) -> int:
        """Replace the data if the session is still at ``revision``; the new revision.

        Raises:
            RevisionConflictError: the session is at another revision; nothing written.
        """
        check_revision(revision)
        return await self._update_data(session_id, snapshot, None, revision)

    async def revision(self, session_id: str) -> int:
        """The session's revision: 0 if never written, larger after every write."""
        validate_session_id(session_id)
        key = self._key("rev", session_id)
        got = await self._call(lambda: self._redis.get(key))
        return int(got) if got is not None else 0

    async def finalize(self, session_id: str, summary: FinalizeSummary) -> None:
        """Record ``summary`` as the session's latest run; the data is kept."""
        await self._finalize(session_id, summary, None)

    async def _finalize(
        self, session_id: str, summary: FinalizeSummary, fence: Lease | None
    ) -> None:
        validate_session_id(session_id)
        if not isinstance(summary, FinalizeSummary):
            raise TypeError(f"summary must be a FinalizeSummary, got {preview(summary)}")
        await self._run(
            self._write_script,
            session_id,
            "final",
            encode_summary(summary),
            summary.status.value,
            summary.step_count,
            fence=fence,
        )

    async def put(self, session: Session) -> None:
        """Store ``session`` whole (model, system prompt, data); its summaries are kept."""
        await self._put(session, None)

    async def _put(self, session: Session, fence: Lease | None) -> None:
        if not isinstance(session, Session):
            raise TypeError(f"session must be a Session, got {preview(session)}")
        data = "" if session.data is None else session.data
        await self._run(
            self._write_script,
            session.id,
            "put",
            session.model,
            session.system_prompt,
            data,
            fence=fence,
        )

    async def final(self, session_id: str) -> FinalizeSummary | None:
        """The latest ``finalize`` summary, or ``None``."""
        validate_session_id(session_id)
        key = self._key("s", session_id)
        text = await self._call(lambda: self._redis.hget(key, "final"))
        return decode_summary(text) if text is not None else None

    async def list_sessions(self, *, limit: int = 100) -> list[SessionInfo]:
        """At most ``limit`` sessions, the most recently written first (one script)."""
        validate_n(limit, "limit")
        keys, args = [self._key("order")], [limit, self._key("s")]
        rows = await self._call(lambda: self._list_script(keys=keys, args=args))
        return [
            SessionInfo(
                id=sid,
                status=status or None,
                step_count=int(total),
                created_at=from_micros(created),
                updated_at=from_micros(updated),
            )
            for sid, status, total, created, updated in rows
        ]

    async def delete_session(self, session_id: str) -> bool:
        """Drop the session's data and summaries; ``True`` if it existed. Its revision
        grows and its lease stays (tokens never go back)."""
        return await self._delete_session(session_id, None)

    async def _delete_session(self, session_id: str, fence: Lease | None) -> bool:
        validate_session_id(session_id)
        return await self._run(self._delete_script, session_id, "", fence=fence) == 1

    def fenced(self, lease: Lease) -> FencedRedisSessionStore:
        """A view whose writes to ``lease.session_id`` are refused with ``LeaseLostError``,
        atomically with the write, once the lease was acquired again since.

        Raises:
            TypeError: ``lease`` is not a ``Lease``. (A lease this store never
                granted is refused by the view's first write, with ``ValueError``.)
        """
        return FencedRedisSessionStore(self, check_lease(lease))
