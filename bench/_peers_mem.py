"""The in-memory stores side by side: agentloopmem vs ADK's and LangGraph's.

One "step" everywhere carries 200 characters of content. Ours appends a
``RunStep`` and reads ``last_n(session, 20)``. ADK appends an ``Event`` with
``append_event`` and reads ``get_session(config=GetSessionConfig(num_recent_events=20))``.
LangGraph keeps the conversation in a graph's ``messages`` channel: each
step is the node's write (``aput_writes``) and a checkpoint (``aput``) whose
new ``messages`` version is the whole list; the newest 20 are sliced from the
latest checkpoint (``aget_tuple``); see :class:`MessagesChannel`. Items are built
before the clock starts.

A session filled to ``history`` gets its history through the public append,
except ADK's: its ``append_event`` scans every stored event for a duplicate id,
so filling 20,000 that way is quadratic; the events go straight onto its lists.
LangGraph's filler checkpoints carry no list but the newest (see :class:`LangGraph`).
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterator
from functools import partial
from typing import Any

import attrs

from agentloop import RunStep, StepType
from agentloopmem import StepStore
from bench import _peers_load as load
from bench._peers_timing import (
    INFO_ONLY,
    Block,
    Series,
    Sizes,
    growth_row,
    per_op_us,
    run_asyncio,
    run_trio,
    speedup_row,
)
from bench._report import Row

CONTENT = "x" * 200
MESSAGE = {"role": "user", "content": CONTENT}  # LangGraph's step
WINDOW = 20
OUR_GROWTH = 1.5  # ours reads and appends cost the same however long the history
_ids = itertools.count()


def new_session_id() -> str:
    """A session id no earlier block used."""
    return f"bench-{next(_ids)}"


@attrs.define
class Handle:
    """One session filled to its history, with the items its timed appends will add."""

    session: Any
    pending: Iterator[Any]
    head: Any = None  # LangGraph: the config of the newest checkpoint, the next one's parent
    length: int = 0  # LangGraph: how many messages the newest checkpoint holds
    version: Any = None  # LangGraph: the newest version of the messages channel


def adk_events(count: int) -> list[Any]:
    """``count`` distinct ADK events of one user message each (each gets its own id:
    ``append_event`` drops a re-delivered one)."""
    types, event = load.module("google.genai.types"), load.module("google.adk.events").Event
    return [
        event(
            author="user",
            invocation_id="bench",
            content=types.Content(role="user", parts=[types.Part(text=CONTENT)]),
        )
        for _ in range(count)
    ]


class Ours:
    """agentloopmem's ``StepStore``, run under trio."""

    label = "ours (agentloopmem)"
    run = staticmethod(run_trio)

    def __init__(self, sizes: Sizes) -> None:
        self.store = StepStore()
        self.ops = sizes.ops

    async def session(self, history: int) -> Handle:
        sid = new_session_id()
        filler = RunStep(sid, 0, StepType.tool_result, content=CONTENT)
        for _ in range(history):
            await self.store.append(filler)
        steps = [
            RunStep(sid, history + i, StepType.tool_result, content=CONTENT)
            for i in range(self.ops)
        ]
        return Handle(sid, iter(steps))

    async def append(self, handle: Handle) -> None:
        await self.store.append(next(handle.pending))

    async def read(self, handle: Handle) -> object:
        return await self.store.last_n(handle.session, WINDOW)


class OursAsyncio(Ours):
    """agentloopmem's ``StepStore``, run under asyncio like the peers."""

    label = "ours (agentloopmem, asyncio)"
    run = staticmethod(run_asyncio)


