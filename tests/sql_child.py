"""Child process for the reliability tests: append steps, print each acknowledged index.

usage: python sql_child.py sqlite PATH SESSION COUNT [TAG]
       python sql_child.py postgres DSN:SCHEMA SESSION COUNT [TAG]

For SQLite, ``AGENTLOOP_CHILD_SYNCHRONOUS`` picks the ``synchronous`` level
(default ``full``). Prints ``ready`` once the store is open, then the index
of every step after its ``append`` returned, one per line, flushed. ``TAG`` goes into each step's
content (``TAG:index``) so interleaved writers can be told apart.
"""

from __future__ import annotations

import os
import sys

import trio

from agentloop import RunStep
from agentloopsql import PostgresStore, SqliteStore


async def main(kind: str, target: str, session: str, count: int, tag: str) -> None:
    if kind == "sqlite":
        level = os.environ.get("AGENTLOOP_CHILD_SYNCHRONOUS", "full")
        store: SqliteStore | PostgresStore = await SqliteStore.open(target, synchronous=level)
    else:
        dsn, _, schema = target.rpartition(":")
        store = await PostgresStore.open(dsn, schema=schema, pool_size=1)
    print("ready", flush=True)
    for index in range(count):
        await store.append(RunStep(session, index, "tool_result", content=f"{tag}:{index}"))
        print(index, flush=True)
    await store.aclose()


if __name__ == "__main__":
    kind, target, session, count = sys.argv[1:5]
    tag = sys.argv[5] if len(sys.argv) > 5 else ""
    trio.run(main, kind, target, session, int(count), tag)
