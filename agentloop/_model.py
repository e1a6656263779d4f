"""The model seam: what the loop sends a model, what it gets back, a scripted model,
and the compaction seam (a summary of older history and what produces one).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NoReturn, Protocol, runtime_checkable

import anyio
import attrs

from agentloop import _validate as check
from agentloop._validate import check_json_value, preview

ROLES = ("system", "user", "assistant", "tool")


def _read_only(self: object, *args: Any, **kwargs: Any) -> NoReturn:
    raise TypeError(
        f"tool parameters are read-only (shared by every request); "
        f"copy.deepcopy() them for a mutable copy, got a change to {preview(self)}"
    )


class _FrozenDict(dict[str, Any]):
    """A ``dict`` that refuses changes, for a JSON schema shared by every request.

    Still a ``dict`` (``isinstance``, ``json.dumps``, SDKs that want one all
    work); copying (``copy``, ``copy.deepcopy``, ``pickle``) gives plain,
    mutable containers.
    """

    __slots__ = ()
    __setitem__ = __delitem__ = __ior__ = _read_only
    clear = pop = popitem = setdefault = update = _read_only

    def __reduce__(self) -> tuple[type[dict[str, Any]], tuple[dict[str, Any]]]:
        return dict, (dict(self),)


class _FrozenList(list[Any]):
    """A ``list`` that refuses changes; see :class:`_FrozenDict`."""

    __slots__ = ()
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _read_only
    append = extend = insert = pop = remove = clear = sort = reverse = _read_only

    def __reduce__(self) -> tuple[type[list[Any]], tuple[list[Any]]]:
        return list, (list(self),)


def _frozen(value: object) -> object:
    if isinstance(value, _FrozenDict | _FrozenList):
        return value  # built only here, so already frozen all the way down
    if isinstance(value, dict):
        return _FrozenDict((key, _frozen(item)) for key, item in value.items())
    if isinstance(value, list | tuple):
        return _FrozenList(_frozen(item) for item in value)
    return value  # a JSON scalar: check_json_value refused anything else


def frozen_schema(value: dict[str, Any]) -> dict[str, Any]:
    """A deep, read-only copy of a JSON schema (a non-``dict`` is returned for the validator).

    The schema is checked to be JSON first (:func:`check_json_value`: ``str``
    keys, finite numbers, no sets, bytes, datetimes or cycles, at most
    ``JSON_DEPTH_MAX`` deep), once: a frozen schema is returned as is.

    Raises:
        TypeError, ValueError: the schema is not JSON; the message names the
            path inside it, e.g. ``parameters['properties']['x']``.

    A tool's schema is handed to every model request; freezing it once means
    no model or adapter can change a tool for the requests that follow, at no
    per-request cost.
    """
    if isinstance(value, _FrozenDict) or not isinstance(value, dict):
        return value  # frozen (hence checked) already, or not a dict: left for the validator
    check_json_value(value, "parameters")
    return _frozen(value)  # type: ignore[return-value]


@attrs.frozen
class ToolCall:
    """One tool call requested by the model.

    ``args`` is the model's argument text, meant to be a JSON object. It is not
    parsed here: malformed arguments reach the loop, which answers the model
    with an ``Error:`` tool result instead of failing the run.
    """

    id: str = attrs.field(validator=check.name)
    name: str = attrs.field(validator=check.name)
    args: str = attrs.field(default="{}", validator=check.text)


@attrs.frozen
class Message:
    """One entry of the conversation the model sees.

    ``role`` is ``system``, ``user``, ``assistant`` or ``tool``. An assistant
    message may carry ``tool_calls``; a tool message answers the call whose id
    is ``tool_call_id``.
    """

    role: str = attrs.field(validator=check.one_of(ROLES))
    content: str = attrs.field(default="", validator=check.text)
    tool_calls: tuple[ToolCall, ...] = attrs.field(
        default=(), converter=check.to_tuple, validator=check.tuple_of(ToolCall)
    )
    tool_call_id: str | None = attrs.field(
        default=None, validator=attrs.validators.optional(check.name)
    )


@attrs.frozen
class ToolSpec:
    """What the model is told about one tool: its name, purpose and JSON schema of arguments.

    ``parameters`` is a deep, read-only copy of the schema given: still a
    ``dict`` (JSON-serializable as is), but any change raises ``TypeError``,
    so a model cannot alter the tool for later requests. ``copy.deepcopy``
    it for a mutable copy.
    """

    name: str = attrs.field(validator=check.name)
    description: str = attrs.field(validator=check.text)
    parameters: dict[str, Any] = attrs.field(
        converter=frozen_schema, validator=check.schema, hash=False
    )


@attrs.frozen
class ModelRequest:
    """Everything one model call sees: model name, system prompt, messages, tools, data.

    ``data`` is the session's working memory as JSON text (``None`` when it has
    none, or when the stored data could not be read). It is checked to be text
    but not parsed again: the loop passes what it loaded or just validated, and
    re-parsing the whole working memory on every model call would cost more
    than the rest of the request.
    """

    model: str = attrs.field(validator=check.text)
    system_prompt: str = attrs.field(validator=check.text)
    messages: tuple[Message, ...] = attrs.field(
        converter=check.to_tuple, validator=check.tuple_of(Message)
    )
    tools: tuple[ToolSpec, ...] = attrs.field(
        converter=check.to_tuple, validator=check.tuple_of(ToolSpec)
    )
    data: str | None = attrs.field(validator=attrs.validators.optional(check.text))


@attrs.frozen
class ModelReply:
    """What one model call returned: text, tool calls, and the tokens it cost.

    A reply without tool calls is the run's final response.
    """

    content: str = attrs.field(default="", validator=check.text)
    tool_calls: tuple[ToolCall, ...] = attrs.field(
        default=(), converter=check.to_tuple, validator=check.tuple_of(ToolCall)
    )
    prompt_tokens: int = attrs.field(default=0, validator=check.int32)
    completion_tokens: int = attrs.field(default=0, validator=check.int32)


@runtime_checkable
class Model(Protocol):
    """A chat model behind one async call."""

    async def complete(self, request: ModelRequest) -> ModelReply:
        """Answer ``request``.

        An exception ends the run with status ``error`` (after an ``error``
        step) and propagates to the caller of ``Loop.run``.
        """
        ...


class ScriptedModel:
    """Replays fixed replies in order and records every request it received.

    The deterministic model for eval suites and tests: ``replies`` are
    :class:`ModelReply` values (a ``str`` is shorthand for
    ``ModelReply(content=...)``). ``requests`` lists every :class:`ModelRequest`
    in the order received, so a test can assert on exactly what the model saw.

    ``complete`` is a checkpoint: a cancelled call raises the backend's
    cancellation (``trio.Cancelled`` or ``asyncio.CancelledError``) and
    consumes no reply.

    Raises:
        TypeError: a reply is neither a ``ModelReply`` nor a ``str``.
    """

    def __init__(self, replies: Iterable[ModelReply | str]) -> None:
        script: list[ModelReply] = []
        for position, reply in enumerate(replies):
            if isinstance(reply, str):
                reply = ModelReply(content=reply)
            elif not isinstance(reply, ModelReply):
                raise TypeError(
                    f"replies[{position}] must be a ModelReply or a str, got {preview(reply)}"
                )
            script.append(reply)
        self._script = script
        self._next = 0
        self.requests: list[ModelRequest] = []

    @property
    def remaining(self) -> int:
        """How many replies are left in the script."""
        return len(self._script) - self._next

    async def complete(self, request: ModelRequest) -> ModelReply:
        """Record ``request`` and return the next scripted reply.

        Raises:
            TypeError: ``request`` is not a ``ModelRequest``.
            RuntimeError: the script has run out; the request is still recorded.
        """
        if not isinstance(request, ModelRequest):
            raise TypeError(f"request must be a ModelRequest, got {preview(request)}")
        await anyio.lowlevel.checkpoint()
        self.requests.append(request)
        if self._next >= len(self._script):
            raise RuntimeError(
                f"ScriptedModel ran out of replies: all {len(self._script)} were used "
                f"and request {len(self.requests)} asked for another"
            )
        reply = self._script[self._next]
        self._next += 1
        return reply


@attrs.frozen
class Compaction:
    """What a :class:`Compactor` returns.

    ``summary`` replaces ``messages[:retained_from]`` of the messages it was
    given; ``messages[retained_from]`` is the first message kept verbatim
    (``retained_from == len(messages)`` keeps none). An empty ``summary``
    means "nothing to compact". The tokens are added to the run's totals.

    Raises:
        TypeError, ValueError: a field has the wrong type or a negative value.
    """

    summary: str = attrs.field(validator=check.text)
    retained_from: int = attrs.field(validator=check.int32)
    prompt_tokens: int = attrs.field(default=0, validator=check.int32)
    completion_tokens: int = attrs.field(default=0, validator=check.int32)


@runtime_checkable
class Compactor(Protocol):
    """Summarizes older history; the loop calls it once per run, after the ``user`` step.

    The summary is stored as a ``summary`` step and replayed first by later
    runs, but only while that step is within the last ``history_window``
    steps: rehydration reads nothing older. Once more steps follow it, later
    runs see un-summarized history again, so a compactor should expect to be
    handed history without a leading summary and summarize it anew.
    """

    async def compact(self, messages: Sequence[Message]) -> Compaction:
        """Summarize a prefix of ``messages`` (the rehydrated history plus the new user message).

        When the history starts with an earlier summary (a ``system`` message),
        a new summary supersedes it: fold it in (with ``retained_from=0`` too,
        the earlier summary is dropped). An exception, or a
        ``retained_from`` outside ``[0, len(messages)]``, is reported as a
        :class:`LoopWarning` and the run goes on uncompacted.
        """
        ...
