"""What a SQL store asks its worker threads to do: one typed payload per kind of call.

A call is exactly one of these. The kind tells an executor everything it may
do beyond running the work once: whether the work writes, whether it may be
run again after a lost connection, how to tell whether a lost attempt
committed, and which steps it appends (so appends can share a commit).

A fenced write (checked against a session lease inside its transaction) is
the kind it fences, with a ``run`` that checks the lease first and raises
``LeaseLostError`` before writing anything. A fenced append is a
:class:`FencedAppend`: a :class:`KeyedWrite`, never an :class:`Append`,
because an executor may insert an ``Append``'s rows by a statement of its
own that would skip the check. An ``append_many`` call is one
:class:`Append` with several rows. Executors never split one call's rows,
and when a shared transaction or statement is refused they rerun each call
alone, so a refused call fails only itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, NamedTuple, TypeAlias, TypeVar

import attrs

from agentloop import Lease, RunStep

ConnT = TypeVar("ConnT")
R = TypeVar("R")


class AppendRow(NamedTuple):
    """One step to insert and the random key stored with it.

    After a lost connection, finding the key tells that the row committed.
    """

    step: RunStep
    key: int


@attrs.frozen
class Read(Generic[ConnT, R]):
    """Work that only reads: needs no write lock and is retried as is."""

    run: Callable[[ConnT], R]


@attrs.frozen
class IdempotentWrite(Generic[ConnT, R]):
    """A write whose repeat changes nothing more (``put``, ``update_data``, ``delete_session``).

    Retried as is after a lost connection.
    """

    run: Callable[[ConnT], R]


@attrs.frozen
class KeyedWrite(Generic[ConnT]):
    """A write that must not be applied twice (``finalize``); it stores a random key.

    ``committed`` looks for that key, on a fresh connection, to tell whether
    an attempt lost with its connection committed.
    """

    run: Callable[[ConnT], None]
    committed: Callable[[ConnT], bool]


@attrs.frozen
class Append(Generic[ConnT]):
    """``rows``, appended in order, all or none; may share a commit with other appends.

    ``run`` inserts them inside a transaction the executor opened; a backend
    whose statements commit one by one inserts ``rows`` in one statement
    instead. ``committed`` looks for the first row's key (all rows commit
    together, so it speaks for every row).
    """

    rows: tuple[AppendRow, ...]
    run: Callable[[ConnT], None]
    committed: Callable[[ConnT], bool]


@attrs.frozen
class FencedAppend(KeyedWrite[ConnT]):
    """``rows`` appended only while ``lease`` holds; ``run`` checks it in the same transaction.

    An executor that knows nothing of it runs it as the :class:`KeyedWrite` it
    is (at most once, ``committed`` after a lost connection). ``rows`` and
    ``lease`` are there for one that wants to share a commit among fenced
    appends: it must keep each call's lease check inside that transaction.
    """

    rows: tuple[AppendRow, ...]
    lease: Lease


Work: TypeAlias = Read[ConnT, R] | IdempotentWrite[ConnT, R] | KeyedWrite[ConnT] | Append[ConnT]
"""Every kind of call; ``R`` is what a read or an idempotent write returns."""

AnyWork: TypeAlias = Work[ConnT, Any]


def writes(work: AnyWork[Any]) -> bool:
    """Whether ``work`` may change the store."""
    return not isinstance(work, Read)
