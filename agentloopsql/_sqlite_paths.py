"""Why a SQLite file cannot be opened: the path's problem in words, and the error to raise.

SQLite says "unable to open database file" for a missing directory, a
directory given as the path and a file it may not read alike, and falls back
to read-only without a word when it may not write. These helpers look at the
path itself (``os.stat``/``os.access``, which never change anything) so the
error names the path and the reason.
"""

from __future__ import annotations

import os
import sqlite3
import stat

from agentloop import StoreError, StoreUnavailableError
from agentloop._shared import preview

# A path is shown whole up to this length; a longer one keeps its end, which names the file.
_PATH_SHOWN = 200
_PATH_TAIL = 80

# SQLite result codes (and their extended forms) that may pass if retried later.
_TRANSIENT = ("SQLITE_BUSY", "SQLITE_LOCKED", "SQLITE_IOERR", "SQLITE_FULL", "SQLITE_NOMEM")


def show_path(path: str) -> str:
    """``path`` quoted for an error message, its start elided if it is very long."""
    if len(path) <= _PATH_SHOWN:
        return repr(path)
    return f"...{path[-_PATH_TAIL:]!r} ({len(path)} chars)"


def _can(path: str, mode: int) -> bool:
    return os.access(path, mode, effective_ids=os.access in os.supports_effective_ids)


def _directory_problem(directory: str) -> str | None:
    try:
        info = os.stat(directory)
    except FileNotFoundError:
        return f"directory {show_path(directory)} does not exist"
    except PermissionError:
        return f"no permission to reach directory {show_path(directory)}"
    except OSError as exc:
        return f"directory {show_path(directory)} cannot be reached ({exc.strerror})"
    if not stat.S_ISDIR(info.st_mode):
        return f"{show_path(directory)} is not a directory"
    if not _can(directory, os.X_OK):
        return f"no permission to enter directory {show_path(directory)}"
    return None


def path_problem(path: str) -> str | None:
    """Why SQLite cannot open ``path`` for reading and writing, or ``None`` if nothing is wrong.

    Checks, in order: the directory exists and can be entered; the path is
    not a directory; the file (if it exists) may be read and written; the
    directory may be written, which SQLite needs to create the file and its
    ``-wal`` and ``-shm`` files (unless both already exist and are writable).
    """
    directory = os.path.dirname(os.path.abspath(path))
    problem = _directory_problem(directory)
    if problem is not None:
        return problem
    if os.path.isdir(path):
        return "it is a directory"
    if os.path.exists(path):
        if not _can(path, os.R_OK):
            return "no permission to read the file"
        if not _can(path, os.W_OK):
            return "no permission to write the file"
    elif not _can(directory, os.W_OK):
        return f"no permission to create the file in directory {show_path(directory)}"
    if _can(directory, os.W_OK):
        return None
    if all(_can(path + suffix, os.R_OK | os.W_OK) for suffix in ("-wal", "-shm")):
        return None
    return (
        f"no permission to write directory {show_path(directory)}, which SQLite needs "
        "for the file's -wal and -shm files"
    )


def open_error(path: str, exc: sqlite3.Error) -> StoreError:
    """The error ``open`` raises for ``exc``, naming ``path`` and the reason; ``exc`` is its cause.

    A lock, I/O error, full disk or lack of memory may pass: those are
    ``StoreUnavailableError``. Everything else (the path, permissions, a file
    that is not a database or is damaged) is a plain ``StoreError``.
    """
    code = exc.sqlite_errorname or ""
    where = f"SQLite database {show_path(path)}"
    if code.startswith(_TRANSIENT):
        return StoreUnavailableError(f"cannot open {where} now: {exc}", exc)
    if code == "SQLITE_NOTADB":
        reason = f"it is not a SQLite database ({exc}); nothing was changed"
    elif code.startswith("SQLITE_CORRUPT"):
        reason = f"it is damaged ({exc}); nothing was changed"
    else:
        reason = (path_problem(path) if path != ":memory:" else None) or str(exc)
    error = StoreError(f"cannot open {where}: {reason}")
    error.__cause__ = exc
    return error


def checked_path(path: object) -> str:
    """``path`` as the non-empty ``str`` SQLite opens."""
    if not isinstance(path, str | os.PathLike):
        raise TypeError(f"path must be a str or os.PathLike, got {preview(path)}")
    name = os.fspath(path)
    if not isinstance(name, str):
        raise TypeError(f"path must name a file as str, got {preview(name)}")
    if not name:
        raise ValueError("path must name a file (or be ':memory:'), got ''")
    return name
