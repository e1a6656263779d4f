"""Moving sessions between stores: one versioned JSON Lines format, export, import and copy.

Everything here goes through the protocols and optional capabilities only, so it
works for any certified store, in memory, on SQLite or on PostgreSQL, and
between any two of them.

**The format** (version 1), one JSON object per line, UTF-8:

- a header first: ``{"format": "agentloop-sessions", "version": 1}``;
- per session, a ``{"session": {...}}`` record: ``id``, ``model``,
  ``system_prompt``, ``data`` (the working memory as canonical JSON text, or
  ``null`` for none), ``row`` (``false`` for a session that has steps but no
  session row), ``labels``, ``created_at`` / ``updated_at`` (ISO 8601,
  microseconds, UTC; ``null`` when the source store could not tell them),
  ``step_count`` (the run total as recorded) and ``final`` (the latest run
  summary's fields, or ``null``);
- then that session's steps, oldest first, one ``{"step": {...}}`` record each:
  ``step_index``, ``step_type``, ``content``, ``tool_args`` (canonical JSON
  text), ``duration_ms``, ``prompt_tokens``, ``completion_tokens``,
  ``created_at``;
- last, ``{"end": {"sessions": N, "steps": M}}``, so a truncated file is told
  from a whole one.

JSON texts are written canonically (keys sorted, no spaces), so an export of
what was imported gives the same records whatever the two stores are (a store
may keep JSON re-serialized, as ``jsonb`` does). A reader refuses a newer
version with a clear error.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable, Sequence
from contextlib import aclosing
from datetime import datetime
from typing import Any

import anyio
import attrs

from agentloop._errors import SessionExistsError
from agentloop._protocols import (
    SessionStore,
    StepStore,
    SupportsAll,
    SupportsDeleteSession,
    SupportsFinal,
    SupportsLabels,
    SupportsListSessions,
    SupportsPaging,
    SupportsPut,
    SupportsRestore,
    SupportsRevisions,
    SupportsStepsAfter,
    append_all,
)
from agentloop._types import FinalizeSummary, RunStep, Session, SessionInfo
from agentloop._validate import check_session_ids, preview

FORMAT = "agentloop-sessions"
VERSION = 1
_CHUNK = 1000  # steps read or written per store call
_Progress = Callable[[int, int], None]


@attrs.frozen
class TransferReport:
    """What an export, import or copy did.

    ``sessions`` / ``steps``: how many it moved. ``changed``: sessions written
    while an export or copy read them (their record may mix two moments).
    ``replaced``: sessions that existed and were replaced (``replace=True``).
    ``notes``: anything else worth knowing, e.g. that the destination had no
    ``restore_session``, so run totals and times started afresh.
    """

    sessions: int
    steps: int
    changed: tuple[str, ...] = ()
    replaced: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


def _canonical(text: str) -> str:
    return json.dumps(json.loads(text), ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def _time(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


def _line(record: dict[str, Any]) -> str:
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"


def _session_line(
    session: Session, row: bool, info: SessionInfo | None, final: FinalizeSummary | None
) -> str:
    return _line(
        {
            "session": {
                "id": session.id,
                "model": session.model,
                "system_prompt": session.system_prompt,
                "data": _canonical(session.data) if session.data is not None else None,
                "row": row,
                "labels": dict(info.labels) if info is not None else {},
                "created_at": _time(info.created_at if info is not None else None),
                "updated_at": _time(info.updated_at if info is not None else None),
                "step_count": info.step_count if info is not None else 0,
                "final": attrs.asdict(final) if final is not None else None,
            }
        }
    )


def _step_line(step: RunStep) -> str:
    fields = {
        "step_index": step.step_index,
        "step_type": step.step_type.value,
        "content": step.content,
        "tool_args": _canonical(step.tool_args),
        "duration_ms": step.duration_ms,
        "prompt_tokens": step.prompt_tokens,
        "completion_tokens": step.completion_tokens,
        "created_at": step.created_at.isoformat(),
    }
    return _line({"step": fields})


# -- reading a store -----------------------------------------------------------------------


async def _session_ids(
    sessions: SessionStore, chosen: Sequence[str] | None
) -> AsyncGenerator[str, None]:
    """The ids to move: those chosen, else every session, oldest first where the store pages."""
    if chosen is not None:
        for session_id in check_session_ids(chosen):
            yield session_id
        return
    if isinstance(sessions, SupportsPaging):
        cursor = None
        while True:
            page = await sessions.page_sessions(limit=500, cursor=cursor, order="created")
            for info in page.sessions:
                yield info.id
            if page.cursor is None:
                return
            cursor = page.cursor
    if isinstance(sessions, SupportsListSessions):
        for info in reversed(await sessions.list_sessions(limit=2**31 - 1)):
            yield info.id
        return
    raise TypeError(
        "the session store can neither page nor list its sessions: name the sessions to move"
    )


async def _steps_of(steps: StepStore, session_id: str) -> AsyncGenerator[list[RunStep], None]:
    """The session's steps in chunks, oldest first (``steps_after`` where the store has it)."""
    if isinstance(steps, SupportsStepsAfter):
        read = 0
        while True:
            chunk = await steps.steps_after(session_id, read, _CHUNK)
            if chunk:
                yield chunk
            if len(chunk) < _CHUNK:
                return
            read += len(chunk)
    if isinstance(steps, SupportsAll):
        every = await steps.all(session_id)
        for start in range(0, len(every), _CHUNK):
            yield every[start : start + _CHUNK]
        return
    raise TypeError("the step store can read no whole trace (it has neither steps_after nor all)")


