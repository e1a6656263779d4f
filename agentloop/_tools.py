"""Tools: a name, a description, a JSON schema and an async function; and ``@tool``."""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Awaitable, Callable
from typing import Any, overload

import attrs

from agentloop import _validate as check
from agentloop._model import ToolSpec, frozen_schema
from agentloop._validate import preview

_NO_DATA: Any = object()  # "the session has no data", apart from a stored JSON null


class ToolContext:
    """What a tool sees of its run: the session id and the session's working memory.

    ``data`` is the decoded JSON value of the session's data: an empty dict
    when the session has none (``data`` omitted here), ``None`` for a stored
    JSON ``null``. A tool may mutate it in place or reassign it; after the
    tool returns, the loop persists any change with ``update_data``, so the
    next run of the session sees it, and replaces ``data`` with the decoded
    stored value. A value that is not JSON (a set, NaN, nesting too deep to
    encode, ...) is refused: the call becomes an ``Error:`` result and
    ``data`` goes back to its last persisted value.
    """

    __slots__ = ("_session_id", "data")

    def __init__(self, session_id: str, data: Any = _NO_DATA) -> None:
        self._session_id = session_id
        self.data: Any = {} if data is _NO_DATA else data

    @property
    def session_id(self) -> str:
        """The id of the session the tool runs for."""
        return self._session_id

    def __repr__(self) -> str:
        return f"ToolContext(session_id={self._session_id!r}, data={preview(self.data)})"


ToolFn = Callable[[dict[str, Any], ToolContext], Awaitable[str]]


