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