async def _mark(sessions: SessionStore, session_id: str) -> object:
    """What tells whether the session was written meanwhile: its revision, else its info."""
    if isinstance(sessions, SupportsRevisions):
        return await sessions.revision(session_id)
    if isinstance(sessions, SupportsPaging):
        return await sessions.session_info(session_id)
    return None


async def _session_records(
    steps: StepStore, sessions: SessionStore, session_id: str, tally: list[int]
) -> AsyncGenerator[str, None]:
    """The lines of one session; ``tally`` counts ``[steps, changed]``."""
    before = await _mark(sessions, session_id)
    row = await sessions.exists(session_id)
    session = await sessions.get(session_id)
    info = await sessions.session_info(session_id) if isinstance(sessions, SupportsPaging) else None
    final = await sessions.final(session_id) if isinstance(sessions, SupportsFinal) else None
    yield _session_line(session, row, info, final)
    async with aclosing(_steps_of(steps, session_id)) as chunks:
        async for chunk in chunks:
            tally[0] += len(chunk)
            for step in chunk:
                yield _step_line(step)
    if before != await _mark(sessions, session_id):
        tally[1] += 1


async def export_lines(
    steps: StepStore,
    sessions: SessionStore,
    *,
    session_ids: Sequence[str] | None = None,
    changed: list[str] | None = None,
    on_progress: _Progress | None = None,
) -> AsyncGenerator[str, None]:
    """The export of the sessions asked for (every session when ``None``), line by line.

    Streams: memory stays bounded however many steps a session has. Sessions
    are read oldest first where the store pages (``order="created"``), so a
    session written while the export runs is still read once; its id is
    appended to ``changed`` when given.
    """
    yield _line({"format": FORMAT, "version": VERSION})
    done = 0
    tally = [0, 0]
    async with aclosing(_session_ids(sessions, session_ids)) as chosen:
        async for session_id in chosen:
            was_changed = tally[1]
            async with aclosing(_session_records(steps, sessions, session_id, tally)) as lines:
                async for line in lines:
                    yield line
            if tally[1] != was_changed and changed is not None:
                changed.append(session_id)
            done += 1
            if on_progress is not None:
                on_progress(done, tally[0])
    yield _line({"end": {"sessions": done, "steps": tally[0]}})


