"""How steps, summaries and lease times are written as Redis strings, and read back exactly."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from agentloop import FinalizeSummary, RunStatus, RunStep, StepType

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def encode_step(step: RunStep) -> str:
    """One list element: every field but the session id (the key names it), as JSON."""
    return json.dumps(
        [
            step.step_index,
            step.step_type.value,
            step.content,
            step.tool_args,
            step.duration_ms,
            step.prompt_tokens,
            step.completion_tokens,
            step.created_at.isoformat(),
        ]
    )


def decode_step(session_id: str, text: str) -> RunStep:
    """The step :func:`encode_step` wrote, field for field (``created_at`` aware UTC, µs)."""
    index, kind, content, args, duration, prompt, completion, created = json.loads(text)
    return RunStep(
        session_id,
        index,
        StepType(kind),
        content,
        args,
        duration,
        prompt,
        completion,
        datetime.fromisoformat(created),
    )


def encode_summary(summary: FinalizeSummary) -> str:
    """A ``FinalizeSummary`` as a JSON object of its fields."""
    return json.dumps(
        {
            "status": summary.status.value,
            "prompt_tokens": summary.prompt_tokens,
            "completion_tokens": summary.completion_tokens,
            "step_count": summary.step_count,
            "duration_ms": summary.duration_ms,
            "data_bytes_carried": summary.data_bytes_carried,
        }
    )


def decode_summary(text: str) -> FinalizeSummary:
    """The summary :func:`encode_summary` wrote."""
    fields = json.loads(text)
    return FinalizeSummary(
        RunStatus(fields["status"]),
        fields["prompt_tokens"],
        fields["completion_tokens"],
        fields["step_count"],
        fields["duration_ms"],
        fields["data_bytes_carried"],
    )


def from_micros(micros: int | str) -> datetime:
    """An aware UTC datetime from microseconds since the epoch (Redis ``TIME``), exactly."""
    return _EPOCH + timedelta(microseconds=int(micros))