class Adk:
    """ADK's ``InMemorySessionService``, run under asyncio."""

    run = staticmethod(run_asyncio)
    app, user = "bench", "bench-user"

    def __init__(self, sizes: Sizes) -> None:
        self.label = load.labelled(load.ADK)
        self.service = load.load(load.ADK).InMemorySessionService()
        self.config = load.module("google.adk.sessions.base_session_service").GetSessionConfig(
            num_recent_events=WINDOW
        )
        self.events = adk_events(sizes.big + sizes.ops)
        self.big = sizes.big

    async def session(self, history: int) -> Handle:
        sid = new_session_id()
        session = await self.service.create_session(
            app_name=self.app, user_id=self.user, session_id=sid
        )
        stored = self.service.sessions[self.app][self.user][sid]
        stored.events.extend(self.events[:history])
        if stored is not session:
            session.events.extend(self.events[:history])
        return Handle(session, iter(self.events[self.big :]))

    async def append(self, handle: Handle) -> None:
        await self.service.append_event(handle.session, next(handle.pending))

    async def read(self, handle: Handle) -> object:
        return await self.service.get_session(
            app_name=self.app, user_id=self.user, session_id=handle.session.id, config=self.config
        )


class MessagesChannel:
    """A conversation held as a LangGraph graph holds it, on any checkpoint saver.

    A graph keeps its conversation in the ``messages`` channel (``MessagesState``:
    the list the ``add_messages`` reducer grows). Each step records the node's
    write (``aput_writes``) and then a checkpoint (``aput``) whose new version
    of ``messages`` is the whole list, which the saver serializes as one blob.
    Reading the newest 20 messages reads the thread's latest checkpoint
    (``aget_tuple``) and slices its list. Messages are plain dicts, LangGraph's
    cheapest form (a graph's ``add_messages`` turns them into LangChain message
    objects, which cost more to serialize). A handle's ``session`` is its
    ``(saver, thread config)``.
    """

    def __init__(self) -> None:
        self.base = load.module("langgraph.checkpoint.base")

    def checkpoint(
        self, saver: Any, step: int, messages: list[dict[str, str]] | None, version: str | None
    ) -> tuple[Any, dict[str, Any], dict[str, str]]:
        """The checkpoint after ``step`` (a new version of ``messages``, if given)."""
        checkpoint = self.base.empty_checkpoint()
        new_versions: dict[str, str] = {}
        if messages is not None:
            version = saver.get_next_version(version, None)
            checkpoint["channel_values"] = {"messages": messages}
            new_versions = {"messages": version}
        checkpoint["channel_versions"] = {"messages": version}
        return checkpoint, {"source": "loop", "step": step, "parents": {}}, new_versions

    def newest(self, handle: Handle, history: int) -> tuple[Any, dict[str, Any], dict[str, str]]:
        """The checkpoint holding the whole list of a ``history``-step thread (its last filler)."""
        checkpoint = self.checkpoint(handle.session[0], history - 1, [MESSAGE] * history, None)
        handle.length, handle.version = history, checkpoint[0]["channel_versions"]["messages"]
        return checkpoint

    def plan(self, handle: Handle, count: int) -> None:
        """The checkpoints of the thread's next ``count`` steps, built now (before any clock)."""
        pending = []
        for _ in range(count):
            step, handle.length = handle.length, handle.length + 1
            checkpoint = self.checkpoint(
                handle.session[0], step, [MESSAGE] * handle.length, handle.version
            )
            handle.version = checkpoint[0]["channel_versions"]["messages"]
            pending.append(checkpoint)
        handle.pending = iter(pending)

    async def append(self, handle: Handle) -> None:
        """One step: the node's write, then the checkpoint with the grown list."""
        saver, _ = handle.session
        checkpoint = next(handle.pending)
        task = f"task-{checkpoint[1]['step']}"
        await saver.aput_writes(handle.head, [("messages", [MESSAGE])], task)
        handle.head = await saver.aput(handle.head, *checkpoint)

    async def read(self, handle: Handle) -> object:
        """The newest 20 messages, sliced from the latest checkpoint's list."""
        saver, thread = handle.session
        latest = await saver.aget_tuple(thread)
        return latest.checkpoint["channel_values"]["messages"][-WINDOW:]


