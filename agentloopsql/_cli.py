"""The ``agentloop`` command: look inside a store, move sessions between stores, retention.

A store is named by a URL: ``sqlite:///relative/path.db`` (three slashes),
``sqlite:////absolute/path.db`` (four), or a PostgreSQL URI
``postgresql://user@host:port/db`` whose ``?schema=NAME`` (or ``--schema``)
picks the schema and is removed before libpq sees the DSN. The commands work
through the protocols and capabilities of ``agentloop`` only (``page_sessions``
where the store has it, else ``list_sessions``; ``export_sessions``,
``import_sessions``, ``copy_sessions``; ``prune_steps``; ``expire_sessions``),
so a store lacking one is named, not guessed around.

It lives in ``agentloopsql`` because it opens the SQL stores, and ``agentloop``
depends on no sibling; ``python -m agentloop`` reaches it through
``agentloop/__main__.py``, the one module of ``agentloop`` that imports it
(see ``docs/architecture.md``).

Exit status: 0 when the command did what it says; 1 with one line on stderr
(``agentloop: ...``, never a traceback) for a bad URL, an unknown session, an
unreachable store, a bad file or a store lacking a capability; 2 for a usage
error (argparse's).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager, suppress
from typing import Any, NoReturn
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import anyio
import attrs
import trio

from agentloop import (
    SessionInfo,
    SessionStore,
    StoreError,
    SupportsExpire,
    SupportsListSessions,
    SupportsPaging,
    SupportsPrune,
    Transcript,
    TransferReport,
    copy_sessions,
    export_lines,
    import_sessions,
)

_PROG = "agentloop"
_PAGE = 500
_LIST_ALL = 2**31 - 1
_URL_HELP = (
    "expected sqlite:///relative/path.db, sqlite:////absolute/path.db or "
    "postgresql://user@host:port/database[?schema=NAME]"
)


class CliError(Exception):
    """What the command tells the user before exiting 1; the message is one line."""


# -- store URLs ----------------------------------------------------------------------------


@attrs.frozen
class StoreUrl:
    """A parsed store URL: ``kind`` is ``"sqlite"`` (``target`` a path) or ``"postgres"``
    (``target`` the DSN without ``schema``); ``shown`` is the URL with any password hidden."""

    kind: str
    target: str
    schema: str | None
    shown: str


def parse_store_url(url: str, schema: str | None = None) -> StoreUrl:
    """Parse ``url`` (and ``--schema``) into what opens the store.

    Raises:
        CliError: the URL is not one of the forms above, a SQLite URL has a
            query or a ``--schema``, or ``?schema=`` and ``--schema`` disagree.
    """
    if url.startswith("sqlite:"):
        if not url.startswith("sqlite:///") or len(url) == len("sqlite:///"):
            raise CliError(f"bad store URL {url!r}: {_URL_HELP}")
        if "?" in url:
            raise CliError(f"bad store URL {url!r}: a SQLite URL takes no query (?...)")
        if schema is not None:
            raise CliError(f"--schema applies to PostgreSQL only, not to {url!r}")
        return StoreUrl("sqlite", url[len("sqlite:///") :], None, url)
    if url.startswith(("postgresql://", "postgres://")):
        return _postgres_url(url, schema)
    raise CliError(f"bad store URL {url!r}: {_URL_HELP}")


def _postgres_url(url: str, schema: str | None) -> StoreUrl:
    try:
        parts = urlsplit(url)
        netloc = parts.netloc
        if parts.password is not None:
            netloc = netloc.replace(f":{parts.password}@", ":***@", 1)
    except ValueError as exc:
        raise CliError(f"bad store URL: {exc}") from None
    shown = urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    query = parse_qsl(parts.query, keep_blank_values=True)
    named = [value for key, value in query if key == "schema"]
    if len(named) > 1:
        raise CliError(f"bad store URL {shown!r}: schema is given {len(named)} times")
    if named and schema is not None and named[0] != schema:
        raise CliError(f"the URL says schema={named[0]!r} but --schema says {schema!r}")
    rest = urlencode([(key, value) for key, value in query if key != "schema"])
    dsn = urlunsplit((parts.scheme, parts.netloc, parts.path, rest, parts.fragment))
    return StoreUrl("postgres", dsn, named[0] if named else schema, shown)


@asynccontextmanager
async def opened(url: StoreUrl, *, create: bool = False) -> AsyncIterator[Any]:
    """The store ``url`` names, closed on the way out.

    A SQLite file must exist unless ``create`` (reading commands never make
    one). Opening migrates an older schema of ours, as ``open`` always does.
    """
    from agentloopsql import PostgresStore, SqliteStore

    store: SqliteStore | PostgresStore
    if url.kind == "sqlite":
        if not create and not await anyio.Path(url.target).exists():
            raise CliError(f"no SQLite database at {url.target!r} ({url.shown})")
        store = await SqliteStore.open(url.target)
    else:
        store = await PostgresStore.open(url.target, schema=url.schema, pool_size=2)
    try:
        yield store
    finally:
        await store.aclose()


# -- reading sessions ----------------------------------------------------------------------


async def listed(
    sessions: SessionStore, *, limit: int, labels: dict[str, str] | None = None
) -> tuple[list[SessionInfo], bool]:
    """At most ``limit`` sessions, most recently written first, and whether more exist."""
    if isinstance(sessions, SupportsPaging):
        found: list[SessionInfo] = []
        cursor = None
        while len(found) < limit:
            page = await sessions.page_sessions(
                limit=min(_PAGE, limit - len(found)), cursor=cursor, labels=labels or None
            )
            found += page.sessions
            cursor = page.cursor
            if cursor is None:
                return found, False
        return found, True
    if labels:
        raise CliError("this store cannot filter sessions by label (it has no page_sessions)")
    if not isinstance(sessions, SupportsListSessions):
        raise CliError("this store cannot list its sessions (no page_sessions, no list_sessions)")
    infos = await sessions.list_sessions(limit=min(limit + 1, _LIST_ALL))
    return infos[:limit], len(infos) > limit


async def every_id(sessions: SessionStore) -> list[str]:
    """Every session's id, oldest first (as export and copy order them)."""
    if isinstance(sessions, SupportsPaging):
        ids: list[str] = []
        cursor = None
        while True:
            page = await sessions.page_sessions(limit=_PAGE, cursor=cursor, order="created")
            ids += [info.id for info in page.sessions]
            if page.cursor is None:
                return ids
            cursor = page.cursor
    infos, _ = await listed(sessions, limit=_LIST_ALL - 1)
    return [info.id for info in reversed(infos)]


