"""Describing an exception from code the loop does not own, without ever raising."""

from __future__ import annotations

from agentloop._validate import has_lone_surrogate


def _storable(text: str) -> bool:
    # A lone surrogate would make the step (or event) holding the text invalid.
    return not has_lone_surrogate(text)


def _type_name(exc: BaseException) -> str:
    name = type(exc).__name__
    return name if isinstance(name, str) and _storable(name) else "Exception"


def describe(exc: BaseException) -> str:
    """``repr(exc)``, or the exception's type name when that repr raises or is unstorable.

    Tools, models, compactors and stores raise exceptions the loop writes into
    steps and messages; a ``__repr__`` that raises, returns a non-``str`` or
    holds a lone surrogate must neither escape the loop nor make the step
    unstorable.
    """
    try:
        text = repr(exc)
        if isinstance(text, str) and _storable(text):
            return text
    except Exception:
        pass
    return _type_name(exc)


def describe_message(exc: BaseException) -> str:
    """``"<TypeName>: <str(exc)>"``, or the type name alone when ``str(exc)`` fails likewise."""
    try:
        text = str(exc)
        if isinstance(text, str) and _storable(text):
            return f"{_type_name(exc)}: {text}"
    except Exception:
        pass
    return _type_name(exc)
