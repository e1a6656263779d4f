"""The errors a store raises for its own state, apart from bad input."""

from __future__ import annotations


class StoreError(Exception):
    """A store could not do what was asked.

    Bad input raises ``ValueError``/``TypeError`` instead.
    """


class StoreClosedError(StoreError):
    """The store was closed by its owner (``aclose``); nothing was read or written."""


class StoreUnavailableError(StoreError):
    """The backend could not be reached or broke mid-call; ``cause`` is the backend's exception.

    The call either happened or not; the store's docstring says which calls
    may be retried.
    """

    def __init__(self, message: str, cause: BaseException | None = None) -> None:
        super().__init__(message)
        self.cause = cause
        if cause is not None:
            self.__cause__ = cause


class LeaseLostError(StoreError):
    """The session's lease was acquired by another owner since this lease was granted.

    Raised by a write through ``fenced(lease)`` (which then changed nothing) and
    by ``renew_lease`` (also for a lease its holder released). The holder is no
    longer the session's only writer and must stop writing to it.
    """


class SessionBusyError(StoreError):
    """Another owner kept the session's lease for the whole wait; nothing was written."""


class RevisionConflictError(StoreError):
    """``update_data_if`` named a revision that is no longer the session's; nothing changed.

    Another write reached the session since the caller read its revision. Read
    the session and its revision again, merge, and retry.
    """
