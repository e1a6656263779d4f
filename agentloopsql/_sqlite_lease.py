"""Session leases in a SQLite file: the ``leases`` table's SQL for ``SqliteStore``."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from datetime import datetime
from typing import TypeVar

from agentloop import Lease
from agentloop._shared import check_fence, check_granted, check_renewable
from agentloopsql import _codec
from agentloopsql._leases import Held

R = TypeVar("R")


class SqliteLeaseOps:
    """The lease operations of ``SqliteOps``.

    Each runs inside the ``BEGIN IMMEDIATE`` transaction the executor opened
    (every lease call is a write, and so is every fenced write), so no other
    handle or process can come between its read of the lease row and its
    write. Expiry is judged on this machine's clock, read in the connection
    thread.
    """

    def acquire_lease(
        self, conn: sqlite3.Connection, session_id: str, owner: str, ttl: float
    ) -> tuple[int, datetime] | None:
        now = _codec.to_micros(_codec.now())
        expires = now + round(ttl * 1_000_000)
        row = conn.execute(
            "SELECT owner, token, expires_us FROM leases WHERE session_id = ?", (session_id,)
        ).fetchone()
        if row is None:
            token = 1
            conn.execute("INSERT INTO leases VALUES (?, ?, ?, ?)", (session_id, owner, 1, expires))
        else:
            held_owner, token, held_until = row
            if held_until is not None and now < held_until:
                if held_owner != owner:
                    return None
            else:
                token += 1  # free, released or expired: a new grant, even for the same owner
            conn.execute(
                "UPDATE leases SET owner = ?, token = ?, expires_us = ? WHERE session_id = ?",
                (owner, token, expires, session_id),
            )
        return token, _codec.from_micros(expires)

    def renew_lease(self, conn: sqlite3.Connection, lease: Lease, ttl: float) -> datetime:
        check_renewable(lease, _held(conn, lease.session_id))
        expires = _codec.to_micros(_codec.now()) + round(ttl * 1_000_000)
        conn.execute(
            "UPDATE leases SET expires_us = ? WHERE session_id = ?", (expires, lease.session_id)
        )
        return _codec.from_micros(expires)

    def release_lease(self, conn: sqlite3.Connection, lease: Lease) -> None:
        held = _held(conn, lease.session_id)
        check_granted(lease, held)
        if held is not None and held.token == lease.token:
            conn.execute(
                "UPDATE leases SET expires_us = NULL WHERE session_id = ?", (lease.session_id,)
            )

    def fenced_write(
        self, conn: sqlite3.Connection, lease: Lease, write: Callable[[sqlite3.Connection], R]
    ) -> R:
        check_fence(lease, _held(conn, lease.session_id))
        return write(conn)


def _held(conn: sqlite3.Connection, session_id: str) -> Held | None:
    """The session's lease row (one primary-key lookup), or ``None`` if never leased."""
    row = conn.execute(
        "SELECT owner, token, expires_us IS NULL FROM leases WHERE session_id = ?", (session_id,)
    ).fetchone()
    return Held(row[0], row[1], bool(row[2])) if row is not None else None
