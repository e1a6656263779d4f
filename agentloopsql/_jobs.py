"""What a SQL store asks its worker threads to do: one typed payload per kind of call.

A call is exactly one of these. The kind tells an executor everything it may
do beyond running the work once: whether the work writes, whether it may be
run again after a lost connection, how to tell whether a lost attempt
committed, and which steps it appends (so appends can share a commit).

Room to grow: a fenced write (a write checked against a session lease inside
its transaction) adds the lease as a typed field of the kind it fences, and
its ``run`` does the check; an ``append_many`` call is one :class:`Append`
with several rows. Executors never split one call's rows, and when a shared
transaction or statement is refused they rerun each call alone, so a refused
call fails only itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, NamedTuple, TypeAlias, TypeVar

import attrs

from agentloop import RunStep

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


Work: TypeAlias = Read[ConnT, R] | IdempotentWrite[ConnT, R] | KeyedWrite[ConnT] | Append[ConnT]
"""Every kind of call; ``R`` is what a read or an idempotent write returns."""

AnyWork: TypeAlias = Work[ConnT, Any]


def writes(work: AnyWork[Any]) -> bool:
    """Whether ``work`` may change the store."""
    return not isinstance(work, Read)