async def export_sessions(
    steps: StepStore,
    sessions: SessionStore,
    path: str | os.PathLike[str],
    *,
    session_ids: Sequence[str] | None = None,
    on_progress: _Progress | None = None,
) -> TransferReport:
    """Write the sessions asked for (every session when ``None``) to ``path`` as JSON Lines.

    See the module docstring for the format. The file is written as the stores
    are read (off the event loop thread), in bounded memory.

    Raises:
        TypeError, ValueError: bad ``session_ids``, or a store that can neither
            list its sessions nor read a whole trace.
        OSError: ``path`` cannot be written.
        Whatever the stores raise.
    """
    changed: list[str] = []
    count = [0, 0]

    def progress(done: int, moved: int) -> None:
        count[0], count[1] = done, moved
        if on_progress is not None:
            on_progress(done, moved)

    async with await anyio.open_file(path, "w", encoding="utf-8") as out:
        lines = export_lines(
            steps, sessions, session_ids=session_ids, changed=changed, on_progress=progress
        )
        buffer: list[str] = []
        async with aclosing(lines):
            async for line in lines:
                buffer.append(line)
                if len(buffer) >= _CHUNK:  # one write, so one thread hop, per chunk of lines
                    await out.write("".join(buffer))
                    buffer.clear()
        await out.write("".join(buffer))
    return TransferReport(count[0], count[1], changed=tuple(changed))


# -- reading an export ---------------------------------------------------------------------


class _Bad(ValueError):
    """A line of an export that is not what the format says."""


def _time_of(value: object, field: str) -> datetime:
    if not isinstance(value, str):
        raise _Bad(f"{field} must be an ISO 8601 time, got {preview(value)}")
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise _Bad(f"{field} must be an ISO 8601 time, got {preview(value)}") from None
    if moment.utcoffset() is None:
        raise _Bad(f"{field} must carry its UTC offset, got {preview(value)}")
    return moment


def _fields(record: object, kind: str, names: Iterable[str]) -> dict[str, Any]:
    if not isinstance(record, dict):
        raise _Bad(f"a {kind} record must be a JSON object, got {preview(record)}")
    missing = [name for name in names if name not in record]
    if missing:
        raise _Bad(f"the {kind} record lacks {', '.join(missing)}")
    return record


_SESSION_FIELDS = (
    "id", "model", "system_prompt", "data", "row", "labels", "created_at", "updated_at",
    "step_count", "final",
)  # fmt: skip
_STEP_FIELDS = (
    "step_index", "step_type", "content", "tool_args", "duration_ms", "prompt_tokens",
    "completion_tokens", "created_at",
)  # fmt: skip


@attrs.frozen
class _SessionRecord:
    """One session of an export: what ``restore_session`` takes (``info`` ``None``: its times
    are unknown; ``row`` false: it has steps only)."""

    session: Session
    row: bool
    info: SessionInfo | None
    final: FinalizeSummary | None


def _session_of(record: object) -> _SessionRecord:
    fields = _fields(record, "session", _SESSION_FIELDS)
    data = fields["data"]
    session = Session(fields["id"], fields["model"], fields["system_prompt"], data)
    final = (
        None
        if fields["final"] is None
        else FinalizeSummary(**_fields(fields["final"], "final", ()))
    )
    row = fields["row"]
    if not isinstance(row, bool):
        raise _Bad(f"row must be true or false, got {preview(row)}")
    if fields["created_at"] is None or not row:
        return _SessionRecord(session, row, None, final)
    info = SessionInfo(
        session.id,
        final.status if final is not None else None,
        fields["step_count"],
        _time_of(fields["created_at"], "created_at"),
        _time_of(fields["updated_at"], "updated_at"),
        labels=fields["labels"],
    )
    return _SessionRecord(session, row, info, final)