async def _known(store: Any, session_ids: Sequence[str], url: StoreUrl) -> None:
    for session_id in session_ids:
        if not await store.exists(session_id) and not await store.last_n(session_id, 1):
            raise CliError(f"no session {session_id!r} in {url.shown}")


def _when(info: SessionInfo) -> str:
    return info.updated_at.strftime("%Y-%m-%d %H:%M:%S")


def _table(infos: Sequence[SessionInfo]) -> str:
    rows = [("ID", "STATUS", "STEPS", "UPDATED (UTC)", "LABELS")]
    for info in infos:
        labels = ",".join(f"{k}={v}" for k, v in sorted(info.labels.items()))
        status = info.status.value if info.status is not None else "-"
        rows.append((info.id, status, str(info.step_count), _when(info), labels))
    widths = [max(len(row[column]) for row in rows) for column in range(4)]
    return "".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row[:4], widths, strict=True))
        + f"  {row[4]}".rstrip()
        + "\n"
        for row in rows
    )


def _as_json(info: SessionInfo) -> dict[str, object]:
    return {
        "id": info.id,
        "status": info.status.value if info.status is not None else None,
        "step_count": info.step_count,
        "created_at": info.created_at.isoformat(),
        "updated_at": info.updated_at.isoformat(),
        "labels": dict(info.labels),
    }


