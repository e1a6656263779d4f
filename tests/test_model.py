"""The model seam's values and ScriptedModel."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from agentloop import Message, Model, ModelReply, ModelRequest, ScriptedModel, ToolCall, ToolSpec


def request(text: str = "hi") -> ModelRequest:
    return ModelRequest("m", "", (Message("user", text),), (), None)


class TestValues:
    def test_lists_become_tuples(self) -> None:
        """Lists given for tuple fields are stored as tuples."""
        reply = ModelReply(tool_calls=[ToolCall("1", "f")])  # type: ignore[arg-type]
        assert reply.tool_calls == (ToolCall("1", "f", "{}"),)
        assert ModelRequest("m", "", [Message("user")], [], None).messages == (Message("user"),)  # type: ignore[arg-type]

    def test_message_role_checked(self) -> None:
        """An unknown role is a ValueError naming the field."""
        with pytest.raises(ValueError, match=r"^role must be one of system, user, assistant, tool"):
            Message("robot")

    def test_types_checked_before_values(self) -> None:
        """Wrong types raise TypeError naming the field."""
        with pytest.raises(TypeError, match=r"^content must be a str"):
            Message("user", 1)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"^tool_calls must hold only ToolCall values"):
            Message("assistant", tool_calls=("x",))  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"^parameters must be a dict"):
            ToolSpec("f", "", [])  # type: ignore[arg-type]

    def test_tool_call_needs_id_and_name(self) -> None:
        """ToolCall refuses an empty id or name but accepts any argument text."""
        with pytest.raises(ValueError, match=r"^id must be a non-empty str"):
            ToolCall("", "f")
        with pytest.raises(ValueError, match=r"^name must be a non-empty str"):
            ToolCall("1", "")
        assert ToolCall("1", "f", "{not json").args == "{not json"

    def test_reply_tokens_are_int32(self) -> None:
        """Token counts must be ints >= 0."""
        with pytest.raises(ValueError, match=r"^prompt_tokens must be an int in"):
            ModelReply(prompt_tokens=-1)
        with pytest.raises(TypeError, match=r"^completion_tokens must be an int"):
            ModelReply(completion_tokens=True)

    def test_values_are_frozen(self) -> None:
        """Model values cannot be changed after construction."""
        message = Message("user", "x")
        with pytest.raises(AttributeError):
            message.content = "y"  # type: ignore[misc]


class TestScriptedModel:
    async def test_replays_in_order_and_records_requests(self) -> None:
        """Replies come back in order; every request is recorded; str is shorthand."""
        model = ScriptedModel(["one", ModelReply("two", prompt_tokens=3)])
        assert isinstance(model, Model)
        assert (await model.complete(request("a"))).content == "one"
        assert await model.complete(request("b")) == ModelReply("two", prompt_tokens=3)
        assert [r.messages[0].content for r in model.requests] == ["a", "b"]
        assert model.remaining == 0

    async def test_running_out_is_a_clear_error(self) -> None:
        """Asking past the end raises RuntimeError saying the script ran out."""
        model = ScriptedModel(["only"])
        await model.complete(request())
        with pytest.raises(
            RuntimeError, match=r"^ScriptedModel ran out of replies: all 1 were used"
        ):
            await model.complete(request())
        assert len(model.requests) == 2

    def test_refuses_bad_replies(self) -> None:
        """A reply that is neither ModelReply nor str is a TypeError naming its position."""
        with pytest.raises(TypeError, match=r"^replies\[1\] must be a ModelReply or a str"):
            ScriptedModel(["ok", 3])  # type: ignore[list-item]

    async def test_complete_is_a_checkpoint(self) -> None:
        """complete yields to trio, and a cancelled call consumes no reply."""
        model = ScriptedModel(["one"])
        with trio.testing.assert_checkpoints():
            await model.complete(request())
        model = ScriptedModel(["one"])
        with trio.CancelScope() as scope:
            scope.cancel()
            await model.complete(request())
        assert model.remaining == 1