def _step_of(record: object, session_id: str) -> RunStep:
    fields = _fields(record, "step", _STEP_FIELDS)
    return RunStep(
        session_id,
        fields["step_index"],
        fields["step_type"],
        fields["content"],
        fields["tool_args"],
        fields["duration_ms"],
        fields["prompt_tokens"],
        fields["completion_tokens"],
        _time_of(fields["created_at"], "created_at"),
    )


Item = tuple[int, _SessionRecord | RunStep]


async def _lines(path: str | os.PathLike[str]) -> AsyncGenerator[str, None]:
    """The lines of the file at ``path``, read a MiB at a time (off the event loop thread)."""
    async with await anyio.open_file(path, encoding="utf-8", newline="") as file:
        rest = ""
        while chunk := await file.read(1 << 20):
            lines = (rest + chunk).split("\n")
            rest = lines.pop()
            for line in lines:
                yield line
        if rest:
            yield rest


async def _read(path: str | os.PathLike[str]) -> AsyncGenerator[Item, None]:
    """Every session and step of the export at ``path``, with its line number, checked.

    Raises:
        ValueError: the file is not a whole export of a version this reads; the
            message names the line.
    """
    number = 0
    current: str | None = None
    counts = [0, 0]
    ended = False
    async with aclosing(_lines(path)) as lines:
        async for text in lines:
            number += 1
            try:
                item = _parse(text, number, current, counts, ended)
            except (ValueError, TypeError) as exc:
                raise ValueError(f"{os.fspath(path)}, line {number}: {exc}") from exc
            if item is None:
                ended = number > 1
                continue
            if isinstance(item, _SessionRecord):
                current = item.session.id
            yield number, item
    if number == 0:
        raise ValueError(f"{os.fspath(path)}: empty; not an agentloop export")
    if not ended:
        raise ValueError(
            f"{os.fspath(path)}, line {number}: the export ends without its end record "
            "(truncated?); nothing was imported"
        )


def _parse(
    text: str, number: int, current: str | None, counts: list[int], ended: bool
) -> _SessionRecord | RunStep | None:
    """One line: a session, a step, or ``None`` for the header and the end record."""
    if ended:
        raise _Bad("a record after the end record")
    try:
        record = json.loads(text, parse_constant=_no_constant)
    except ValueError:
        raise _Bad("not a JSON object: not an agentloop export, or damaged") from None
    if number == 1:
        _check_header(record)
        return None
    if not isinstance(record, dict) or len(record) != 1:
        raise _Bad(f"a record must be one of session, step, end; got {preview(text)}")
    [(kind, body)] = record.items()
    if kind == "session":
        counts[0] += 1
        return _session_of(body)
    if kind == "step":
        if current is None:
            raise _Bad("a step before any session record")
        counts[1] += 1
        return _step_of(body, current)
    if kind == "end":
        expected = {"sessions": counts[0], "steps": counts[1]}
        if _fields(body, "end", ("sessions", "steps")) != expected:
            raise _Bad(f"the end record says {body}, the file holds {expected}")
        return None
    raise _Bad(f"a record must be one of session, step, end; got {preview(kind)}")


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def _check_header(record: object) -> None:
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        raise _Bad(f'not an agentloop export: the first line must be {{"format": "{FORMAT}", ...}}')
    version = record.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise _Bad(f"the export's version must be an int >= 1, got {preview(version)}")
    if version > VERSION:
        raise _Bad(
            f"the export's format version is {version}, newer than this agentloop reads "
            f"({VERSION}); upgrade agentloop to import it"
        )


# -- writing into a store ------------------------------------------------------------------


async def _exists(steps: StepStore, sessions: SessionStore, session_id: str) -> bool:
    """Whether the session is there: a session row, or steps."""
    return await sessions.exists(session_id) or bool(await steps.last_n(session_id, 1))