# -- the commands --------------------------------------------------------------------------


async def _write(out: Callable[[str], object], text: str) -> None:
    await anyio.to_thread.run_sync(out, text)


async def cmd_sessions(args: argparse.Namespace) -> None:
    """``agentloop sessions STORE``: the table (or ``--json``)."""
    labels = dict(args.label)
    async with opened(parse_store_url(args.store, args.schema)) as store:
        infos, more = await listed(store, limit=args.limit, labels=labels)
    if args.json:
        await _write(sys.stdout.write, json.dumps([_as_json(i) for i in infos], indent=2) + "\n")
    else:
        await _write(sys.stdout.write, _table(infos))
    if more:
        await _write(sys.stderr.write, f"(first {len(infos)} shown; raise --limit for more)\n")


async def cmd_show(args: argparse.Namespace) -> None:
    """``agentloop show STORE SESSION``: the transcript (text, or ``--html FILE``)."""
    url = parse_store_url(args.store, args.schema)
    async with opened(url) as store:
        read = await Transcript.read(store, store, args.session)
    if not read.found:
        raise CliError(f"no session {args.session!r} in {url.shown}")
    if args.html is None:
        await _write(sys.stdout.write, read.text())
        return
    async with await anyio.open_file(args.html, "w", encoding="utf-8") as out:
        await out.write(read.html())
    await _write(sys.stderr.write, f"wrote the transcript of {args.session!r} to {args.html}\n")


async def cmd_export(args: argparse.Namespace) -> None:
    """``agentloop export STORE``: JSON Lines to ``-o FILE`` or stdout."""
    url = parse_store_url(args.store, args.schema)
    chosen = args.session or None
    changed: list[str] = []
    moved = [0, 0]

    def progress(done: int, steps: int) -> None:
        moved[0], moved[1] = done, steps

    async with opened(url) as store:
        if chosen is not None:
            await _known(store, chosen, url)
        lines = export_lines(
            store, store, session_ids=chosen, changed=changed, on_progress=progress
        )
        if args.output is None:
            await _drain(lines, sys.stdout.write)
        else:
            await _export_to(lines, args.output)
    report = TransferReport(moved[0], moved[1], changed=tuple(changed))
    await _write(sys.stderr.write, _summary("exported", report))


async def _export_to(lines: AsyncIterator[str], path: str) -> None:
    """Write the export to ``path``; a failed export leaves no partial file behind."""
    try:
        async with await anyio.open_file(path, "w", encoding="utf-8") as out:
            await _drain(lines, out.wrapped.write)
    except BaseException:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(_remove, path)
        raise


def _remove(path: str) -> None:
    with suppress(OSError):
        os.remove(path)


async def _drain(lines: AsyncIterator[str], write: Callable[[str], object]) -> None:
    buffer: list[str] = []
    async for line in lines:
        buffer.append(line)
        if len(buffer) >= 1000:  # one thread hop per chunk of lines
            await _write(write, "".join(buffer))
            buffer.clear()
    await _write(write, "".join(buffer))


def _summary(verb: str, report: TransferReport) -> str:
    lines = [f"{verb} {report.sessions} session(s), {report.steps} step(s)"]
    if report.replaced:
        lines.append(f"replaced: {', '.join(report.replaced)}")
    if report.changed:
        lines.append(f"written while being read (may mix two moments): {', '.join(report.changed)}")
    lines += [f"note: {note}" for note in report.notes]
    return "\n".join(lines) + "\n"


async def cmd_import(args: argparse.Namespace) -> None:
    """``agentloop import STORE FILE``: the sessions of an export, checked whole first."""
    if not await anyio.Path(args.file).is_file():
        raise CliError(f"no export file at {args.file!r}")
    async with opened(parse_store_url(args.store, args.schema), create=True) as store:
        report = await import_sessions(store, store, args.file, replace=args.replace)
    await _write(sys.stderr.write, _summary("imported", report))


