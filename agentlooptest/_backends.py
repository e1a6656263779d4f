"""The two backends the contract runs on, and telling a store that needs the other one.

The contract itself is written against anyio, so
``await certify(harness)`` runs under whichever backend awaits it. A store
need not be: one built on ``redis.asyncio`` or ``asyncio.get_running_loop()``
only runs under asyncio, one calling ``trio`` directly only under trio.
Certified under the other backend such a store fails every clause with the
same error; :func:`needs_other` recognises that error so the contract says
once which backend to use instead.
"""

from __future__ import annotations

import asyncio
import re
import traceback
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, Literal, TypeVar

import anyio
import trio

from agentloop._shared import on_trio

T = TypeVar("T")

Backend = Literal["trio", "asyncio"]

BACKENDS: tuple[Backend, ...] = ("trio", "asyncio")
"""The backends the contract runs on; trio is the default everywhere."""

_ASYNCIO_DIR = Path(asyncio.__file__).resolve().parent
_TRIO_DIR = Path(trio.__file__).resolve().parent
_LIBRARIES = (_ASYNCIO_DIR, _TRIO_DIR, Path(anyio.__file__).resolve().parent)

_NEEDS_ASYNCIO = re.compile(
    r"no (running|current) event loop|unrecognized yield message|\basyncio\b", re.IGNORECASE
)
_NEEDS_TRIO = re.compile(
    r"must be called from async context|bad yield.*trio|'RunContext' object|\btrio\b",
    re.IGNORECASE,
)


def current() -> Backend:
    """The backend running the calling task."""
    return "trio" if on_trio() else "asyncio"


def run_in(
    backend: Backend,
    fn: Callable[..., Awaitable[T]],
    *args: object,
    options: dict[str, Any] | None = None,
) -> T:
    """Run ``fn(*args)`` to completion in a new event loop of ``backend``.

    Under trio without options this is plain ``trio.run``, as the contract
    always ran.
    """
    if backend == "trio" and not options:
        return trio.run(fn, *args)
    return anyio.run(fn, *args, backend=backend, backend_options=options)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc``, the exceptions it was raised from or during, and those in its groups."""
    seen: set[int] = set()
    todo = [exc]
    while todo and len(seen) < 50:
        e = todo.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        if isinstance(e, BaseExceptionGroup):
            todo.extend(e.exceptions)
        todo.extend(x for x in (e.__cause__, e.__context__) if x is not None)


def _raised_in(exc: BaseException) -> Path | None:
    tb = exc.__traceback__
    if tb is None:
        return None
    while tb.tb_next is not None:
        tb = tb.tb_next
    return Path(tb.tb_frame.f_code.co_filename).resolve()


def _says_other(exc: BaseException, running: Backend) -> bool:
    if not isinstance(exc, (RuntimeError, TypeError, AttributeError)):
        return False
    pattern, other_dir = (
        (_NEEDS_ASYNCIO, _ASYNCIO_DIR) if running == "trio" else (_NEEDS_TRIO, _TRIO_DIR)
    )
    where = _raised_in(exc)
    return bool(pattern.search(str(exc))) or (where is not None and where.is_relative_to(other_dir))


def needs_other(
    exc: BaseException | None, running: Backend
) -> tuple[Backend, BaseException] | None:
    """The backend a store needs, and the error telling it, when ``exc`` says ``running`` is wrong.

    Recognised, in ``exc`` or anything it was raised from or during: under
    trio, asyncio's ``no running event loop``, trio's ``unrecognized yield
    message`` (an asyncio future awaited), an error raised inside asyncio or
    naming it; under asyncio, trio's ``must be called from async context``,
    asyncio's ``bad yield`` of a trio trap, an error raised inside trio or
    naming it. Only ``RuntimeError``, ``TypeError`` and ``AttributeError``
    count. ``None`` when nothing says so.
    """
    if exc is None:
        return None
    for e in _chain(exc):
        if _says_other(e, running):
            return ("asyncio" if running == "trio" else "trio"), e
    return None


def wrong_backend_message(
    what: str, title: str, running: Backend, need: Backend, error: BaseException
) -> str:
    """The one message for a store that cannot run on ``running``: which backend to use, and how."""
    where = ""
    frames = [
        f
        for f in traceback.extract_tb(error.__traceback__)
        if not any(Path(f.filename).resolve().is_relative_to(d) for d in _LIBRARIES)
    ]
    if frames:  # the store's own line that called into the backend
        last = frames[-1]
        where = f"\n  at:       {Path(last.filename).name}:{last.lineno} ({last.name})"
    first_line = (str(error).splitlines() or [""])[0]
    return (
        f"[{what}] {title}\n"
        f"  the store needs {need}: under {running} it raised "
        f"{type(error).__name__}: {first_line}{where}\n"
        f"  run the contract under {need}: `agentlooptest certify --backend {need} TARGET`, "
        f"`await certify(harness)` inside {need}, or `backend = {need!r}` on the pytest "
        "contract class\n"
        "  (every other clause is not run: each would fail with this same error)"
    )
