"""Ending a clause whose store never returns, or spins without ever yielding to the event loop,
and saying which store call it was.

A deadline (an anyio cancel scope) ends a call that awaits forever, but not
one that spins in Python on the event-loop thread: a cancellation is
delivered at a checkpoint, and a spinning call reaches none. :func:`watched`
adds a watchdog thread. When the deadline has passed and the event loop has
been stuck in one task step for more than :data:`GRACE` seconds, it raises
:class:`StoreSpun` inside the event-loop thread with
``PyThreadState_SetAsyncExc``, which Python delivers between two bytecodes of
whatever that thread runs: the spinning store code. It repeats every
:data:`GRACE` seconds while the step goes on (a store that swallows
``BaseException``).

How the watchdog knows a step is running differs per backend: under trio an
instrument marks the start and end of each task step; under asyncio, which
has no instruments, a callback re-armed on the loop every ``GRACE / 5``
seconds marks that the loop is turning, so a mark older than :data:`GRACE`
means one step (or one blocking call) holds the thread.

Out of reach, and documented as such: a spin inside one C call (a blocking
``time.sleep``, a C extension's loop) gets the exception only when the call
returns; a store that waits in a shielded cancel scope forever is neither
cancellable nor spinning; code spinning on another thread is not the event
loop's.
"""

from __future__ import annotations

import asyncio
import ctypes
import importlib.util
import linecache
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType

import anyio
import trio

from agentloop._shared import on_trio
from agentlooptest._clause import Violation

SPIN_HINT = (
    "a loop that polls a cache or flag without awaiting, or blocking work (a sync driver, "
    "time.sleep) on the event-loop thread"
)
HANG_HINT = "a lock or connection never released, or an await on an event nobody sets"

GRACE = 0.25
"""Seconds a task step may run past the deadline before it is interrupted as spinning."""

_HERE = Path(__file__).resolve().parent
_CLAUSES = _HERE / "_clauses"


def _package(name: str) -> Path:
    """Where package ``name`` lives, found without importing it (hypothesis imports pytest)."""
    spec = importlib.util.find_spec(name)
    origin = spec.origin if spec is not None and spec.origin else __file__
    return Path(origin).resolve().parent


_LIBRARY = (
    _HERE,
    *(_package(name) for name in ("trio", "outcome", "hypothesis", "anyio", "sniffio")),
    Path(threading.__file__).resolve().parent,  # the standard library
)


class StoreSpun(BaseException):
    """Raised in the event-loop thread when a call ran past the deadline without yielding.

    A ``BaseException``, so a store's ``except Exception`` does not swallow it.
    """


class Hung(Exception):
    """The watched block still awaited at its deadline; ``stuck`` is what ended it there.

    ``stuck`` is the cancellation (or the exception group holding it) that
    unwound the block, its traceback ending where the block waited.
    """

    def __init__(self, seconds: float, stuck: BaseException | None) -> None:
        super().__init__(f"still running after {seconds:g}s")
        self.stuck = stuck


class _Watch:
    """Knows whether a task step is running, and since when; its thread interrupts an overrun."""

    def __init__(self, seconds: float) -> None:
        self.deadline = time.monotonic() + seconds
        self.thread_id = threading.get_ident()
        self.step_started: float | None = time.monotonic()  # made inside a task step
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.fired = False

    def watch(self) -> None:
        while not self.done.wait(GRACE / 2):
            now = time.monotonic()
            with self.lock:
                started = self.step_started
                if now >= self.deadline and started is not None and now - started >= GRACE:
                    self.fired = True
                    self.step_started = now  # again after another GRACE, if it goes on
                    ctypes.pythonapi.PyThreadState_SetAsyncExc(
                        ctypes.c_ulong(self.thread_id), ctypes.py_object(StoreSpun)
                    )


class _Steps(trio.abc.Instrument):
    """Under trio: marks the start and the end of every task step."""

    def __init__(self, watch: _Watch) -> None:
        self.w = watch

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.w.step_started = time.monotonic()

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        with self.w.lock:
            self.w.step_started = None


def _on_trio(watch: _Watch) -> Callable[[], None]:
    instrument = _Steps(watch)
    trio.lowlevel.add_instrument(instrument)
    return lambda: trio.lowlevel.remove_instrument(instrument)