class _Bar:
    """A progress bar on stderr, drawn only when stderr is a terminal."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.shown = sys.stderr.isatty()

    def __call__(self, done: int, steps: int) -> None:
        if not self.shown:
            return
        width = 30
        filled = width * done // self.total if self.total else width
        bar = "#" * filled + "-" * (width - filled)
        sys.stderr.write(f"\r[{bar}] {done}/{self.total} sessions, {steps} steps")
        sys.stderr.flush()

    def end(self) -> None:
        if self.shown:
            sys.stderr.write("\n")


async def cmd_copy(args: argparse.Namespace) -> None:
    """``agentloop copy SRC DST``: every session (or ``--session``), streaming."""
    source_url = parse_store_url(args.src, args.schema)
    target_url = parse_store_url(args.dst, args.dst_schema)
    async with opened(source_url) as source, opened(target_url, create=True) as target:
        ids = args.session or await every_id(source)
        if args.session:
            await _known(source, ids, source_url)
        bar = _Bar(len(ids))
        try:
            report = await copy_sessions(
                source, source, target, target, session_ids=ids, replace=args.replace,
                on_progress=bar,
            )  # fmt: skip
        finally:
            bar.end()
    await _write(sys.stderr.write, _summary("copied", report))


async def cmd_prune(args: argparse.Namespace) -> None:
    """``agentloop prune STORE --keep-last N``: bounded retention of every session's steps."""
    url = parse_store_url(args.store, args.schema)
    async with opened(url) as store:
        ids = args.session or await every_id(store)
        if not isinstance(store, SupportsPrune):
            raise CliError(f"the store at {url.shown} cannot prune steps (it has no prune_steps)")
        if args.session:
            await _known(store, ids, url)
        removed = touched = 0
        for session_id in ids:
            count = await store.prune_steps(session_id, keep_last=args.keep_last)
            removed += count
            touched += bool(count)
    await _write(
        sys.stderr.write,
        f"pruned {removed} step(s) from {touched} of {len(ids)} session(s), "
        f"keeping the last {args.keep_last} of each\n",
    )


async def cmd_expire(args: argparse.Namespace) -> None:
    """``agentloop expire STORE --idle-for DURATION``: delete sessions idle that long."""
    url = parse_store_url(args.store, args.schema)
    expired: list[str] = []
    async with opened(url) as store:
        if not isinstance(store, SupportsExpire):
            raise CliError(
                f"the store at {url.shown} cannot expire sessions (it has no expire_sessions)"
            )
        while True:
            batch = await store.expire_sessions(idle_for=args.idle_for[0], limit=1000)
            expired += batch
            if len(batch) < 1000:
                break
    await _write(sys.stdout.write, "".join(f"{session_id}\n" for session_id in expired))
    await _write(
        sys.stderr.write, f"expired {len(expired)} session(s) idle for over {args.idle_for[1]}\n"
    )


# -- arguments -----------------------------------------------------------------------------

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")


def parse_duration(text: str) -> tuple[float, str]:
    """The seconds in a duration such as ``7d``, ``12h``, ``90s`` or ``1h30m`` (units s, m,
    h, d, w), and the text itself.

    Raises:
        argparse.ArgumentTypeError: not such a duration, or zero.
    """
    parts = _DURATION.findall(text)
    if not parts or "".join(number + unit for number, unit in parts) != text:
        raise argparse.ArgumentTypeError(
            f"must be a duration such as 7d, 12h, 90s or 1h30m, got {text!r}"
        )
    seconds = sum(float(number) * _UNITS[unit] for number, unit in parts)
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"must be longer than 0 s, got {text!r}")
    return seconds, text


def _label(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"must be KEY=VALUE, got {text!r}")
    return key, value


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an int >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an int >= 1, got {value}")
    return value