class LangGraph:
    """LangGraph's ``InMemorySaver`` holding a conversation the way a graph does
    (:class:`MessagesChannel`), under asyncio.

    The checkpoints a session is filled with go through ``aput`` too, but only
    the newest carries its list: storing every earlier version of a long list
    (what a graph does) would take quadratic time and memory to fill, and
    changes nothing a timed call reads or writes. Each session has its own
    saver, so a block's blobs are freed with it.
    """

    run = staticmethod(run_asyncio)

    def __init__(self, sizes: Sizes) -> None:
        self.label = load.labelled(load.LANGGRAPH)
        self.memory = load.load(load.LANGGRAPH)
        self.channel = MessagesChannel()
        self.ops = sizes.ops

    async def session(self, history: int) -> Handle:
        saver = self.memory.InMemorySaver()
        thread = {"configurable": {"thread_id": new_session_id(), "checkpoint_ns": ""}}
        handle = Handle((saver, thread), iter(()), head=thread)
        for step in range(history - 1):
            filler = self.channel.checkpoint(saver, step, None, None)
            handle.head = await saver.aput(handle.head, *filler)
        if history:
            handle.head = await saver.aput(handle.head, *self.channel.newest(handle, history))
        self.channel.plan(handle, self.ops)
        return handle

    async def append(self, handle: Handle) -> None:
        await self.channel.append(handle)

    async def read(self, handle: Handle) -> object:
        return await self.channel.read(handle)


Subject = Ours | OursAsyncio | Adk | LangGraph


def append_block(subject: Subject, history: int, ops: int) -> Block:
    """Times ``ops`` appends onto a fresh session filled to ``history`` steps."""

    async def block() -> float:
        handle = await subject.session(history)
        return await per_op_us(ops, lambda: subject.append(handle))

    return block


def read_block(subject: Subject, handle: Handle, ops: int) -> Block:
    """Times ``ops`` newest-20 reads of an already filled session."""
    return lambda: per_op_us(ops, lambda: subject.read(handle))


def subjects(sizes: Sizes, peers: list[load.Peer]) -> list[Subject]:
    """Ours (under trio, then under asyncio), then every installed in-memory peer."""
    chosen: list[Subject] = [Ours(sizes), OursAsyncio(sizes)]
    if load.ADK in peers:
        chosen.append(Adk(sizes))
    if load.LANGGRAPH in peers:
        chosen.append(LangGraph(sizes))
    return chosen


def rows(sizes: Sizes, peers: list[load.Peer]) -> list[Row]:
    """Ours vs each in-memory peer at ``sizes.history``, and every store's growth."""
    chosen = subjects(sizes, peers)
    histories = (sizes.small, sizes.history, sizes.big)
    filled = {(s.label, h): s.run(partial(s.session, h)) for s in chosen for h in histories}
    appends: dict[tuple[str, int], list[float]] = defaultdict(list)
    reads: dict[tuple[str, int], list[float]] = defaultdict(list)
    for _ in range(sizes.rounds):
        for h in histories:
            for s in chosen:
                appends[s.label, h].append(s.run(append_block(s, h, sizes.ops)))
                reads[s.label, h].append(s.run(read_block(s, filled[s.label, h], sizes.ops)))
    ours = {chosen[0].label: "", chosen[1].label: " [asyncio]"}
    out: list[Row] = []
    for kind, series in (("append", appends), ("newest-20 read", reads)):
        mid = sizes.history
        for mine, suffix in ours.items():
            for peer in chosen[2:]:
                out.append(
                    speedup_row(
                        f"mem {kind} @{mid:,}{suffix}",
                        peer.label,
                        Series(series[mine, mid]),
                        Series(series[peer.label, mid]),
                        1.0,
                    )
                )
        for s in chosen:
            out.append(
                growth_row(
                    f"mem {kind} {sizes.big:,} vs {sizes.small:,}",
                    s.label,
                    Series(series[s.label, sizes.small]),
                    Series(series[s.label, sizes.big]),
                    OUR_GROWTH if s.label in ours else INFO_ONLY,
                )
            )
    return out
