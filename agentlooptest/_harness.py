"""``Harness``: how the contract opens the stores it certifies."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import attrs

from agentloop._shared import preview

StoreFactory = Callable[[], Awaitable[Any]]
"""A zero-argument async callable returning a fresh, empty store."""

EnsureSession = Callable[[Any, str], Awaitable[None]]
"""``async (step_store, session_id) -> None``: make appends to ``session_id`` legal."""

Reopen = Callable[[Any], Awaitable[Any]]
"""``async (store) -> store``: a second handle onto the same backend."""

Cleanup = Callable[[], Awaitable[None]]
"""``async () -> None``: remove what the stores opened so far left in a shared backend."""


def _optional_callable(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and not callable(value):
        raise TypeError(f"{attribute.name} must be an async callable or None, got {preview(value)}")


@attrs.frozen
class Harness:
    """Everything the contract needs to open, prepare and reopen the stores under test.

    ``new_step_store`` / ``new_session_store`` are zero-argument async callables
    returning a **fresh, empty** store each call (a new temporary database, a
    new schema, a truncated table...). Every clause opens its own stores and
    the contract ``aclose``s each one afterwards when it has ``aclose``. Either
    factory may be ``None``: only the other protocol is then certified. For a
    store that is both (one object, like the SQL stores), give both factories.

    ``ensure_session(step_store, session_id)`` is awaited before every append
    to ``session_id`` (so again after a ``delete_session`` removed the row),
    for stores whose steps need a session row first (a foreign key, with or
    without a cascading delete). It must be idempotent, also when two tasks
    call it for one id at once.

    ``reopen(store)`` returns a second handle onto the same backend as
    ``store`` (the same file, the same database). The durability clauses need
    it and are skipped, with that reason, when it is ``None``. The contract
    ``aclose``s the handle it returns unless it is ``store`` itself.

    ``cleanup()`` is awaited after each clause, once every store the clause
    opened is closed, whether the clause passed, failed or was cancelled; and
    once more when :func:`agentlooptest.certify` ends (also when it is
    interrupted). It removes what those stores left behind in a shared
    backend (their keys, schemas or files) so a failing or killed run leaves
    nothing. It is shielded from cancellation and bounded: it may take up to
    30 seconds. A cleanup that raises fails the clause it follows, saying so.

    Raises:
        TypeError: a field is neither an async callable nor ``None``, or both
            factories are ``None``.
    """

    new_step_store: StoreFactory | None = attrs.field(
        default=None, validator=_optional_callable, kw_only=True
    )
    new_session_store: StoreFactory | None = attrs.field(
        default=None, validator=_optional_callable, kw_only=True
    )
    ensure_session: EnsureSession | None = attrs.field(
        default=None, validator=_optional_callable, kw_only=True
    )
    reopen: Reopen | None = attrs.field(default=None, validator=_optional_callable, kw_only=True)
    cleanup: Cleanup | None = attrs.field(default=None, validator=_optional_callable, kw_only=True)

    def __attrs_post_init__(self) -> None:
        if self.new_step_store is None and self.new_session_store is None:
            raise TypeError("Harness needs new_step_store, new_session_store or both; got neither")
