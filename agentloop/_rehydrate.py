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
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import attrs

from agentloop._model import Message, ToolCall
from agentloop._types import CompactionCheckpoint, RunStep, StepType
from agentloop._validate import parse_json


def tool_call_fields(call: ToolCall, text: str = "") -> tuple[str, str]:
    """The ``(content, tool_args)`` of the ``tool_call`` step recording ``call``."""
    head: dict[str, str] = {"id": call.id, "name": call.name}
    if text:
        head["text"] = text
    try:
        parse_json(call.args, "args")
        args = call.args
    except ValueError:
        head["raw_args"] = call.args
        args = "{}"
    return json.dumps(head, ensure_ascii=False), args


def tool_result_args(call: ToolCall) -> str:
    """The ``tool_args`` of the ``tool_result`` step answering ``call``."""
    return json.dumps({"tool_call_id": call.id, "name": call.name}, ensure_ascii=False)


def _decode_call(step: RunStep) -> tuple[ToolCall, str]:
    """The recorded call and the reply text it carried; lenient with foreign formats."""
    try:
        head = json.loads(step.content)
    except ValueError:
        head = None
    if not isinstance(head, dict):
        head = {"name": step.content}
    call_id = head.get("id")
    name = head.get("name")
    raw = head.get("raw_args")
    text = head.get("text")
    return (
        ToolCall(
            id=call_id if isinstance(call_id, str) and call_id else f"step-{step.step_index}",
            name=name if isinstance(name, str) and name else "unknown",
            args=raw if isinstance(raw, str) else step.tool_args,
        ),
        text if isinstance(text, str) else "",
    )


def _decode_result_id(step: RunStep) -> str | None:
    try:
        meta = json.loads(step.tool_args)
    except ValueError:
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
        messages.append(Message(role="system", content=summary.content))
        sources.append(retain_from)
    # An assistant message with tool calls, then its results, each with its step index.
    pending: list[tuple[Message, int]] = []

    def flush() -> None:
        if not pending:
            return
        (head, head_index), results = pending[0], pending[1:]
        answered = {result.tool_call_id for result, _ in results}
        calls = tuple(call for call in head.tool_calls if call.id in answered)
        if calls or head.content:
            messages.append(attrs.evolve(head, tool_calls=calls))
            sources.append(head_index)
            called = {call.id for call in calls}
            for result, index in results:
                if result.tool_call_id in called:
                    messages.append(result)
                    sources.append(index)
        pending.clear()

    previous: StepType | None = None
    for step in steps:
        kind = step.step_type
        if kind in (StepType.summary, StepType.error) or step.step_index < retain_from:
            continue
        if kind is StepType.tool_call:
            call, text = _decode_call(step)
            if previous is StepType.tool_call and pending:
                head, head_index = pending[0]
                pending[0] = (attrs.evolve(head, tool_calls=(*head.tool_calls, call)), head_index)
            else:
                flush()
                head = Message(role="assistant", content=text, tool_calls=(call,))
                pending.append((head, step.step_index))
        elif kind is StepType.tool_result:
            if pending:
                call_id = _decode_result_id(step)
                result = Message(role="tool", content=step.content, tool_call_id=call_id)
                pending.append((result, step.step_index))
        else:
            flush()
            role = "user" if kind is StepType.user else "assistant"
            messages.append(Message(role=role, content=step.content))
            sources.append(step.step_index)
        previous = kind
    flush()
    return messages, sources


def next_step_index(steps: Sequence[RunStep]) -> int:
    """The index of the next step: the last stored step's index + 1, or 0 for a new session."""
    return steps[-1].step_index + 1 if steps else 0