async def _delete(steps: StepStore, sessions: SessionStore, session_id: str) -> None:
    """Delete the session from both stores (the one store, when they are one)."""
    one: object = sessions
    for store in (sessions,) if steps is one else (sessions, steps):
        if not isinstance(store, SupportsDeleteSession):
            raise TypeError(f"replacing session {session_id!r} needs delete_session on every store")
        await store.delete_session(session_id)


class _Writer:
    """Writes sessions into a destination, and removes them again if the import fails."""

    def __init__(self, steps: StepStore, sessions: SessionStore) -> None:
        self.steps, self.sessions = steps, sessions
        self.written: list[str] = []
        self.notes: list[str] = []
        self._buffer: list[RunStep] = []

    async def session(self, record: _SessionRecord) -> None:
        """Write one session's row as recorded (before its steps)."""
        await self.flush()
        sessions, session_id = self.sessions, record.session.id
        self.written.append(session_id)
        if not record.row:
            return  # steps without a session row: nothing to write but the steps
        if record.info is not None and isinstance(sessions, SupportsRestore):
            await sessions.restore_session(record.session, record.info, record.final)
            return
        await self._write_plainly(record)

    async def _write_plainly(self, record: _SessionRecord) -> None:
        sessions, info = self.sessions, record.info
        note = (
            "the source could not tell the sessions' times: they start afresh"
            if info is None
            else "the destination has no restore_session: run totals and times start afresh"
        )
        if note not in self.notes:
            self.notes.append(note)
        if isinstance(sessions, SupportsPut):
            await sessions.put(record.session)
        else:
            await sessions.update_data(record.session.id, record.session.data)
        if info is not None and info.labels and isinstance(sessions, SupportsLabels):
            await sessions.set_labels(record.session.id, info.labels)
        if record.final is not None:
            await sessions.finalize(record.session.id, record.final)

    async def step(self, step: RunStep) -> None:
        self._buffer.append(step)
        if len(self._buffer) >= _CHUNK:
            await self.flush()

    async def flush(self) -> None:
        if self._buffer:
            batch, self._buffer = self._buffer, []
            await append_all(self.steps, batch)

    async def undo(self) -> None:
        """Delete what was written (best effort, shielded: the import is failing already)."""
        with anyio.CancelScope(shield=True):
            for session_id in self.written:
                try:
                    await _delete(self.steps, self.sessions, session_id)
                except Exception:
                    continue


async def _checked_ids(path: str | os.PathLike[str]) -> list[str]:
    """Read the whole export once, checking every line; the ids of its sessions."""
    ids: list[str] = []
    seen: set[str] = set()
    async with aclosing(_read(path)) as items:
        async for number, item in items:
            if not isinstance(item, _SessionRecord):
                continue
            if item.session.id in seen:
                raise ValueError(
                    f"{os.fspath(path)}, line {number}: session {item.session.id!r} "
                    "appears twice; nothing was imported"
                )
            seen.add(item.session.id)
            ids.append(item.session.id)
    return ids


