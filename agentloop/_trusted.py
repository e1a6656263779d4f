"""Building a frozen attrs value from values already checked, without checking them again."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import attrs

T = TypeVar("T")

_BUILDERS: dict[type, Callable[..., Any]] = {}
_UNSET = object()


def trusted_builder(cls: type[T]) -> Callable[..., T]:
    """A function building ``cls`` from checked values, skipping its converters and validators.

    The function takes the fields as ``cls(...)`` does (same names, order,
    defaults and factories) and sets the slots directly: several times faster
    than ``cls(...)``, for values that passed the same checks before — fields
    of another checked value, constants, rows a store reads back from its own
    schema. Never for a caller's values: nothing is checked, nothing
    converted. One function per class, built once and cached.

    Raises:
        TypeError: ``cls`` is not a slotted attrs class, or has a default that
            needs ``self`` (``attrs.Factory(..., takes_self=True)``).
    """
    builder = _BUILDERS.get(cls)
    if builder is None:
        builder = _BUILDERS[cls] = _compile(cls)
    return builder


def _compile(cls: type[T]) -> Callable[..., T]:
    if not attrs.has(cls) or "__slots__" not in cls.__dict__:
        raise TypeError(f"trusted_builder needs a slotted attrs class, got {cls!r}")
    scope: dict[str, Any] = {
        "_new": object.__new__,
        "_twin": _twin(cls),
        "_cls": cls,
        "_UNSET": _UNSET,
    }
    params: list[str] = []
    keyword_only: list[str] = []
    body: list[str] = []
    for index, field in enumerate(attrs.fields(cls)):
        arg = field.alias
        default = field.default
        if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
            if default.takes_self:
                raise TypeError(f"trusted_builder cannot fill {cls.__name__}.{field.name}")
            scope[f"_factory{index}"] = default.factory
            body.append(f"    if {arg} is _UNSET: {arg} = _factory{index}()")
            param = f"{arg}=_UNSET"
        elif default is attrs.NOTHING:
            param = arg
        else:
            scope[f"_default{index}"] = default
            param = f"{arg}=_default{index}"
        (keyword_only if field.kw_only else params).append(param)
        body.append(f"    self.{field.name} = {arg}")
    signature = ", ".join(params + (["*", *keyword_only] if keyword_only else []))
    source = (
        f"def build_{cls.__name__}({signature}):\n"
        "    self = _new(_twin)\n"
        + "\n".join(body)
        + "\n    self.__class__ = _cls\n    return self\n"
    )
    exec(source, scope)  # generated from field names only, as attrs itself does
    builder: Callable[..., T] = scope[f"build_{cls.__name__}"]
    return builder


def _twin(cls: type[T]) -> type[T]:
    """A subclass of ``cls`` adding no slot, whose attributes are set the plain way.

    The builder fills a value of it with plain attribute stores, then gives it its
    class (``__class__`` may change between layouts this alike): a slot set through
    its descriptor, past a frozen class's ``__setattr__``, costs several times more (a
    call through a method wrapper per field). Both ``__setattr__`` and ``__delattr__``
    are ``object``'s, so its stores take the interpreter's fast path for slots.
    """
    namespace = {
        "__slots__": (),
        "__setattr__": object.__setattr__,
        "__delattr__": object.__delattr__,
    }
    return type(f"_Trusted{cls.__name__}", (cls,), namespace)
