"""Session leases: the ``Lease`` value, the ``SupportsLease`` capability, and the one
rule by which every store judges a presented lease.

A lease makes one owner the only writer of a session's runs for a while. Its
``token`` fences writes: every acquisition of a session's lease gets a token
larger than any before it, and a write made through ``fenced(lease)`` is
refused once the session's lease has been acquired again since.

A store keeps, per session, its latest grant (owner, token, and whether it
was released), and never forgets it. :func:`check_granted`,
:func:`check_fence` and :func:`check_renewable` say what a presented
``Lease`` is against that grant: never granted (``ValueError``), lost
(``LeaseLostError``: the lease was acquired again since) or released. The
in-memory and the SQL stores call them, so every store judges a lease alike.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import attrs

from agentloop import _validate as check
from agentloop._errors import LeaseLostError
from agentloop._validate import preview

if TYPE_CHECKING:
    from agentloop._protocols import SessionStore


def _owner(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    check.validate_owner(value, attribute.name)


@attrs.frozen
class Lease:
    """One owner's hold on a session's runs, as a store granted it.

    ``token`` is the fencing token: opaque, only order and equality mean
    anything; every acquisition of a session's lease gets a larger one.
    ``expires_at`` is aware, held in UTC, on the store's clock. A ``Lease`` is a
    receipt, not the lease itself: the store decides whether it is still held.

    Raises:
        TypeError, ValueError: a field breaks its rule (``owner``: a non-empty
            str of at most 256 UTF-8 bytes without NUL; ``token``: an int >= 0
            that fits in int64; ``expires_at``: timezone-aware).
    """

    session_id: str = attrs.field(validator=check.session_id)
    owner: str = attrs.field(validator=_owner)
    token: int = attrs.field(validator=check.int64)
    expires_at: datetime = attrs.field(converter=check.to_utc, validator=check.aware_datetime)


@runtime_checkable
class SupportsLease(Protocol):
    """Grants session leases and fenced views; held by the store that keeps sessions.

    A session's live lease is held by one owner at a time; it expires ``ttl``
    seconds after it was last acquired or renewed, on the store's clock. Lease
    calls are not session writes: they create no session and change neither
    ``updated_at`` nor ``list_sessions`` order. A cancelled lease call did not
    happen.
    """

    async def acquire_lease(self, session_id: str, owner: str, ttl: float) -> Lease | None:
        """The lease if it was free, released or expired (with a new, larger token) or
        live and held by ``owner`` (same token, expiring ``ttl`` seconds from now);
        ``None`` if another owner holds a live one."""
        ...

    async def renew_lease(self, lease: Lease, ttl: float) -> Lease:
        """The same lease expiring ``ttl`` seconds from now; ``LeaseLostError`` if the
        session's lease was acquired again since, or ``lease`` was released."""
        ...

    async def release_lease(self, lease: Lease) -> None:
        """Free the lease so the next acquire succeeds at once; idempotent; a no-op for
        a lease that was acquired again since."""
        ...

    def fenced(self, lease: Lease) -> SessionStore:
        """A view implementing every protocol and capability of this store whose
        writes to ``lease.session_id`` raise ``LeaseLostError`` and change nothing
        once the session's lease was acquired again since ``lease`` was granted."""
        ...


class Grant(Protocol):
    """A session's latest lease grant as a store keeps it."""

    @property
    def owner(self) -> str: ...
    @property
    def token(self) -> int: ...
    @property
    def released(self) -> bool: ...


def check_granted(lease: Lease, latest: Grant | None) -> None:
    """``ValueError`` if the store can tell it never granted ``lease``.

    That is: the session was never leased, ``lease``'s token is above the
    latest one, or it is the latest token with another owner.
    """
    if (
        latest is None
        or lease.token > latest.token
        or (lease.token == latest.token and lease.owner != latest.owner)
    ):
        raise ValueError(
            f"lease must be one this store granted; got token {lease.token} "
            f"of owner {preview(lease.owner)} for session {preview(lease.session_id)}"
        )


def check_fence(lease: Lease, latest: Grant | None) -> None:
    """Raise unless ``lease`` is still the session's latest grant (released or not).

    Raises:
        ValueError: the store never granted ``lease``.
        LeaseLostError: the session's lease was acquired again since.
    """
    check_granted(lease, latest)
    assert latest is not None
    if latest.token != lease.token:
        raise LeaseLostError(
            f"lease {lease.token} of session {preview(lease.session_id)} was taken "
            f"over (now token {latest.token}); nothing was written"
        )


def check_renewable(lease: Lease, latest: Grant | None) -> None:
    """Raise unless ``lease`` is the session's latest grant and not released.

    Raises:
        ValueError: the store never granted ``lease``.
        LeaseLostError: the lease was acquired again since, or released.
    """
    check_fence(lease, latest)
    assert latest is not None
    if latest.released:
        raise LeaseLostError(
            f"lease {lease.token} of session {preview(lease.session_id)} was released; "
            "acquire a new one"
        )