async def import_sessions(
    steps: StepStore,
    sessions: SessionStore,
    path: str | os.PathLike[str],
    *,
    replace: bool = False,
    on_progress: _Progress | None = None,
) -> TransferReport:
    """Write the sessions of the export at ``path`` into the stores.

    The whole file is read and checked first: a damaged, truncated or foreign
    file, or a newer format version, is a ``ValueError`` naming the line, and
    nothing is written. A session that exists already (a session row, or
    steps) refuses the import unless ``replace`` (then it is deleted first).
    Each session is written as recorded with ``restore_session`` where the
    store has it (else ``put``, ``set_labels`` and ``finalize``: totals and
    times start afresh, and the report says so), then its steps in order. If
    writing fails part way, the sessions this import wrote are deleted again
    and the error propagates (a replaced session's old content is gone then).

    Raises:
        ValueError: the file is not a whole export this version reads.
        SessionExistsError: a session exists and ``replace`` is false; nothing
            was written.
        OSError: ``path`` cannot be read.
        Whatever the stores raise.
    """
    ids = await _checked_ids(path)
    present = [session_id for session_id in ids if await _exists(steps, sessions, session_id)]
    if present and not replace:
        shown = ", ".join(repr(i) for i in present[:5]) + (" ..." if len(present) > 5 else "")
        raise SessionExistsError(
            f"{len(present)} session(s) of the export exist already ({shown}); nothing was "
            "imported (pass replace=True to replace them)"
        )
    writer = _Writer(steps, sessions)
    try:
        for session_id in present:
            await _delete(steps, sessions, session_id)
        async with aclosing(_read(path)) as items:
            moved = await _write_all(writer, items, on_progress)
    except BaseException:
        await writer.undo()
        raise
    return TransferReport(len(ids), moved, replaced=tuple(present), notes=tuple(writer.notes))


async def _write_all(
    writer: _Writer, items: AsyncIterator[Item], on_progress: _Progress | None
) -> int:
    """Write every item in order; how many steps."""
    moved = 0
    async for _, item in items:
        if isinstance(item, _SessionRecord):
            if on_progress is not None and writer.written:
                on_progress(len(writer.written), moved)
            await writer.session(item)
        else:
            await writer.step(item)
            moved += 1
    await writer.flush()
    if on_progress is not None:
        on_progress(len(writer.written), moved)
    return moved


async def copy_sessions(
    src_steps: StepStore,
    src_sessions: SessionStore,
    dst_steps: StepStore,
    dst_sessions: SessionStore,
    *,
    session_ids: Sequence[str] | None = None,
    replace: bool = False,
    on_progress: _Progress | None = None,
) -> TransferReport:
    """Copy sessions (every one when ``None``) from one pair of stores to another, streaming.

    What an export to a file and its import would do, without the file: the
    sessions of the source are listed first and each one present in the
    destination refuses the copy (unless ``replace``), then each session is
    read and written in chunks; a failure part way deletes what the copy wrote.
    ``changed`` names sessions written in the source while they were read.

    Raises:
        SessionExistsError: a session exists in the destination and ``replace``
            is false; nothing was written.
        TypeError, ValueError: bad ``session_ids``, or a store lacking what is needed.
        Whatever the stores raise.
    """
    async with aclosing(_session_ids(src_sessions, session_ids)) as chosen:
        ids = [session_id async for session_id in chosen]
    present = [i for i in ids if await _exists(dst_steps, dst_sessions, i)]
    if present and not replace:
        shown = ", ".join(repr(i) for i in present[:5]) + (" ..." if len(present) > 5 else "")
        raise SessionExistsError(
            f"{len(present)} session(s) exist in the destination ({shown}); nothing was "
            "copied (pass replace=True to replace them)"
        )
    changed: list[str] = []
    writer = _Writer(dst_steps, dst_sessions)
    try:
        for session_id in present:
            await _delete(dst_steps, dst_sessions, session_id)
        lines = export_lines(src_steps, src_sessions, session_ids=ids, changed=changed)
        async with aclosing(lines), aclosing(_items_of(lines)) as items:
            moved = await _write_all(writer, items, on_progress)
    except BaseException:
        await writer.undo()
        raise
    return TransferReport(
        len(ids), moved, tuple(changed), tuple(present), notes=tuple(writer.notes)
    )


async def _items_of(lines: AsyncIterator[str]) -> AsyncGenerator[Item, None]:
    """The sessions and steps of an export being made (checked as a file's are)."""
    number, current, counts = 0, None, [0, 0]
    async for text in lines:
        number += 1
        item = _parse(text, number, current, counts, False)
        if item is None:
            continue
        if isinstance(item, _SessionRecord):
            current = item.session.id
        yield number, item
