"""Child process for the lease tests: ``Loop.run`` on a SQL store shared with other processes.

usage: python lease_child.py runs KIND TARGET TAG RUNS SESSION...
       python lease_child.py hold KIND TARGET SESSION

KIND is ``sqlite`` (TARGET: the file) or ``postgres`` (TARGET: ``DSN:SCHEMA``).

``runs``: ``RUNS`` runs, on the sessions in turn; each run's message is its tag
``TAG-n``, and every step it writes carries that tag. Prints one JSON line per
run: ``{"tag", "session", "outcome"}`` with outcome ``completed``, ``busy``
(``SessionBusyError``) or the exception's type name.

``hold``: one run whose tool prints ``in-tool`` and naps 2 s (time for the test
to stop this process past its lease's TTL and let another process take the
lease over); then, with the lease that run held, one write of each kind
through its fenced view. Prints one JSON line: ``{"run": outcome, "writes":
{operation: outcome}}``.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import trio

from agentloop import (
    FinalizeSummary,
    Lease,
    LeaseLostError,
    Loop,
    LoopConfig,
    ModelReply,
    ModelRequest,
    RunStep,
    Session,
    SessionBusyError,
    Tool,
    ToolCall,
    ToolContext,
)
from agentloopsql import PostgresStore, SqliteStore


class TagModel:
    """Asks for ``nap`` with the run's tag, then answers ``done <tag>``."""

    async def complete(self, request: ModelRequest) -> ModelReply:
        last = request.messages[-1]
        if last.role == "user":
            call = ToolCall(f"c-{last.content}", "nap", json.dumps({"tag": last.content}))
            return ModelReply(tool_calls=(call,))
        return ModelReply(content=f"done {last.content}")


def nap_tool(seconds: float, announce: bool) -> Tool:
    async def nap(args: dict[str, Any], ctx: ToolContext) -> str:
        if announce:
            print("in-tool", flush=True)
        await trio.sleep(seconds)
        return str(args["tag"])

    return Tool("nap", "sleeps a little", {"type": "object"}, nap)


async def open_store(kind: str, target: str) -> SqliteStore | PostgresStore:
    if kind == "sqlite":
        return await SqliteStore.open(target)
    dsn, _, schema = target.rpartition(":")
    return await PostgresStore.open(dsn, schema=schema, pool_size=2)


def outcome(exc: BaseException | None) -> str:
    if exc is None:
        return "completed"
    return "busy" if isinstance(exc, SessionBusyError) else type(exc).__name__


async def runs(store: SqliteStore | PostgresStore, tag: str, count: int, ids: list[str]) -> None:
    config = LoopConfig(lease_ttl=5, lease_wait=1)
    loop = Loop(
        TagModel(), steps=store, sessions=store, tools=[nap_tool(0.02, False)], config=config
    )
    for n in range(count):
        session, run_tag = ids[n % len(ids)], f"{tag}-{n}"
        failure: Exception | None = None
        try:
            await loop.run(session, run_tag)
        except Exception as exc:
            failure = exc
        print(
            json.dumps(
                {
                    "tag": run_tag,
                    "session": session,
                    "outcome": outcome(failure),
                    "detail": "" if failure is None else str(failure)[:300],
                }
            ),
            flush=True,
        )


async def fenced_writes(store: SqliteStore | PostgresStore, lease: Lease) -> dict[str, str]:
    """Each kind of write through the lost lease's view, and ``renew_lease``: what each raised."""
    view, sid = store.fenced(lease), lease.session_id
    summary = FinalizeSummary(status="completed")
    writes = {
        "append": lambda: view.append(RunStep(sid, 1000, "tool_result", content="late")),
        "update_data": lambda: view.update_data(sid, '{"late": true}'),
        "finalize": lambda: view.finalize(sid, summary),
        "put": lambda: view.put(Session(id=sid, data='{"late": true}')),
        "renew_lease": lambda: store.renew_lease(lease, 5),
    }
    seen: dict[str, str] = {}
    for name, write in writes.items():
        try:
            await write()
            seen[name] = "written"
        except LeaseLostError:
            seen[name] = "LeaseLostError"
        except Exception as exc:
            seen[name] = type(exc).__name__
    return seen


async def hold(store: SqliteStore | PostgresStore, session: str) -> None:
    leases: list[Lease] = []
    acquire = store.acquire_lease

    async def recording(session_id: str, owner: str, ttl: float) -> Lease | None:
        lease = await acquire(session_id, owner, ttl)
        if lease is not None:
            leases.append(lease)
        return lease

    store.acquire_lease = recording  # type: ignore[method-assign]
    config = LoopConfig(lease_ttl=1, lease_wait=0)
    loop = Loop(TagModel(), steps=store, sessions=store, tools=[nap_tool(2, True)], config=config)
    failure: Exception | None = None
    try:
        await loop.run(session, "held")
    except Exception as exc:
        failure = exc
    writes = await fenced_writes(store, leases[0])
    print(json.dumps({"run": outcome(failure), "writes": writes}), flush=True)


async def main(argv: list[str]) -> None:
    mode, kind, target = argv[:3]
    store = await open_store(kind, target)
    try:
        if mode == "runs":
            await runs(store, argv[3], int(argv[4]), argv[5:])
        else:
            await hold(store, argv[3])
    finally:
        await store.aclose()


if __name__ == "__main__":
    trio.run(main, sys.argv[1:])
