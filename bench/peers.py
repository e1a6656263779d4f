"""Ours vs the peers, doing the same work in one process (``python -m bench --peers``).

Ours runs under trio, each peer under asyncio; every figure is the median of
per-round ratios with their min-max. A "vs" row is peer time / our time (above
1: ours is faster); a growth row is time at ``Sizes.big`` / time at
``Sizes.small`` steps of history. The peers are optional: ``pip install -e
'.[peers]'`` installs google-adk, langgraph-checkpoint and openai-agents; a
peer that is missing is left out, and :func:`rows` says so on stderr.
"""

from __future__ import annotations

import sys

from bench import _peers_load as load
from bench._peers_load import PEERS, Peer
from bench._peers_timing import Sizes
from bench._report import Row

__all__ = ["PEERS", "Peer", "Sizes", "missing", "rows"]


def missing() -> list[Peer]:
    """The peers that are not installed."""
    return load.missing()


def rows(sizes: Sizes | None = None) -> list[Row]:
    """Every comparison with an installed peer; ``[]`` when none is installed."""
    sizes = sizes or Sizes()
    absent = load.missing()
    if absent:
        print(load.missing_message(absent), file=sys.stderr)
    present = [peer for peer in load.PEERS if peer not in absent]
    out: list[Row] = []
    if load.ADK in present or load.LANGGRAPH in present:
        from bench import _peers_mem

        out.extend(_peers_mem.rows(sizes, present))
    if load.OPENAI in present:
        from bench import _peers_sql

        out.extend(_peers_sql.rows(sizes))
    return out
