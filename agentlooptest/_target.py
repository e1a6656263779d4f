"""Turning a ``module:attr`` target into a ``Harness``, with one-line errors."""

from __future__ import annotations

import importlib
import inspect
import os
import sys

from agentloop._backend import cancelled_error
from agentlooptest._harness import Harness
from agentlooptest._spurious import spurious_cancel


class TargetError(Exception):
    """The target could not be loaded; the message is one line for the user."""


async def load(target: str) -> Harness:
    """Import ``module:attr`` and return the ``Harness`` it names or builds.

    ``attr`` (dotted for nested attributes) is a ``Harness`` or a
    zero-argument callable (sync or async) returning one. The current
    directory is importable, as it is for ``python -m``.

    Raises:
        TargetError: the target is malformed, cannot be imported (whatever its
            import raised, ``SystemExit`` included; never ``KeyboardInterrupt``),
            or is not a Harness.
    """
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise TargetError(f"target must look like 'module:attr', got {target!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except BaseException as exc:  # SystemExit from a module's top level too
        if _propagates(exc):
            raise
        raise TargetError(
            f"cannot import {module_name!r} for target {target!r}: {_one_line(exc)}"
        ) from exc
    value: object = module
    for part in attr.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise TargetError(
                f"{module_name!r} has no attribute {attr!r} (target {target!r})"
            ) from None
    if not isinstance(value, Harness):
        if not callable(value):
            raise TargetError(
                f"{target!r} is neither a Harness nor a callable returning one: {value!r:.80}"
            )
        try:
            value = value()
            if inspect.isawaitable(value):
                value = await value
        except BaseException as exc:
            if _propagates(exc):
                raise
            raise TargetError(f"calling {target!r} raised {_one_line(exc)}") from exc
    if not isinstance(value, Harness):
        raise TargetError(f"{target!r} must give an agentlooptest.Harness, got {value!r:.80}")
    return value


def _propagates(exc: BaseException) -> bool:
    """Whether ``exc`` ends the run: a ``KeyboardInterrupt`` or a real cancellation.

    A ``CancelledError`` raised although nothing cancelled the run is the
    target's own error (see ``_spurious``).
    """
    if isinstance(exc, KeyboardInterrupt):
        return True
    return isinstance(exc, cancelled_error()) and spurious_cancel(exc) is None


def _one_line(exc: BaseException) -> str:
    """``Type: message`` on one line: a multi-line message is folded with `` / ``."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return type(exc).__name__ + (": " + " / ".join(lines) if lines else "")
