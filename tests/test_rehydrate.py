"""Replay: steps → messages, the checkpoint rule, call/result pairing, the recording format."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from agentloop import CompactionCheckpoint, Message, RunStep, StepType, ToolCall
from agentloop._rehydrate import (
    Conversation,
    latest_checkpoint,
    next_step_index,
    replay,
    tool_call_fields,
    tool_result_args,
)


def step(index: int, kind: str, content: str = "", tool_args: str = "{}") -> RunStep:
    return RunStep("s", index, StepType(kind), content, tool_args)


def call_steps(index: int, call: ToolCall, output: str, text: str = "") -> list[RunStep]:
    content, args = tool_call_fields(call, text)
    return [
        step(index, "tool_call", content, args),
        step(index + 1, "tool_result", output, tool_result_args(call)),
    ]


def summary(index: int, text: str, retain: int) -> RunStep:
    return step(index, "summary", text, CompactionCheckpoint(retain).to_json())


class TestReplay:
    def test_mapping(self) -> None:
        """user→user, tool_call→assistant call, tool_result→tool, response→assistant."""
        call = ToolCall("c1", "add", '{"a": 1}')
        steps = [step(0, "user", "hi"), *call_steps(1, call, "2"), step(3, "response", "two")]
        messages, sources = replay(steps)
        assert messages == [
            Message("user", "hi"),
            Message("assistant", "", (call,)),
            Message("tool", "2", tool_call_id="c1"),
            Message("assistant", "two"),
        ]
        assert sources == [0, 1, 2, 3]

    def test_error_steps_not_replayed(self) -> None:
        """error steps are left out of the conversation."""
        steps = [step(0, "user", "hi"), step(1, "error", "boom"), step(2, "user", "again")]
        assert [m.content for m in replay(steps)[0]] == ["hi", "again"]

    def test_checkpoint_rule(self) -> None:
        """The latest valid summary comes first; older steps and every summary are skipped."""
        steps = [
            step(0, "user", "old"),
            step(1, "response", "old answer"),
            summary(2, "first summary", 0),
            step(3, "user", "mid"),
            summary(4, "second summary", 3),
            step(5, "response", "mid answer"),
        ]
        messages, sources = replay(steps)
        assert messages == [
            Message("system", "second summary"),
            Message("user", "mid"),
            Message("assistant", "mid answer"),
        ]
        assert sources == [3, 3, 5]

    def test_unparsable_checkpoint_ignored(self) -> None:
        """A summary with a broken marker is ignored; the previous valid one wins."""
        steps = [
            step(0, "user", "old"),
            summary(1, "good summary", 2),
            step(2, "user", "new"),
            step(3, "summary", "bad summary", '{"retain": 9}'),
        ]
        assert replay(steps)[0] == [Message("system", "good summary"), Message("user", "new")]
        only_bad = [step(0, "user", "a"), step(1, "summary", "bad", "[]")]
        assert replay(only_bad)[0] == [Message("user", "a")]

    def test_checkpoint_survives_reserialized_tool_args(self) -> None:
        """A store that re-serializes the checkpoint JSON (spacing, key order) still works."""
        steps = [step(0, "user", "a"), step(1, "summary", "sum", '{ "retain_from_step" : 2 }')]
        assert latest_checkpoint(steps) is not None
        assert replay(steps)[0] == [Message("system", "sum")]

    def test_consecutive_calls_group_into_one_message(self) -> None:
        """tool_call steps recorded back to back are one assistant message with all calls."""
        a, b = ToolCall("a", "f", "{}"), ToolCall("b", "g", "{}")
        head_a = tool_call_fields(a, "thinking")
        head_b = tool_call_fields(b)
        steps = [
            step(0, "user", "hi"),
            step(1, "tool_call", *head_a),
            step(2, "tool_call", *head_b),
            step(3, "tool_result", "ra", tool_result_args(a)),
            step(4, "tool_result", "rb", tool_result_args(b)),
        ]
        messages, _ = replay(steps)
        assert messages[1] == Message("assistant", "thinking", (a, b))
        assert [m.tool_call_id for m in messages[2:]] == ["a", "b"]

    def test_result_without_its_call_is_dropped(self) -> None:
        """A window that cut off the call drops the orphaned result."""
        call = ToolCall("c1", "f", "{}")
        steps = [*call_steps(0, call, "out")[1:], step(2, "response", "done")]
        assert replay(steps)[0] == [Message("assistant", "done")]

    def test_unanswered_call_is_dropped(self) -> None:
        """A call the run never answered (it stopped in between) is not replayed."""
        a, b = ToolCall("a", "f", "{}"), ToolCall("b", "f", "{}")
        steps = [
            step(0, "tool_call", *tool_call_fields(a)),
            step(1, "tool_call", *tool_call_fields(b)),
            step(2, "tool_result", "ra", tool_result_args(a)),
            step(3, "user", "next"),
            step(4, "tool_call", *tool_call_fields(ToolCall("z", "f", "{}"))),
        ]
        messages, _ = replay(steps)
        assert messages == [
            Message("assistant", "", (a,)),
            Message("tool", "ra", tool_call_id="a"),
            Message("user", "next"),
        ]

    def test_calls_interleaved_with_results_replay_as_one_turn_each(self) -> None:
        """A trace written call, result, call, result (another writer's order) stays valid."""
        a, b = ToolCall("a", "f", "{}"), ToolCall("b", "g", "{}")
        steps = [
            step(0, "user", "hi"),
            *call_steps(1, a, "ra", "thinking"),
            *call_steps(3, b, "rb"),
            step(5, "response", "done"),
        ]
        messages, sources = replay(steps)
        assert messages == [
            Message("user", "hi"),
            Message("assistant", "thinking", (a,)),
            Message("tool", "ra", tool_call_id="a"),
            Message("assistant", "", (b,)),
            Message("tool", "rb", tool_call_id="b"),
            Message("assistant", "done"),
        ]
        assert sources == [0, 1, 2, 3, 4, 5]

    def test_a_batch_of_calls_never_answered_keeps_only_the_reply_text(self) -> None:
        """A whole batch stored but no result (the run stopped): only the reply's text replays."""
        a, b = ToolCall("a", "f", "{}"), ToolCall("b", "f", "{}")
        steps = [
            step(0, "user", "hi"),
            step(1, "tool_call", *tool_call_fields(a, "looking")),
            step(2, "tool_call", *tool_call_fields(b)),
            step(3, "user", "again"),
        ]
        messages, _ = replay(steps)
        assert messages == [
            Message("user", "hi"),
            Message("assistant", "looking"),
            Message("user", "again"),
        ]

    def test_next_step_index(self) -> None:
        """Next index is the last stored step's index + 1, or 0."""
        assert next_step_index([]) == 0
        assert next_step_index([step(7, "user"), step(3, "user")]) == 4


class TestSummarized:
    """The compacting run's view and the next run's replay are one rule."""

    HISTORY = (
        summary(0, "earlier summary", 1),
        step(1, "user", "q1"),
        *call_steps(2, ToolCall("c1", "add", "{}"), "r1", text="thinking"),
        *call_steps(4, ToolCall("c2", "add", "{}"), "r2"),
        step(6, "response", "a1"),
        step(7, "user", "q2"),
    )

    def test_every_cut_shows_what_replay_will(self) -> None:
        """For each retained_from, summarized() equals replay of the steps plus the summary."""
        base = Conversation.replayed(self.HISTORY)
        for retained_from in range(len(base.messages) + 1):
            retain, seen = base.summarized("new summary", retained_from, 8)
            stored = [*self.HISTORY, summary(8, "new summary", retain)]
            assert seen == Conversation.replayed(stored), retained_from

    def test_earlier_summary_is_superseded_even_when_nothing_is_summarized(self) -> None:
        """retained_from=0 drops the leading summary; the checkpoint keeps its first step."""
        base = Conversation.replayed(self.HISTORY)
        retain, seen = base.summarized("new", 0, 8)
        assert retain == 1
        assert [m.role for m in seen.messages[:2]] == ["system", "user"]
        assert seen.messages[0].content == "new"

    def test_tool_messages_cut_from_their_call_are_dropped(self) -> None:
        """Cutting between a call and its result keeps neither (replay drops the result too)."""
        base = Conversation.replayed(self.HISTORY)
        roles = [m.role for m in base.messages]
        first_tool = roles.index("tool")
        retain, seen = base.summarized("new", first_tool, 8)
        assert retain == base.sources[first_tool]
        assert seen.messages[1] == base.messages[first_tool + 1]
        assert seen.messages[1].role == "assistant"


class TestRecordingFormat:
    def test_tool_call_fields(self) -> None:
        """content holds id and name as JSON; tool_args holds the arguments."""
        content, args = tool_call_fields(ToolCall("id-1", "search", '{"q": "x"}'))
        assert json.loads(content) == {"id": "id-1", "name": "search"}
        assert args == '{"q": "x"}'

    def test_malformed_args_kept_exactly_in_content(self) -> None:
        """Arguments that are not JSON are stored verbatim in content, tool_args stays JSON."""
        call = ToolCall("c", "f", "{oops")
        content, args = tool_call_fields(call)
        assert args == "{}"
        assert replay(
            [
                step(0, "tool_call", content, args),
                step(1, "tool_result", "E", tool_result_args(call)),
            ]
        )[0][0].tool_calls == (call,)

    def test_args_survive_reserialization(self) -> None:
        """A store re-serializing tool_args (key order) yields JSON-equal arguments."""
        call = ToolCall("c", "f", '{"b": 1, "a": 2}')
        content, _ = tool_call_fields(call)
        steps = [
            step(0, "tool_call", content, '{"a":2,"b":1}'),
            step(1, "tool_result", "r", '{"name":"f","tool_call_id":"c"}'),
        ]
        replayed = replay(steps)[0][0].tool_calls[0]
        assert (replayed.id, replayed.name) == ("c", "f")
        assert json.loads(replayed.args) == json.loads(call.args)

    def test_foreign_tool_call_content_is_tolerated(self) -> None:
        """A tool_call whose content is a bare name (not our format) still replays."""
        steps = [step(4, "tool_call", "lookup", '{"k": 1}'), step(5, "tool_result", "v", "{}")]
        messages, _ = replay(steps)
        assert messages == []  # no recoverable call id, so the pair cannot be matched
        steps = [
            step(4, "tool_call", "lookup", '{"k": 1}'),
            step(5, "tool_result", "v", '{"tool_call_id": "step-4"}'),
        ]
        messages, _ = replay(steps)
        assert messages[0].tool_calls == (ToolCall("step-4", "lookup", '{"k": 1}'),)

    def test_content_that_cannot_make_a_call_falls_back(self) -> None:
        """Escapes decoding to NUL or lone surrogates never make replay (and every run) fail."""
        content = '{"id": "a\\u0000", "name": "\\ud800", "text": "\\udfff", "raw_args": "\\ud800"}'
        steps = [
            RunStep("s", 0, StepType.tool_call, content, '{"q": 1}'),
            RunStep("s", 1, StepType.tool_result, "out", '{"tool_call_id": "step-0"}'),
        ]
        messages, _ = replay(steps)
        assert messages == [
            Message("assistant", "", (ToolCall("step-0", "unknown", '{"q": 1}'),)),
            Message("tool", "out", tool_call_id="step-0"),
        ]


_NAMES = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), min_size=1
)
_TEXT = st.text(st.characters(blacklist_categories=("Cs",)))


@given(call_id=_NAMES, name=_NAMES, text=_TEXT, args=st.sampled_from(['{"a": 1}', "{bad", "[]"]))
def test_recorded_heads_are_what_json_dumps_makes(
    call_id: str, name: str, text: str, args: str
) -> None:
    """The loop's hand-built heads are byte for byte json.dumps(head, ensure_ascii=False)."""
    call = ToolCall(call_id, name, args)
    head = {"id": call_id, "name": name} | ({"text": text} if text else {})
    malformed = args == "{bad"
    if malformed:
        head["raw_args"] = args
    expected = (json.dumps(head, ensure_ascii=False), "{}" if malformed else args)
    assert tool_call_fields(call, text) == expected
    assert tool_call_fields(call, text, malformed=malformed) == expected
    assert tool_result_args(call) == json.dumps(
        {"tool_call_id": call_id, "name": name}, ensure_ascii=False
    )