def _store_args(parser: argparse.ArgumentParser, *, sessions: bool = False) -> None:
    parser.add_argument("store", metavar="STORE", help="a store URL")
    parser.add_argument("--schema", help="the PostgreSQL schema (as ?schema=NAME)")
    if sessions:
        parser.add_argument(
            "--session", action="append", metavar="ID", help="only this session (repeatable)"
        )


def build_parser() -> argparse.ArgumentParser:
    """The ``agentloop`` argument parser, one subcommand per command."""
    parser = argparse.ArgumentParser(
        prog=_PROG,
        description="Look inside an agentloop store, move sessions between stores, retention.",
        epilog=f"STORE: {_URL_HELP}. Exit status 1 (one line on stderr) when it fails.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sessions = commands.add_parser("sessions", help="list sessions, most recently written first")
    _store_args(sessions)
    sessions.add_argument("--label", action="append", type=_label, default=[], metavar="K=V")
    sessions.add_argument("--limit", type=_positive, default=100, metavar="N")
    sessions.add_argument("--json", action="store_true", help="a JSON array instead of a table")
    sessions.set_defaults(run=cmd_sessions)
    show = commands.add_parser("show", help="a session's transcript")
    _store_args(show)
    show.add_argument("session", metavar="SESSION")
    show.add_argument("--html", metavar="FILE", help="write one self-contained HTML page")
    show.set_defaults(run=cmd_show)
    export = commands.add_parser("export", help="sessions as JSON Lines")
    _store_args(export, sessions=True)
    export.add_argument("-o", "--output", metavar="FILE", help="the file (default: stdout)")
    export.set_defaults(run=cmd_export)
    imported = commands.add_parser("import", help="the sessions of an export file")
    _store_args(imported)
    imported.add_argument("file", metavar="FILE")
    imported.add_argument("--replace", action="store_true", help="replace sessions that exist")
    imported.set_defaults(run=cmd_import)
    _copy_parser(commands)
    prune = commands.add_parser("prune", help="keep only the newest steps of each session")
    _store_args(prune, sessions=True)
    prune.add_argument("--keep-last", type=_positive, required=True, metavar="N")
    prune.set_defaults(run=cmd_prune)
    expire = commands.add_parser("expire", help="delete sessions nobody wrote for a while")
    _store_args(expire)
    expire.add_argument("--idle-for", type=parse_duration, required=True, metavar="DURATION")
    expire.set_defaults(run=cmd_expire)
    return parser


def _copy_parser(commands: Any) -> None:
    copy = commands.add_parser("copy", help="copy sessions from one store into another")
    copy.add_argument("src", metavar="SRC", help="the source store URL")
    copy.add_argument("dst", metavar="DST", help="the destination store URL")
    copy.add_argument("--schema", help="the source's PostgreSQL schema")
    copy.add_argument("--dst-schema", help="the destination's PostgreSQL schema")
    copy.add_argument("--session", action="append", metavar="ID", help="only this session")
    copy.add_argument("--replace", action="store_true", help="replace sessions that exist")
    copy.set_defaults(run=cmd_copy)


# -- running -------------------------------------------------------------------------------


def one_line(exc: BaseException) -> str:
    """The error as one line: its message (its kind when it has none), newlines folded."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    text = " ".join(str(exc).split()).replace("(pass replace=True", "(pass --replace")
    if isinstance(exc, CliError | StoreError | ValueError | TypeError | LookupError):
        return text
    if isinstance(exc, FileNotFoundError | PermissionError | IsADirectoryError):
        return f"{exc.strerror}: {exc.filename!r}"
    return f"{text} ({type(exc).__name__})" if text else type(exc).__name__


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Run the ``agentloop`` command; exits with its status (see the module docstring)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        trio.run(args.run, args)
    except KeyboardInterrupt:
        sys.stderr.write(f"{_PROG}: interrupted\n")
        raise SystemExit(130) from None
    except Exception as exc:
        sys.stderr.write(f"{_PROG}: {one_line(exc)}\n")
        raise SystemExit(1) from None
    raise SystemExit(0)
