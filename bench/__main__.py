"""``python -m bench [--peers] [SECTION ...]``: print every section's ratios as one table.

With no section named, every section runs; ``--peers`` alone runs only the
comparison with the peer libraries (``bench.peers``), and with sections named
it runs after them. Exits 0 whatever the ratios: a benchmark reports, the
tests assert. Exits 2 on an unknown section, or when ``--peers`` is asked for
and no peer is installed (the message says how to install them); a peer that
is missing while others are installed is named on stderr and left out.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from bench import batches, lifecycle, loop, mem, peers, sql
from bench._peers_load import missing_message
from bench._report import Row, render

SECTIONS: dict[str, Callable[[], list[Row]]] = {
    "mem": mem.rows,
    "loop": loop.rows,
    "sql": sql.rows,
    "batches": batches.rows,
    "lifecycle": lifecycle.rows,
}


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("sections", nargs="*", metavar="SECTION", help=f"any of {list(SECTIONS)}")
    parser.add_argument("--peers", action="store_true", help="compare with the peer libraries")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = _parse(argv)
    chosen: list[str] = args.sections or ([] if args.peers else list(SECTIONS))
    unknown = [name for name in chosen if name not in SECTIONS]
    if unknown:
        print(f"unknown section(s) {unknown}; choose from {sorted(SECTIONS)}", file=sys.stderr)
        return 2
    if args.peers and len(peers.missing()) == len(peers.PEERS):
        print(missing_message(peers.missing()), file=sys.stderr)
        return 2
    rows: list[Row] = []
    for name in chosen:
        print(f"measuring {name} ...", file=sys.stderr, flush=True)
        rows.extend(SECTIONS[name]())
    if args.peers:
        print("measuring peers ...", file=sys.stderr, flush=True)
        rows.extend(peers.rows())
    print(render(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
