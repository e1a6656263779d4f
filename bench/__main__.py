"""``python -m bench [SECTION ...]``: print every section's ratios as one table.

Exits 0 whatever the ratios: a benchmark reports, the tests assert.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from bench import loop, mem, sql
from bench._report import Row, render

SECTIONS: dict[str, Callable[[], list[Row]]] = {
    "mem": mem.rows,
    "loop": loop.rows,
    "sql": sql.rows,
}


def main(argv: list[str]) -> int:
    chosen = argv or list(SECTIONS)
    unknown = [name for name in chosen if name not in SECTIONS]
    if unknown:
        print(f"unknown section(s) {unknown}; choose from {sorted(SECTIONS)}", file=sys.stderr)
        return 2
    rows: list[Row] = []
    for name in chosen:
        print(f"measuring {name} ...", file=sys.stderr, flush=True)
        rows.extend(SECTIONS[name]())
    print(render(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
