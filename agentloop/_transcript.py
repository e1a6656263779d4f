"""A session as a person reads it: its settings, every step and its run summary.

``Transcript.read`` gathers what the stores hold for one session through the
protocols only (``get``, ``exists``, and ``session_info``, ``final``,
``steps_after`` / ``all`` where the stores have them); ``text()`` and
``html()`` render it without touching a store, so a report hook that cannot
await can render a transcript read earlier. ``html()`` is one self-contained
page: inline style, no script, no network resource (its Content-Security-Policy
forbids any), every stored text escaped.
"""

from __future__ import annotations

import html
import json

import attrs

from agentloop._protocols import (
    SessionStore,
    StepStore,
    SupportsAll,
    SupportsFinal,
    SupportsPaging,
    SupportsStepsAfter,
)
from agentloop._types import FinalizeSummary, RunStep, Session, SessionInfo, StepType
from agentloop._validate import INT32_MAX, validate_session_id

_CHUNK = 1000


@attrs.frozen
class Transcript:
    """What the stores hold for one session, ready to render.

    ``info`` is ``None`` when the session store cannot tell it (no
    ``session_info``) or no session write created the session; ``final`` is
    ``None`` when the store has no ``final`` or the session never finalized;
    ``exists`` is whether the session store has a row for it. ``steps`` are in
    insertion order.
    """

    session: Session
    exists: bool
    info: SessionInfo | None
    final: FinalizeSummary | None
    steps: tuple[RunStep, ...]

    @property
    def found(self) -> bool:
        """Whether the stores hold anything for the session (a session row or steps)."""
        return self.exists or bool(self.steps)

    @classmethod
    async def read(cls, steps: StepStore, sessions: SessionStore, session_id: str) -> Transcript:
        """Read the session from the stores; creates nothing.

        The trace is read with ``steps_after`` in chunks where the step store
        has it, else ``all``, else ``last_n`` (the newest 2**31 - 1 steps).
        The reads are separate calls: a session written meanwhile may show two
        moments.

        Raises:
            TypeError, ValueError: ``session_id`` is not a valid session id.
            Whatever the stores raise.
        """
        validate_session_id(session_id)
        session = await sessions.get(session_id)
        exists = await sessions.exists(session_id)
        info = (
            await sessions.session_info(session_id)
            if isinstance(sessions, SupportsPaging)
            else None
        )
        final = await sessions.final(session_id) if isinstance(sessions, SupportsFinal) else None
        return cls(session, exists, info, final, tuple(await _trace(steps, session_id)))

    def text(self) -> str:
        """The transcript as plain text (what ``agentloop show`` prints)."""
        lines = [f"session {self.session.id}"]
        lines += [f"  {name:<14}{value}" for name, value in _settings(self)]
        for name, block in _blocks(self):
            lines.append(f"  {name}:")
            lines += [f"    {line}" for line in block.splitlines() or [""]]
        lines.append("")
        lines.append(_run_line(self))
        lines.append("")
        lines.append(f"steps ({len(self.steps)})")
        for position, step in enumerate(self.steps):
            head, body = _describe(step)
            line = f"  [{position}] #{step.step_index} {step.step_type.value:<11} {head}"
            lines.append(line.rstrip())
            lines.append(f"      {_meta(step)}")
            lines += [f"      | {line}" for line in body.splitlines()]
        return "\n".join(lines) + "\n"

    def html(self) -> str:
        """The transcript as one self-contained HTML page, every stored text escaped."""
        e = _escape
        rows = "".join(
            f"<tr><th>{e(name)}</th><td>{e(value)}</td></tr>" for name, value in _settings(self)
        )
        blocks = "".join(
            f"<h3>{e(name)}</h3><pre class='block'>{e(block)}</pre>"
            for name, block in _blocks(self)
        )
        steps = "".join(_step_html(position, step) for position, step in enumerate(self.steps))
        title = e(f"agentloop session {self.session.id}")
        return (
            "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
            "<meta http-equiv='Content-Security-Policy' "
            "content=\"default-src 'none'; style-src 'unsafe-inline'\">"
            f"<title>{title}</title><style>{_STYLE}</style></head><body>"
            f"<h1>Session <code id='session-id'>{e(self.session.id)}</code></h1>"
            f"<section id='settings'><h2>Settings</h2><table>{rows}</table>{blocks}</section>"
            f"<section id='run'><h2>Latest run</h2><p id='run-summary'>{e(_run_line(self))}</p>"
            f"</section><section id='steps'><h2>Steps ({len(self.steps)})</h2>{steps}</section>"
            "</body></html>\n"
        )


async def transcript(steps: StepStore, sessions: SessionStore, session_id: str) -> str:
    """The session's transcript as plain text: ``(await Transcript.read(...)).text()``."""
    return (await Transcript.read(steps, sessions, session_id)).text()


async def transcript_html(steps: StepStore, sessions: SessionStore, session_id: str) -> str:
    """The session's transcript as one self-contained HTML page:
    ``(await Transcript.read(...)).html()``."""
    return (await Transcript.read(steps, sessions, session_id)).html()


