"""The errors a store raises for its own state, apart from bad input, and how the loop
describes an exception from code it does not own, without ever raising.
"""

from __future__ import annotations

from agentloop._validate import has_lone_surrogate


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


class SessionExistsError(StoreError):
    """A write that must create a session (``fork_session``, an import, ``restore_session``)
    found the session there already (a session row, or steps); nothing changed."""


class SessionBusyError(StoreError):
    """Another owner kept the session's lease for the whole wait; nothing was written."""


class RevisionConflictError(StoreError):
    """``update_data_if`` named a revision that is no longer the session's; nothing changed.

    Another write reached the session since the caller read its revision. Read
    the session and its revision again, merge, and retry.
    """


def _storable(text: str) -> bool:
    # A lone surrogate would make the step (or event) holding the text invalid.
    return not has_lone_surrogate(text)


def _type_name(exc: BaseException) -> str:
    name = type(exc).__name__
    return name if isinstance(name, str) and _storable(name) else "Exception"


def describe(exc: BaseException) -> str:
    """``repr(exc)``, or the exception's type name when that repr raises or is unstorable.

    Tools, models, compactors and stores raise exceptions the loop writes into
    steps and messages; a ``__repr__`` that raises, returns a non-``str`` or
    holds a lone surrogate must neither escape the loop nor make the step
    unstorable.
    """
    try:
        text = repr(exc)
        if isinstance(text, str) and _storable(text):
            return text
    except Exception:
        pass
    return _type_name(exc)


def describe_message(exc: BaseException) -> str:
    """``"<TypeName>: <str(exc)>"``, or the type name alone when ``str(exc)`` fails likewise."""
    try:
        text = str(exc)
        if isinstance(text, str) and _storable(text):
            return f"{_type_name(exc)}: {text}"
    except Exception:
        pass
    return _type_name(exc)