def _on_asyncio(watch: _Watch) -> Callable[[], None]:
    """Under asyncio: a callback re-armed every GRACE / 5 marks that the loop is turning."""
    loop = asyncio.get_running_loop()
    handle: list[asyncio.TimerHandle] = []

    def beat() -> None:
        with watch.lock:
            watch.step_started = time.monotonic()
        handle[:] = [loop.call_later(GRACE / 5, beat)]

    beat()
    return lambda: handle[0].cancel()


@contextmanager
def watched(seconds: float) -> Iterator[None]:
    """Cancel the block after ``seconds``; also interrupt a task step spinning past them.

    Works under trio and asyncio (see the module docstring).

    Raises:
        Hung: the block awaited past ``seconds``.
        StoreSpun: the block ran past ``seconds`` without yielding to the event loop.
    """
    watch = _Watch(seconds)
    thread = threading.Thread(target=watch.watch, name="agentlooptest-watchdog", daemon=True)
    detach = _on_trio(watch) if on_trio() else _on_asyncio(watch)
    thread.start()
    stuck: BaseException | None = None
    try:
        with anyio.CancelScope(deadline=anyio.current_time() + seconds) as scope:
            try:
                yield
            except BaseException as exc:
                stuck = exc
                raise
    finally:
        watch.done.set()
        detach()
    if scope.cancelled_caught:
        raise Hung(seconds, stuck)


def _frames(exc: BaseException) -> list[tuple[str, int, str]]:
    """``(filename, line, qualified name)`` from the outermost frame to where ``exc`` was raised."""
    frames: list[tuple[str, int, str]] = []
    while True:
        tb: TracebackType | None = exc.__traceback__
        while tb is not None:
            code = tb.tb_frame.f_code
            frames.append((code.co_filename, tb.tb_lineno, code.co_qualname))
            tb = tb.tb_next
        if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
            leaves: list[BaseException] = list(exc.exceptions)
            exc = next((e for e in leaves if isinstance(e, StoreSpun)), leaves[0])
            continue
        return frames


def _library(filename: str) -> bool:
    path = Path(filename).resolve()
    return filename.startswith("<") or any(path.is_relative_to(p) for p in _LIBRARY)


def _show(frame: tuple[str, int, str]) -> str:
    filename, line, name = frame
    return f"{name} ({Path(filename).name}:{line})"


def stalled_call(exc: BaseException) -> tuple[str, str]:
    """What a stuck clause was doing when ``exc`` ended it: its line, and the store call.

    The first is the clause's source line (``await store.get(sid)``); the
    second names the first store (or harness) frame it called and, when
    deeper, the one it was stuck in. Either is ``""`` when not found.
    """
    frames = _frames(exc)
    clause_line = ""
    for filename, line, _ in frames:
        path = Path(filename).resolve()
        if path.is_relative_to(_CLAUSES) and not path.name.startswith("_"):  # not a helper
            clause_line = linecache.getline(filename, line).strip()
    outside = [f for f in frames if not _library(f[0])]
    if not outside:
        return clause_line, ""
    call = _show(outside[0])
    if len(outside) > 1:
        call += f", at {_show(outside[-1])}"
    return clause_line, call


def stall_violation(exc: BaseException, seconds: float, *, spun: bool) -> Violation:
    """The failure for a call that never returned (``spun=False``) or never yielded."""
    line, call = stalled_call(exc)
    did = f"`{line}`, in the clause's check" if line else "ran the clause's check"
    who = f"the store call {call}" if call else "a call into the store"
    if spun:
        return Violation(
            did,
            f"every store call to return, or at least yield to the event loop, within {seconds:g}s",
            f"{who} ran past {seconds:g}s without ever yielding to the event loop",
            "a call that spins without awaiting freezes every task of the loop's process; "
            "no timeout or cancellation can reach it",
            hint=SPIN_HINT,
        )
    return Violation(
        did,
        f"it to finish within {seconds:g}s",
        f"it was still running: {who} never returned",
        "a store call that hangs stalls the loop's run forever",
        hint=HANG_HINT,
    )
