"""An order of keys by a sequence number that only grows: what paging and expiry walk.

Every write of a key gives it a new, larger number; a page walks from a cursor
position towards older (or newer) numbers and stops once it has enough live
keys. Entries are only ever appended, so the list stays sorted by number and a
cursor is found by bisection; an entry a later write (or a delete) made stale
is skipped, and the list is rebuilt from the live entries once stale ones
outnumber them, so a page skips at most about as many entries as it returns,
amortized over the writes. Every method runs under the store's lock.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable


def _number(entry: tuple[int, str]) -> int:
    return entry[0]


class KeyOrder:
    """Keys ordered by the number of their latest :meth:`put`, newest last."""

    __slots__ = ("_entries", "_live")

    def __init__(self) -> None:
        self._entries: list[tuple[int, str]] = []
        self._live: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._live)

    def put(self, key: str, number: int) -> None:
        """Place ``key`` at ``number``, larger than every number put before."""
        self._entries.append((number, key))
        self._live[key] = number
        self._compact()

    def discard(self, key: str) -> None:
        """Forget ``key`` (a no-op when absent)."""
        if self._live.pop(key, None) is not None:
            self._compact()

    def number(self, key: str) -> int | None:
        """The number of ``key``'s latest put, or ``None``."""
        return self._live.get(key)

    def older(
        self, start: int | None, count: int, keep: Callable[[str], bool] | None = None
    ) -> list[tuple[int, str]]:
        """At most ``count`` live ``(number, key)`` pairs below ``start`` (from the newest
        when ``None``), newest first, each passing ``keep``."""
        entries, live = self._entries, self._live
        i = len(entries) if start is None else bisect.bisect_left(entries, start, key=_number)
        found: list[tuple[int, str]] = []
        while i > 0 and len(found) < count:
            i -= 1
            number, key = entries[i]
            if live.get(key) == number and (keep is None or keep(key)):
                found.append((number, key))
        return found

    def newer(
        self, start: int | None, count: int, keep: Callable[[str], bool] | None = None
    ) -> list[tuple[int, str]]:
        """At most ``count`` live ``(number, key)`` pairs above ``start`` (from the oldest
        when ``None``), oldest first, each passing ``keep``."""
        entries, live = self._entries, self._live
        i = 0 if start is None else bisect.bisect_right(entries, start, key=_number)
        found: list[tuple[int, str]] = []
        while i < len(entries) and len(found) < count:
            number, key = entries[i]
            i += 1
            if live.get(key) == number and (keep is None or keep(key)):
                found.append((number, key))
        return found

    def _compact(self) -> None:
        if len(self._entries) > 2 * len(self._live) + 64:
            live = self._live
            self._entries = [(n, k) for n, k in self._entries if live.get(k) == n]

    def clear(self) -> None:
        """Forget every key."""
        self._entries.clear()
        self._live.clear()
