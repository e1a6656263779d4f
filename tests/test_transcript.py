"""A session's transcript: what it shows, through which protocol calls, and the HTML page."""

from __future__ import annotations

import html.parser
from datetime import UTC, datetime

import pytest

import agentloopmem
from agentloop import (
    FinalizeSummary,
    Loop,
    ModelReply,
    RunStatus,
    RunStep,
    ScriptedModel,
    Session,
    SessionInfo,
    StepType,
    ToolCall,
    ToolContext,
    Transcript,
    tool,
    transcript,
    transcript_html,
)

pytestmark = pytest.mark.anyio

T0 = datetime(2026, 3, 4, 5, 6, 7, 891000, tzinfo=UTC)


@tool
async def remember_name(ctx: ToolContext, name: str) -> str:
    """Remember the user's name."""
    ctx.data["name"] = name
    return f"remembered {name}"


async def loop_session() -> agentloopmem.MemoryStore:
    """A store holding one session a Loop ran: a tool call, its result and a response."""
    store = agentloopmem.MemoryStore()
    await store.put(Session("user-42", "scripted-1", "You are terse.\nBe kind."))
    await store.set_labels("user-42", {"suite": "evals", "case": "name"})
    model = ScriptedModel(
        [
            ModelReply(
                tool_calls=[ToolCall("call-1", "remember_name", '{"name": "Ada"}')],
                prompt_tokens=11,
                completion_tokens=3,
            ),
            ModelReply("Nice to meet you, Ada.", prompt_tokens=17, completion_tokens=6),
        ]
    )
    loop = Loop(model=model, steps=store, sessions=store, tools=[remember_name])
    await loop.run("user-42", "Hi, I'm Ada.")
    return store


class TestText:
    async def test_shows_settings_steps_and_the_run(self) -> None:
        """Settings, labels, data, every step with its tool, args and tokens, and the run."""
        store = await loop_session()
        text = await transcript(store, store, "user-42")
        assert text.startswith("session user-42\n")
        for expected in (
            "model         scripted-1",
            "labels        case=name, suite=evals",
            "status        completed",
            "    You are terse.\n    Be kind.",
            '"name": "Ada"',
            "latest run: completed, 4 steps, 28 prompt + 9 completion tokens",
            "steps (4)",
            "[0] #0 user\n",
            "| Hi, I'm Ada.",
            '[1] #1 tool_call   remember_name({"name": "Ada"}) [call call-1]',
            "tokens 11 prompt + 3 completion",
            "[2] #2 tool_result remember_name [call call-1]",
            "| remembered Ada",
            "[3] #3 response\n",
            "| Nice to meet you, Ada.",
        ):
            assert expected in text, (expected, text)

    async def test_unknown_session_creates_nothing(self) -> None:
        """An unknown session reads as not found, says so, and nothing is created."""
        store = agentloopmem.MemoryStore()
        read = await Transcript.read(store, store, "nobody")
        assert not read.found
        assert "none: unknown session" in read.text()
        assert not await store.exists("nobody")

    async def test_steps_without_a_session_row(self) -> None:
        """Steps with no session row are shown, and the missing row is named."""
        steps = agentloopmem.StepStore()
        sessions = agentloopmem.SessionStore()
        await steps.append(RunStep("s", 5, StepType.error, "model failed: boom", created_at=T0))
        read = await Transcript.read(steps, sessions, "s")
        assert read.found
        assert read.info is None
        assert "session row   none (steps only)" in read.text()
        assert "[0] #5 error" in read.text()
        assert "| model failed: boom" in read.text()

    async def test_summary_and_odd_content(self) -> None:
        """A summary step names its checkpoint; foreign tool_call content is shown as is."""
        store = agentloopmem.MemoryStore()
        await store.append_many(
            [
                RunStep("s", 0, StepType.summary, "they met", '{"retain_from_step": 7}'),
                RunStep("s", 1, StepType.tool_call, "not json", '{"a": 1}'),
            ]
        )
        text = await transcript(store, store, "s")
        assert "(history before step 7 summarized)" in text
        assert '?({"a": 1}) [call ?]' in text
        assert "| not json" in text

    async def test_restored_info_and_final(self) -> None:
        """Run totals, times and the latest summary come from session_info and final."""
        store = agentloopmem.MemoryStore()
        info = SessionInfo("s", RunStatus.timeout, 42, T0, T0, labels={"k": "v"})
        final = FinalizeSummary(RunStatus.timeout, 1, 2, 3, 1500, 9)
        await store.restore_session(Session("s", data='{"b":1,"a":2}'), info, final)
        text = await transcript(store, store, "s")
        assert "created       2026-03-04 05:06:07.891+00:00" in text
        assert "steps in runs 42" in text
        assert "latest run: timeout, 3 steps, 1 prompt + 2 completion tokens, 1500 ms" in text
        assert '    {\n      "a": 2,\n      "b": 1\n    }' in text


class _Page(html.parser.HTMLParser):
    """Collects what a page would load and the text of each element by id."""

    def __init__(self) -> None:
        super().__init__()
        self.loads: list[tuple[str, str, str]] = []
        self.tags: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        for name, value in attrs:
            if name in ("src", "href", "srcset", "action", "poster", "data"):
                self.loads.append((tag, name, value or ""))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


class TestHtml:
    async def test_one_self_contained_page(self) -> None:
        """The page loads nothing: no script, no link, no src, and a CSP forbidding any."""
        store = await loop_session()
        page = await transcript_html(store, store, "user-42")
        parser = _Page()
        parser.feed(page)
        assert parser.loads == []
        assert "script" not in parser.tags
        assert "link" not in parser.tags
        assert "default-src 'none'" in page
        shown = "".join(parser.text)
        assert "remember_name" in shown
        assert "Nice to meet you, Ada." in shown
        assert page.count("<article class='step ") == 4

    async def test_stored_text_is_escaped(self) -> None:
        """Markup in any stored text is shown as text, never interpreted."""
        store = agentloopmem.MemoryStore()
        evil = "<script>alert(1)</script><img src=x onerror=alert(2)>'\""
        await store.put(Session("s<b>", evil, evil, '{"x": "</pre><script>"}'))
        await store.set_labels("s<b>", {"k<i>": evil})
        await store.append(RunStep("s<b>", 0, StepType.user, evil))
        await store.append(RunStep("s<b>", 1, StepType.tool_call, evil, '{"<a>": "<b>"}'))
        page = await transcript_html(store, store, "s<b>")
        parser = _Page()
        parser.feed(page)
        assert "script" not in parser.tags
        assert "img" not in parser.tags
        assert "b" not in parser.tags
        assert parser.loads == []
        assert evil in "".join(parser.text)
