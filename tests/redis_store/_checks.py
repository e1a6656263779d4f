"""The example store's own argument checks, and how it judges a lease it is shown.

Written against public ``agentloop`` names only, as a store outside this
project would be: the value types check themselves, and
``agentloop.validate_session_id``, ``validate_json`` and ``validate_n`` check
ids, JSON text and counts. The rest is here. Each check runs before anything
is sent to Redis, so a refused call changes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from agentloop import Lease, LeaseLostError, RunStep, validate_session_id

_PREVIEW = 80
OWNER_MAX_BYTES = 256
TTL_MAX = (2**31 - 1) / 1000
"""The longest lease, in seconds (as agentloop's own stores: 2**31 - 1 ms)."""
REVISION_MAX = 2**63 - 1


def preview(value: object) -> str:
    """``repr(value)`` cut to a length that fits in one error line."""
    text = repr(value)
    return text if len(text) <= _PREVIEW else f"{text[:_PREVIEW]}...({len(text)} chars)"


def check_steps(steps: object) -> list[RunStep]:
    """A fresh list of the batch, every step checked before anything is written.

    Raises:
        TypeError: not a sequence of ``RunStep`` (the message names the first
            bad position, ``steps[3] must be a RunStep``).
    """
    if not isinstance(steps, Sequence) or isinstance(steps, str | bytes):
        raise TypeError(f"steps must be a sequence of RunStep, got {preview(steps)}")
    batch = list(steps)
    for position, step in enumerate(batch):
        if not isinstance(step, RunStep):
            raise TypeError(f"steps[{position}] must be a RunStep, got {preview(step)}")
    return batch


def check_session_ids(session_ids: object) -> list[str]:
    """A fresh list of the ids asked for, every one checked before anything is read.

    Raises:
        TypeError: not a sequence of ``str`` (a single ``str`` neither).
        ValueError: an item is not a valid session id.
    """
    if not isinstance(session_ids, Sequence) or isinstance(session_ids, str | bytes):
        raise TypeError(f"session_ids must be a sequence of str, got {preview(session_ids)}")
    ids = list(session_ids)
    for position, session_id in enumerate(ids):
        validate_session_id(session_id, f"session_ids[{position}]")
    return ids


def check_revision(revision: object) -> int:
    """An ``update_data_if`` revision: an ``int`` (not ``bool``) in ``[0, 2**63 - 1]``.

    Raises:
        TypeError, ValueError: it is not.
    """
    if not isinstance(revision, int) or isinstance(revision, bool):
        raise TypeError(f"revision must be an int, got {preview(revision)}")
    if not 0 <= revision <= REVISION_MAX:
        raise ValueError(f"revision must be an int in [0, {REVISION_MAX}], got {revision!r}")
    return revision


def check_ttl(ttl: object) -> float:
    """A lease's time to live: finite seconds, > 0 and at most :data:`TTL_MAX`.

    Raises:
        TypeError, ValueError: it is not.
    """
    if not isinstance(ttl, int | float) or isinstance(ttl, bool):
        raise TypeError(f"ttl must be a number of seconds, got {preview(ttl)}")
    if not 0 < ttl <= TTL_MAX:  # NaN fails it too
        raise ValueError(
            f"ttl must be a finite number of seconds > 0 and <= {TTL_MAX}, got {ttl!r}"
        )
    return float(ttl)


def check_owner(owner: object) -> str:
    """A lease owner: a non-empty ``str`` of at most 256 UTF-8 bytes, without NUL.

    Raises:
        TypeError, ValueError: it is not.
    """
    if not isinstance(owner, str):
        raise TypeError(f"owner must be a str, got {preview(owner)}")
    try:
        size = len(owner.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValueError(f"owner must be valid Unicode text, got {preview(owner)}") from None
    if not owner or "\x00" in owner or size > OWNER_MAX_BYTES:
        raise ValueError(
            f"owner must be non-empty, without NUL, at most {OWNER_MAX_BYTES} UTF-8 bytes, "
            f"got {preview(owner)}"
        )
    return owner


def check_lease(lease: object) -> Lease:
    """``lease`` itself, if it is a ``Lease``.

    Raises:
        TypeError: it is not.
    """
    if not isinstance(lease, Lease):
        raise TypeError(f"lease must be a Lease, got {preview(lease)}")
    return lease


class Grant(NamedTuple):
    """A session's latest lease grant as a script returned it; never forgotten."""

    owner: str
    token: int
    released: bool


def granted(lease: Lease, latest: Grant | None) -> None:
    """``ValueError`` if this store can tell it never granted ``lease``.

    That is: the session was never leased, its token is above the latest
    one, or it is the latest token with another owner.
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


def still_latest(lease: Lease, latest: Grant | None) -> None:
    """Raise unless ``lease`` is still the session's latest grant (released or not).

    Raises:
        ValueError: the store never granted ``lease``.
        LeaseLostError: the session's lease was acquired again since.
    """
    granted(lease, latest)
    assert latest is not None
    if latest.token != lease.token:
        raise LeaseLostError(
            f"lease {lease.token} of session {preview(lease.session_id)} was taken "
            f"over (now token {latest.token}); nothing was written"
        )


def renewable(lease: Lease, latest: Grant | None) -> None:
    """Raise unless ``lease`` is the session's latest grant and not released.

    Raises:
        ValueError: the store never granted ``lease``.
        LeaseLostError: the lease was acquired again since, or released.
    """
    still_latest(lease, latest)
    assert latest is not None
    if latest.released:
        raise LeaseLostError(
            f"lease {lease.token} of session {preview(lease.session_id)} was released; "
            "acquire a new one"
        )