async def _trace(steps: StepStore, session_id: str) -> list[RunStep]:
    if isinstance(steps, SupportsStepsAfter):
        found: list[RunStep] = []
        while True:
            chunk = await steps.steps_after(session_id, len(found), _CHUNK)
            found += chunk
            if len(chunk) < _CHUNK:
                return found
    if isinstance(steps, SupportsAll):
        return await steps.all(session_id)
    return await steps.last_n(session_id, INT32_MAX)


def _settings(t: Transcript) -> list[tuple[str, str]]:
    pairs = [("model", t.session.model or "(none)")]
    if t.info is not None:
        labels = ", ".join(f"{k}={v}" for k, v in sorted(t.info.labels.items()))
        pairs += [
            ("labels", labels or "(none)"),
            ("created", t.info.created_at.isoformat(sep=" ", timespec="milliseconds")),
            ("updated", t.info.updated_at.isoformat(sep=" ", timespec="milliseconds")),
            ("status", t.info.status.value if t.info.status is not None else "(never finalized)"),
            ("steps in runs", str(t.info.step_count)),
        ]
    if not t.exists:
        pairs.append(("session row", "none (steps only)" if t.steps else "none: unknown session"))
    return pairs


def _blocks(t: Transcript) -> list[tuple[str, str]]:
    data = t.session.data
    return [
        ("system prompt", t.session.system_prompt or "(none)"),
        ("data", _pretty(data) if data is not None else "(none)"),
    ]


def _run_line(t: Transcript) -> str:
    final = t.final
    if final is None:
        return "latest run: none recorded"
    return (
        f"latest run: {final.status.value}, {final.step_count} steps, "
        f"{final.prompt_tokens} prompt + {final.completion_tokens} completion tokens, "
        f"{final.duration_ms} ms, {final.data_bytes_carried} data bytes carried"
    )


def _meta(step: RunStep) -> str:
    return (
        f"{step.created_at.isoformat(sep=' ', timespec='milliseconds')}, {step.duration_ms} ms, "
        f"tokens {step.prompt_tokens} prompt + {step.completion_tokens} completion"
    )


def _object(text: str) -> dict[str, object]:
    try:
        decoded = json.loads(text)
    except (ValueError, RecursionError):
        return {}
    return decoded if isinstance(decoded, dict) else {}


def _describe(step: RunStep) -> tuple[str, str]:
    """A one-line head and the body of a step, read leniently (foreign writers too)."""
    kind = step.step_type
    if kind is StepType.tool_call:
        head = _object(step.content)
        name, call_id = head.get("name", "?"), head.get("id", "?")
        args = (
            head["raw_args"] if isinstance(head.get("raw_args"), str) else _compact(step.tool_args)
        )
        body = head["text"] if isinstance(head.get("text"), str) else ""
        if not head:
            body = step.content
        return f"{name}({args}) [call {call_id}]", str(body)
    if kind is StepType.tool_result:
        meta = _object(step.tool_args)
        return f"{meta.get('name', '?')} [call {meta.get('tool_call_id', '?')}]", step.content
    if kind is StepType.summary:
        retain = _object(step.tool_args).get("retain_from_step", "?")
        return f"(history before step {retain} summarized)", step.content
    return "", step.content


def _compact(text: str) -> str:
    try:
        return json.dumps(json.loads(text), ensure_ascii=False, separators=(", ", ": "))
    except (ValueError, RecursionError):
        return text


def _pretty(text: str) -> str:
    try:
        return json.dumps(json.loads(text), ensure_ascii=False, indent=2, sort_keys=True)
    except (ValueError, RecursionError):
        return text


def _escape(text: object) -> str:
    return html.escape(str(text), quote=True)


def _step_html(position: int, step: RunStep) -> str:
    e = _escape
    head, body = _describe(step)
    kind = step.step_type.value
    content = f"<pre class='content'>{e(body)}</pre>" if body else ""
    return (
        f"<article class='step {kind}' id='step-{position}' data-step-index='{step.step_index}'>"
        f"<header><span class='pos'>[{position}]</span> <span class='index'>#{step.step_index}"
        f"</span> <span class='type'>{e(kind)}</span> <span class='head'>{e(head)}</span>"
        f"<span class='meta'>{e(_meta(step))}</span></header>{content}</article>"
    )


_STYLE = " ".join(
    (
        "body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;",
        "color:#1d1d1f;background:#fafafa}",
        "h1 code{font-size:90%}table{border-collapse:collapse}",
        "th{text-align:left;padding:.15rem 1rem .15rem 0;color:#555;font-weight:600}",
        "pre{white-space:pre-wrap;word-break:break-word;margin:.3rem 0}",
        ".block{background:#fff;border:1px solid #ddd;padding:.5rem}",
        ".step{background:#fff;border:1px solid #ddd;border-left:4px solid #888;",
        "margin:.5rem 0;padding:.4rem .6rem}",
        ".step header{display:flex;gap:.5rem;flex-wrap:wrap;align-items:baseline}",
        ".step .type{font-weight:700}.step .meta{margin-left:auto;color:#777;font-size:85%}",
        ".step .pos,.step .index{color:#777;font-family:monospace}",
        ".step .head{font-family:monospace}",
        ".user{border-left-color:#2962ff}.response{border-left-color:#2e7d32}",
        ".tool_call{border-left-color:#ef6c00}.tool_result{border-left-color:#8d6e63}",
        ".error{border-left-color:#c62828;background:#fff5f5}.summary{border-left-color:#6a1b9a}",
    )
)
