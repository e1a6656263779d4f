"""Steps ↔ messages: how tool calls are recorded, and how a window of steps is replayed.

The recording format is written down in ``docs/decisions.md``:

- ``tool_call``: ``content`` is the JSON text ``{"id": ..., "name": ...}`` (plus
  ``"text"`` when the reply carried text alongside its calls, on the reply's
  first call, and ``"raw_args"`` when the model's arguments were not storable
  JSON); ``tool_args`` is the call's arguments (``{}`` when they were not JSON).
- ``tool_result``: ``content`` is the tool's output, verbatim; ``tool_args``
  is ``{"tool_call_id": ..., "name": ...}``.

``content`` round-trips exactly through every store, ``tool_args`` only
JSON-semantically, so the exact text of malformed arguments lives in ``content``.

Both rules of what the model sees live here: ``replay`` (a window of steps →
messages) and ``Conversation.summarized`` (the run that compacts shows the model
exactly what the next run's replay will).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import attrs

from agentloop._model import Message, ToolCall
from agentloop._types import CompactionCheckpoint, RunStep, StepType
from agentloop._validate import INT32_MAX, has_lone_surrogate, parse_json

_string = json.encoder.encode_basestring  # a JSON string, as json.dumps(ensure_ascii=False)


def tool_call_fields(
    call: ToolCall, text: str = "", *, malformed: bool | None = None
) -> tuple[str, str]:
    """The ``(content, tool_args)`` of the ``tool_call`` step recording ``call``.

    ``malformed``: whether ``call.args`` is not storable JSON, when the caller
    decoded them already (``None``: decode them here). The text is exactly
    what ``json.dumps(head, ensure_ascii=False)`` makes of the head, built
    without the encoder's per-call setup.
    """
    if malformed is None:
        try:
            parse_json(call.args, "args")
            malformed = False
        except ValueError:
            malformed = True
    content = f'{{"id": {_string(call.id)}, "name": {_string(call.name)}'
    if text:
        content += f', "text": {_string(text)}'
    if malformed:
        return f'{content}, "raw_args": {_string(call.args)}}}', "{}"
    return content + "}", call.args


def tool_result_args(call: ToolCall) -> str:
    """The ``tool_args`` of the ``tool_result`` step answering ``call``."""
    return f'{{"tool_call_id": {_string(call.id)}, "name": {_string(call.name)}}}'


def _name_or(value: object, fallback: str) -> str:
    """``value`` if it is a valid id/name (non-empty text, no NUL or lone surrogate)."""
    if isinstance(value, str) and value and "\x00" not in value and not has_lone_surrogate(value):
        return value
    return fallback


def _decode_call(step: RunStep) -> tuple[ToolCall, str]:
    """The recorded call and the reply text it carried; lenient with foreign formats.

    ``content`` may hold anything (a foreign writer, escapes decoding to NUL or
    a lone surrogate): what cannot make a valid ``ToolCall`` or ``Message``
    falls back, so a bad step can never make replay, and every run, fail.
    """
    try:
        head = json.loads(step.content)
    except (ValueError, RecursionError):
        head = None
    if not isinstance(head, dict):
        head = {"name": step.content}
    raw = head.get("raw_args")
    text = head.get("text")
    return (
        ToolCall(
            id=_name_or(head.get("id"), f"step-{step.step_index}"),
            name=_name_or(head.get("name"), "unknown"),
            args=raw if isinstance(raw, str) and not has_lone_surrogate(raw) else step.tool_args,
        ),
        text if isinstance(text, str) and not has_lone_surrogate(text) else "",
    )


def _decode_result_id(step: RunStep) -> str | None:
    try:
        meta = json.loads(step.tool_args)
    except (ValueError, RecursionError):
        return None
    call_id = meta.get("tool_call_id") if isinstance(meta, dict) else None
    return call_id if isinstance(call_id, str) and call_id else None


def latest_checkpoint(steps: Sequence[RunStep]) -> tuple[RunStep, CompactionCheckpoint] | None:
    """The most recent ``summary`` step whose ``tool_args`` is a valid checkpoint."""
    for step in reversed(steps):
        if step.step_type is StepType.summary:
            try:
                return step, CompactionCheckpoint.from_json(step.tool_args)
            except ValueError:
                continue  # an unparsable marker is ignored, never fatal
    return None


def replay(steps: Sequence[RunStep]) -> tuple[list[Message], list[int]]:
    """Rebuild the conversation from a window of steps (oldest first).

    Returns the messages and, for each, the ``step_index`` it came from (for the
    summary message: its checkpoint's ``retain_from_step``). Rules:

    - the most recent ``summary`` step with a valid checkpoint is emitted first,
      as a ``system`` message; every ``summary`` step and every step with
      ``step_index < retain_from_step`` is then skipped;
    - ``user`` → user, ``response`` → assistant, consecutive ``tool_call`` steps
      → one assistant message with those calls, ``tool_result`` → tool message;
      ``error`` steps are not replayed;
    - tool calls and results are paired: a result with no call before it (the
      window cut the call off) and a call never answered (the run stopped
      between them) are dropped, since model APIs refuse either.
    """
    messages: list[Message] = []
    sources: list[int] = []
    retain_from = 0
    found = latest_checkpoint(steps)
    if found is not None:
        summary, checkpoint = found
        retain_from = checkpoint.retain_from_step
        messages.append(Message("system", summary.content))
        sources.append(retain_from)
    turn = _ToolTurn(messages, sources)
    previous: StepType | None = None
    for step in steps:
        kind = step.step_type
        if kind in (StepType.summary, StepType.error) or step.step_index < retain_from:
            continue
        if kind is StepType.tool_call:
            call, text = _decode_call(step)
            if previous is not StepType.tool_call or not turn.calls:
                turn.flush()
                turn.text, turn.first_index = text, step.step_index
            turn.calls.append(call)
        elif kind is StepType.tool_result:
            if turn.calls:  # else its call is not in the window: dropped
                turn.results.append((step.content, _decode_result_id(step), step.step_index))
        else:
            turn.flush()
            role = "user" if kind is StepType.user else "assistant"
            messages.append(Message(role, step.content))
            sources.append(step.step_index)
        previous = kind
    turn.flush()
    return messages, sources


class _ToolTurn:
    """The assistant message with tool calls that replay is gathering, and its results."""

    __slots__ = ("calls", "first_index", "messages", "results", "sources", "text")

    def __init__(self, messages: list[Message], sources: list[int]) -> None:
        self.messages = messages
        self.sources = sources
        self.text = ""
        self.first_index = 0
        self.calls: list[ToolCall] = []
        self.results: list[tuple[str, str | None, int]] = []  # content, call id, step index

    def flush(self) -> None:
        """Emit the gathered turn, keeping only answered calls and their results."""
        if not self.calls:
            return
        answered = {call_id for _, call_id, _ in self.results}
        kept = tuple(call for call in self.calls if call.id in answered)
        if kept or self.text:
            self.messages.append(Message("assistant", self.text, kept))
            self.sources.append(self.first_index)
            called = {call.id for call in kept}
            for content, call_id, index in self.results:
                if call_id in called:
                    self.messages.append(Message("tool", content, (), call_id))
                    self.sources.append(index)
        self.calls.clear()
        self.results.clear()


def next_step_index(steps: Sequence[RunStep]) -> int:
    """The index of the next step: the last stored step's index + 1, or 0 for a new session."""
    return steps[-1].step_index + 1 if steps else 0


@attrs.define
class Conversation:
    """The messages the model is shown, and for each the ``step_index`` it came from.

    For a summary message the index is its checkpoint's ``retain_from_step``.
    """

    messages: list[Message]
    sources: list[int]

    @classmethod
    def replayed(cls, steps: Sequence[RunStep]) -> Conversation:
        """The conversation ``replay`` rebuilds from ``steps``."""
        messages, sources = replay(steps)
        return cls(messages, sources)

    def add(self, message: Message, step_index: int) -> None:
        """Append ``message``, recorded as ``step_index``."""
        self.messages.append(message)
        self.sources.append(step_index)

    def summarized(
        self, summary: str, retained_from: int, summary_index: int
    ) -> tuple[int, Conversation]:
        """The checkpoint's ``retain_from_step`` and what the model sees after the summary.

        ``summary`` replaces ``messages[:retained_from]``; ``summary_index`` is
        the index the ``summary`` step will get. The result is what replay will
        rebuild from the stored steps:

        - an earlier summary (a leading ``system`` message: only replay makes
          them) is superseded, never kept verbatim, even with ``retained_from=0``;
        - ``retain_from_step`` is the step of the first message kept, or, when
          every message was summarized, the step after the summary's (at most
          ``INT32_MAX``, where a checkpoint must fit);
        - ``tool`` messages whose call was summarized away are dropped, as
          replay drops a ``tool_result`` with no call before it.
        """
        kept = retained_from
        if kept == 0 and self.messages and self.messages[0].role == "system":
            kept = 1
        # No step follows one at INT32_MAX, and replay skips summary steps: the same cut.
        after_summary = min(summary_index + 1, INT32_MAX)
        retain = self.sources[kept] if kept < len(self.sources) else after_summary
        start = kept
        while start < len(self.messages) and self.messages[start].role == "tool":
            start += 1
        head = Message(role="system", content=summary)
        return retain, Conversation([head, *self.messages[start:]], [retain, *self.sources[start:]])
