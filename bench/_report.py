"""One row per measured ratio, and the table that prints them."""

from __future__ import annotations

import gc
from collections.abc import Callable

import attrs


@attrs.frozen
class Row:
    """``ratio`` = ours / floor; ``limit`` is the target, a ceiling unless ``at_least``."""

    name: str
    detail: str
    ratio: float
    limit: float
    at_least: bool = False

    @property
    def ok(self) -> bool:
        return self.ratio >= self.limit if self.at_least else self.ratio <= self.limit

    @property
    def target(self) -> str:
        return f"{'>=' if self.at_least else '<='} {self.limit:g}"

    @property
    def shown(self) -> str:
        """The ratio as the table prints it."""
        return f"{self.ratio:.2f}"


def settle() -> None:
    """Collect the garbage a measurement's setup (and every earlier section) left,
    right before its clock starts.

    Else a collection the timed work happens to trigger also traverses those
    objects and bills their cost to whichever side of a ratio triggers it: the
    side that keeps what it makes (a loop run keeps its steps) more often than
    the other. What the timed work itself allocates and keeps is still
    collected on the clock.
    """
    gc.collect()


def best_of(repeats: int, fn: Callable[[], float]) -> float:
    """The smallest of ``repeats`` measurements: the least disturbed by the rest of the machine."""
    return min(fn() for _ in range(repeats))


def render(rows: list[Row]) -> str:
    """The rows as an aligned text table with a verdict column."""
    header = ("measure", "detail", "ratio", "target", "")
    lines = [header] + [
        (r.name, r.detail, r.shown, r.target, "ok" if r.ok else "MISS") for r in rows
    ]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    out = ["  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)) for line in lines]
    out.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(line.rstrip() for line in out)


@attrs.frozen
class SpreadRow(Row):
    """A :class:`Row` whose ``ratio`` is the median of per-round ratios ``low``..``high``."""

    low: float = 0.0
    high: float = 0.0

    @property
    def shown(self) -> str:
        return f"{self.ratio:.2f} ({self.low:.2f}-{self.high:.2f})"