def _async_fn(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not callable(value):
        raise TypeError(f"{attribute.name} must be an async function, got {preview(value)}")
    if inspect.isclass(value) or not (
        inspect.iscoroutinefunction(value)
        or inspect.iscoroutinefunction(getattr(value, "__call__", None))  # noqa: B004
    ):
        raise TypeError(
            f"{attribute.name} must be an async function (args, ctx) -> str, got {preview(value)}"
        )


@attrs.frozen
class Tool:
    """A tool the model may call: ``fn(args, ctx)`` is awaited with the decoded arguments.

    ``parameters`` is the JSON schema of ``args`` shown to the model; the loop
    does not enforce it. It is kept as a deep, read-only copy (a ``dict`` that
    raises ``TypeError`` on change), so neither the caller nor a model can
    alter the tool after it is built. Whatever ``fn`` raises (``Exception``, not
    cancellation) becomes a ``tool_result`` step starting with ``Error:`` and
    the run continues, so the model can recover.

    Raises:
        TypeError: a field has the wrong type, ``fn`` is not an async function,
            or ``parameters`` holds a value JSON has no type for (a set,
            bytes, a datetime, a non-``str`` key); the message names its path.
        ValueError: ``name`` is empty or holds NUL; ``parameters`` holds NaN
            or infinity, a lone surrogate, a cycle, or nests deeper than
            ``JSON_DEPTH_MAX`` (100) levels.
    """

    name: str = attrs.field(validator=check.name)
    description: str = attrs.field(validator=check.text)
    parameters: dict[str, Any] = attrs.field(
        converter=frozen_schema, validator=check.schema, hash=False
    )
    fn: ToolFn = attrs.field(validator=_async_fn, hash=False)

    @property
    def spec(self) -> ToolSpec:
        """The :class:`ToolSpec` the model is shown."""
        return ToolSpec(self.name, self.description, self.parameters)


_SCALARS: dict[object, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


def _json_schema(hint: object, where: str) -> dict[str, Any]:
    if hint in _SCALARS:
        return {"type": _SCALARS[hint]}
    origin = typing.get_origin(hint)
    if hint is list or origin is list:
        item = typing.get_args(hint)
        return {"type": "array", **({"items": _json_schema(item[0], where)} if item else {})}
    if hint is dict or origin is dict:
        return {"type": "object"}
    if origin in (typing.Union, types.UnionType):
        members = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        if len(members) == 1 and len(typing.get_args(hint)) == 2:
            inner = _json_schema(members[0], where)
            return {"anyOf": [inner, {"type": "null"}]}
    raise TypeError(
        f"{where} must be annotated with str, int, float, bool, list, dict or X | None, "
        f"got {hint!r}"
    )


def _check_value(value: object, hint: object, name: str) -> None:
    """Refuse an argument whose JSON type does not match its annotation (``X | None`` too)."""
    or_null = ""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        if value is None:
            return
        # _json_schema admits only X | None, so the one other member is X
        hint = next(arg for arg in typing.get_args(hint) if arg is not type(None))
        or_null = " or null"
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return
    expected = hint if isinstance(hint, type) else typing.get_origin(hint)
    if expected in (str, int, float, bool, list, dict) and (
        not isinstance(value, expected) or (expected is int and isinstance(value, bool))
    ):
        kind = _SCALARS.get(expected, getattr(expected, "__name__", str(expected)))
        raise TypeError(f"argument {name!r} must be {kind}{or_null}, got {value!r}")


def _build(fn: Callable[..., Awaitable[str]], name: str | None, description: str | None) -> Tool:
    if not inspect.iscoroutinefunction(fn):
        raise TypeError(f"@tool needs an async function, got {preview(fn)}")
    try:
        hints = typing.get_type_hints(fn)
    except NameError as exc:
        raise TypeError(f"@tool could not resolve the annotations of {preview(fn)}: {exc}") from exc
    signature = inspect.signature(fn)
    ctx_param: str | None = None
    properties: dict[str, Any] = {}
    required: list[str] = []
    arg_hints: dict[str, object] = {}
    for param in signature.parameters.values():
        hint = hints.get(param.name, inspect.Parameter.empty)
        if hint is ToolContext:
            ctx_param = param.name
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            raise TypeError(f"@tool parameter {param.name!r} must be an ordinary named parameter")
        if hint is inspect.Parameter.empty:
            raise TypeError(f"@tool parameter {param.name!r} needs a type annotation")
        properties[param.name] = _json_schema(hint, f"@tool parameter {param.name!r}")
        arg_hints[param.name] = hint
        if param.default is inspect.Parameter.empty:
            required.append(param.name)
    schema: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }
    doc = inspect.getdoc(fn) or ""

    async def call(args: dict[str, Any], ctx: ToolContext) -> str:
        unknown = sorted(set(args) - set(arg_hints))
        if unknown:
            raise TypeError(f"unexpected argument(s) {unknown}; expected {sorted(arg_hints)}")
        missing = [key for key in required if key not in args]
        if missing:
            raise TypeError(f"missing required argument(s) {missing}")
        for key, value in args.items():
            _check_value(value, arg_hints[key], key)
        kwargs = dict(args)
        if ctx_param is not None:
            kwargs[ctx_param] = ctx
        return await fn(**kwargs)

    return Tool(
        name=name if name is not None else fn.__name__,
        description=description if description is not None else doc.split("\n\n")[0],
        parameters=schema,
        fn=call,
    )


@overload
def tool(fn: Callable[..., Awaitable[str]], /) -> Tool: ...
@overload
def tool(
    *, name: str | None = None, description: str | None = None
) -> Callable[[Callable[..., Awaitable[str]]], Tool]: ...
def tool(
    fn: Callable[..., Awaitable[str]] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
) -> Tool | Callable[[Callable[..., Awaitable[str]]], Tool]:
    """Build a :class:`Tool` from an annotated async function (``@tool`` or ``@tool(name=...)``).

    Each parameter annotated ``str``, ``int``, ``float``, ``bool``, ``list``
    (``list[X]``), ``dict`` or ``X | None`` becomes a property of the JSON
    schema (required unless it has a default); a parameter annotated
    :class:`ToolContext` receives the context instead. The name defaults to the
    function's, the description to the first paragraph of its docstring. The
    built tool refuses unknown or missing arguments and arguments of the wrong
    JSON type, checked against ``X`` for an ``X | None`` parameter unless the
    argument is null (as ``TypeError``, which the loop reports to the model).

    Raises:
        TypeError: ``fn`` is not async, or a parameter is unannotated, variadic
            or of an unsupported type.
    """
    if fn is not None:
        return _build(fn, name, description)

    def decorate(inner: Callable[..., Awaitable[str]]) -> Tool:
        return _build(inner, name, description)

    return decorate
