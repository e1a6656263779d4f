"""How a store judges a lease against the session's latest grant: one rule for every store.

A store keeps, per session, its latest grant (owner, token, and whether it
was released), and never forgets it. These functions say what a presented
``Lease`` is against that grant: never granted (``ValueError``), lost
(``LeaseLostError``: the lease was acquired again since) or released. The
in-memory and the SQL stores call them, so every store judges a lease alike.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from agentloop._checks import preview
from agentloop._errors import LeaseLostError

if TYPE_CHECKING:
    from agentloop._lease import Lease


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
