"""Ours vs the peers, doing the same work in one process (``python -m bench --peers``).

Ours runs under trio, each peer under asyncio; every figure is the median of
per-round ratios with their min-max. A "vs" row is peer time / our time (above
1: ours is faster); a growth row is time at ``Sizes.big`` / time at
``Sizes.small`` steps of history. The PostgreSQL rows run on the server of
``AGENTLOOP_PG_DSN`` (else ``postgresql://postgres@127.0.0.1:5432/test``),
with a raw psycopg reference line beside the peers, then each of our reads
under trio and asyncio against raw psycopg's (``bench._floor_pg``). The peers are optional:
``pip install -e '.[peers]'`` installs them all; a peer that is missing is left
out, and :func:`rows` says so on stderr, as it does when the server cannot be
reached.
"""

from __future__ import annotations

import os
import sys

from bench import _peers_load as load
from bench._peers_load import PEERS, Peer
from bench._peers_timing import Sizes
from bench._report import Row

__all__ = ["DSN_VARIABLE", "PEERS", "Peer", "Sizes", "missing", "rows"]

DSN_VARIABLE = "AGENTLOOP_PG_DSN"


def missing() -> list[Peer]:
    """The peers that are not installed."""
    return load.missing()


def rows(sizes: Sizes | None = None, pg_dsn: str | None = None) -> list[Row]:
    """Every comparison with an installed peer; ``[]`` when none is installed.

    ``pg_dsn`` is the PostgreSQL server's (``None``: ``AGENTLOOP_PG_DSN``, else
    the local default); when no connection can be made there, the PostgreSQL
    rows are left out and stderr says why.
    """
    sizes = sizes or Sizes()
    absent = load.missing()
    if absent:
        print(load.missing_message(absent), file=sys.stderr)
    present = [peer for peer in load.PEERS if peer not in absent]
    out: list[Row] = []
    if any(peer in present for peer in load.IN_MEMORY):
        from bench import _peers_mem

        out.extend(_peers_mem.rows(sizes, present))
    if load.OPENAI in present:
        from bench import _peers_sql

        out.extend(_peers_sql.rows(sizes))
    on_postgres = [peer for peer in load.ON_POSTGRES if peer in present]
    if on_postgres:
        from bench import _peers_pg

        dsn = pg_dsn or os.environ.get(DSN_VARIABLE) or _peers_pg.DEFAULT_DSN
        why = _peers_pg.unreachable(dsn)
        if why is None:
            from bench import _floor_pg

            out.extend(_peers_pg.rows(sizes, on_postgres, dsn))
            out.extend(_floor_pg.rows(sizes, dsn))
        else:
            print(
                f"PostgreSQL peers left out: no connection to {dsn} ({why}); "
                f"set {DSN_VARIABLE} to a server's DSN",
                file=sys.stderr,
            )
    return out
