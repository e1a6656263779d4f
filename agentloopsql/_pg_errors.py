"""What a PostgreSQL error during a call means: retry later, or never.

Only a lost connection, a timeout or a server going away is
``StoreUnavailableError`` (retrying may succeed). Everything the server
refuses for a reason of its own (a value its type cannot hold, a constraint, a
size limit such as the btree index row limit, a missing privilege, a trigger)
is a plain ``StoreError``: retrying the same call can never succeed. psycopg
files some of these under ``OperationalError`` (``ProgramLimitExceeded``,
``StatementTooComplex``), so the SQLSTATE decides, not the class.

Messages name the operation and the rule, and quote at most ~60 characters of
any value: the server's own message may embed a whole value (a trigger's
``RAISE``, an invalid input), so it is trimmed.

Imported only once psycopg is known to be installed.
"""

from __future__ import annotations

import re
from types import TracebackType

import outcome
import psycopg

from agentloop import StoreError, StoreUnavailableError

# SQLSTATE classes (and single codes) that retrying may fix: the connection,
# operator intervention (cancel, shutdown), lock and serialization conflicts,
# exhausted resources, the server's own I/O.
_TRANSIENT_CLASSES = {
    "08": "the connection failed",
    "40": "a conflict with a concurrent transaction (deadlock or serialization)",
    "53": "the server ran out of a resource (disk, memory or connections)",
    "57": "the server stopped the statement (statement_timeout, a cancel or a shutdown)",
    "58": "a system error on the server",
}
_TRANSIENT_CODES = {
    "55P03": "a lock was not available within lock_timeout",
    "55006": "an object is in use by another session",
    "57014": "the server cancelled the statement (statement_timeout or an administrator)",
}
_PERMANENT_CODES = {"57P04": "the database was dropped"}

_PERMANENT_CLASSES = {
    "0A": "a feature the server does not support",
    "21": "a value count the statement does not accept",
    "22": "a value the column's type cannot hold",
    "23": "a constraint of the schema",
    "42": "the statement does not fit the schema",
    "54": "a PostgreSQL size limit (e.g. an index row over its maximum size)",
    "P0": "a rule a database function or trigger enforces",
    "XX": "an internal error of the server",
}
_PERMANENT_BY_TYPE: tuple[tuple[type[psycopg.Error], str], ...] = (
    (psycopg.DataError, "a value the driver cannot send"),
    (psycopg.IntegrityError, "a constraint of the schema"),
    (psycopg.NotSupportedError, "a feature the server does not support"),
    (psycopg.ProgrammingError, "the statement does not fit the schema"),
)

_QUOTED = re.compile(r'"[^"]{61,}"|\'[^\']{61,}\'')
_QUOTE_MAX = 60
_MESSAGE_MAX = 100


def _trim(text: str) -> str:
    """``text`` on one line, each long quoted value cut to ~60 characters, the whole to ~100."""
    text = " ".join(text.split())

    def cut(match: re.Match[str]) -> str:
        quoted = match.group(0)
        return f"{quoted[: _QUOTE_MAX + 1]}...({len(quoted) - 2} chars){quoted[0]}"

    text = _QUOTED.sub(cut, text)
    if len(text) > _MESSAGE_MAX:
        text = f"{text[:_MESSAGE_MAX]}...({len(text)} chars)"
    return text


def operation(tb: TracebackType | None, default: str) -> str:
    """The store operation a traceback ran in: the innermost ``agentloopsql._pg_*`` method.

    ``append_many`` (group commit) and ``append_fenced`` are reported as ``append``.
    """
    name = default
    while tb is not None:
        frame = tb.tb_frame
        module = frame.f_globals.get("__name__", "")
        # _pg_append's statements run for PgOps methods, which name the operation.
        if (
            module.startswith("agentloopsql._pg_")
            and module != "agentloopsql._pg_append"
            and "." in frame.f_code.co_qualname
        ):
            name = frame.f_code.co_name
        tb = tb.tb_next
    return "append" if name in ("append_many", "append_fenced") else name


def classify(exc: psycopg.Error, op: str) -> StoreError:
    """The store error for ``exc``, raised by the server or driver while running ``op``.

    ``StoreUnavailableError`` (with ``exc`` as ``cause``) when retrying later
    may succeed; otherwise a ``StoreError`` saying retrying will not help.
    The caller raises it ``from exc``.
    """
    diag = getattr(exc, "diag", None)
    code = exc.sqlstate or ""
    said = _trim((diag.message_primary if diag is not None else None) or str(exc))
    tag = f"SQLSTATE {code}, {type(exc).__name__}" if code else type(exc).__name__
    transient = _TRANSIENT_CODES.get(code) or _TRANSIENT_CLASSES.get(code[:2])
    if code in _PERMANENT_CODES:
        transient = None
    if transient is None and not code and isinstance(exc, psycopg.OperationalError):
        transient = "the driver lost or could not use the connection"
    if transient is not None:
        message = f"PostgreSQL could not run {op} now: {transient} ({tag}): {said}"
        return StoreUnavailableError(message, exc)
    rule = _PERMANENT_CODES.get(code) or _PERMANENT_CLASSES.get(code[:2])
    if rule is None:
        rule = next((r for kind, r in _PERMANENT_BY_TYPE if isinstance(exc, kind)), "its rules")
    constraint = getattr(diag, "constraint_name", None) if diag is not None else None
    if constraint:
        rule = f"{rule}, {_trim(repr(constraint))}"
    return StoreError(
        f"PostgreSQL refused {op}: it breaks {rule} ({tag}): {said}; retrying will not help"
    )


def waited_error(waited: float, limit: float) -> StoreUnavailableError:
    """The error of a call that waited ``pool_timeout`` for a worker and got none."""
    return StoreUnavailableError(
        f"no PostgreSQL connection was free within pool_timeout ({limit} s): the call waited "
        f"{waited:.2f} s for a worker, every one busy (e.g. with a statement waiting on a "
        "lock); nothing was done"
    )


def shared_outcome(result: outcome.Outcome[None]) -> bool:
    """Whether every caller of a shared INSERT gets ``result``: success, or the store is down.

    Any other error was one call's rows refused: the others must not fail with it.
    """
    return isinstance(result, outcome.Value) or (
        isinstance(result, outcome.Error) and isinstance(result.error, StoreUnavailableError)
    )


def copy_outcome(result: outcome.Outcome[None]) -> outcome.Outcome[None]:
    """``result`` for one more caller: one exception object per caller, tracebacks apart."""
    if isinstance(result, outcome.Error) and isinstance(result.error, StoreUnavailableError):
        error = result.error
        return outcome.Error(StoreUnavailableError(str(error), error.cause))
    return outcome.Value(None)
