"""The value types refuse bad values at construction, naming the field and the rule."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import attrs
import pytest

from agentloop import (
    CompactionCheckpoint,
    FinalizeSummary,
    RunStatus,
    RunStep,
    Session,
    SessionInfo,
    StepType,
)

AWARE = datetime(2026, 1, 1, 12, 0, 0, 123456, tzinfo=UTC)


def step(**overrides: object) -> RunStep:
    fields: dict[str, object] = {
        "session_id": "s",
        "step_index": 0,
        "step_type": StepType.user,
        "created_at": AWARE,
    }
    fields.update(overrides)
    return RunStep(**fields)  # type: ignore[arg-type]


class TestSession:
    def test_defaults(self) -> None:
        """A session needs only an id; the rest defaults to empty with no data."""
        assert Session("abc") == Session(id="abc", model="", system_prompt="", data=None)

    def test_frozen(self) -> None:
        """Sessions are immutable values."""
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            Session("a").id = "b"  # type: ignore[misc]

    @pytest.mark.parametrize("bad", [None, 1, b"id", ["id"]])
    def test_id_must_be_str(self, bad: object) -> None:
        """A non-str id is a TypeError naming the field."""
        with pytest.raises(TypeError, match=r"^id must be a str"):
            Session(bad)  # type: ignore[arg-type]

    def test_id_not_empty(self) -> None:
        """An empty id is refused: get() must never hand back an empty id."""
        with pytest.raises(ValueError, match=r"^id must be a non-empty str"):
            Session("")

    def test_id_no_nul(self) -> None:
        """NUL cannot live in any store's key column."""
        with pytest.raises(ValueError, match=r"^id must not contain NUL"):
            Session("a\x00b")

    def test_id_no_lone_surrogate(self) -> None:
        """A lone surrogate has no UTF-8 encoding, so no durable store could keep it."""
        with pytest.raises(ValueError, match=r"^id must not contain lone surrogates"):
            Session("a\ud800")

    @pytest.mark.parametrize(
        "odd", [" padded ", "CASE", "case", "'; DROP TABLE steps; --", "日本語🙂"]
    )
    def test_id_is_opaque(self, odd: str) -> None:
        """Ids are kept exactly as given: no trimming, no case folding."""
        assert Session(odd).id == odd

    def test_model_no_nul(self) -> None:
        """The model name is a short identifier: NUL is refused."""
        with pytest.raises(ValueError, match=r"^model must not contain NUL"):
            Session("a", model="m\x00")

    def test_system_prompt_type(self) -> None:
        """A non-str system prompt is a TypeError naming the field."""
        with pytest.raises(TypeError, match=r"^system_prompt must be a str"):
            Session("a", system_prompt=3)  # type: ignore[arg-type]

    def test_system_prompt_surrogate(self) -> None:
        """Lone surrogates are refused in every text field."""
        with pytest.raises(ValueError, match=r"^system_prompt must not contain lone surrogates"):
            Session("a", system_prompt="x\udfff")

    def test_system_prompt_may_hold_nul(self) -> None:
        """Free text may hold NUL; durable stores must round-trip it."""
        assert Session("a", system_prompt="x\x00y").system_prompt == "x\x00y"

    @pytest.mark.parametrize(
        "bad", ["{", "not json", "", "NaN", '{"a": Infinity}', "[1,]", "1e400", "[-1E999]"]
    )
    def test_data_must_be_json(self, bad: str) -> None:
        """data is JSON text (strict: no NaN/Infinity)."""
        with pytest.raises(ValueError, match=r"^data must be JSON text"):
            Session("a", data=bad)

    def test_data_type(self) -> None:
        """data is JSON *text*, not a decoded value."""
        with pytest.raises(TypeError, match=r"^data must be a str"):
            Session("a", data={"k": 1})  # type: ignore[arg-type]

    @pytest.mark.parametrize("bad", [r'"\u0000"', r'{"\u0000": 1}', r'["\ud800"]'])
    def test_data_no_escaped_nul_or_surrogate(self, bad: str) -> None:
        """JSON escapes cannot smuggle in what jsonb and UTF-8 refuse."""
        with pytest.raises(ValueError, match=r"^data must not encode NUL or lone surrogates"):
            Session("a", data=bad)

    @pytest.mark.parametrize(
        "good", ["null", "1", '"x"', "[]", '{"a": [1, {"b": null}]}', r'"\\u0000"']
    )
    def test_data_any_json_value(self, good: str) -> None:
        """Any JSON value is working memory, not only objects."""
        assert Session("a", data=good).data == good

    def test_data_too_deep(self) -> None:
        """Pathologically nested JSON is a ValueError, not a RecursionError."""
        with pytest.raises(ValueError, match=r"^data must be JSON text nested less deeply"):
            Session("a", data="[" * 100_000 + "]" * 100_000)


class TestRunStep:
    def test_valid(self) -> None:
        """A fully specified step keeps every field."""
        s = step(
            content="hi", tool_args='{"a": 1}', duration_ms=5, prompt_tokens=7, completion_tokens=9
        )
        assert (s.content, s.tool_args, s.duration_ms, s.prompt_tokens, s.completion_tokens) == (
            "hi",
            '{"a": 1}',
            5,
            7,
            9,
        )

    def test_step_type_from_str(self) -> None:
        """A step type's value converts to the enum member."""
        assert step(step_type="tool_call").step_type is StepType.tool_call

    def test_unknown_step_type(self) -> None:
        """Unknown step types are refused with the allowed values."""
        with pytest.raises(ValueError, match=r"^step_type must be one of user, tool_call"):
            step(step_type="thought")

    def test_session_id_empty(self) -> None:
        """Steps need a session."""
        with pytest.raises(ValueError, match=r"^session_id must be a non-empty str"):
            step(session_id="")

    def test_session_id_nul(self) -> None:
        """NUL in a step's session id is refused."""
        with pytest.raises(ValueError, match=r"^session_id must not contain NUL"):
            step(session_id="\x00")

    @pytest.mark.parametrize(
        "field", ["step_index", "duration_ms", "prompt_tokens", "completion_tokens"]
    )
    def test_int_fields_reject_negative(self, field: str) -> None:
        """Integer fields are >= 0."""
        with pytest.raises(ValueError, match=rf"^{field} must be an int in \[0, 2147483647\]"):
            step(**{field: -1})

    @pytest.mark.parametrize(
        "field", ["step_index", "duration_ms", "prompt_tokens", "completion_tokens"]
    )
    def test_int_fields_fit_int32(self, field: str) -> None:
        """Integer fields fit in int32: the edge passes, one more fails."""
        assert getattr(step(**{field: 2**31 - 1}), field) == 2**31 - 1
        with pytest.raises(ValueError, match=rf"^{field} must be an int in"):
            step(**{field: 2**31})

    @pytest.mark.parametrize("bad", [True, 1.0, "1", None])
    def test_int_fields_reject_non_int(self, bad: object) -> None:
        """bool, float and str are not ints here."""
        with pytest.raises(TypeError, match=r"^step_index must be an int"):
            step(step_index=bad)

    def test_naive_created_at(self) -> None:
        """A naive datetime has no instant; it is refused with the fix in mind."""
        with pytest.raises(ValueError, match=r"^created_at must be timezone-aware"):
            step(created_at=datetime(2026, 1, 1))

    def test_created_at_type(self) -> None:
        """A timestamp that is not a datetime is a TypeError."""
        with pytest.raises(TypeError, match=r"^created_at must be a datetime"):
            step(created_at="2026-01-01T00:00:00Z")

    @pytest.mark.parametrize(
        "edge",
        [
            datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=1))),
            datetime(9999, 12, 31, 23, tzinfo=timezone(timedelta(hours=-2))),
        ],
    )
    def test_created_at_outside_utc_range(self, edge: datetime) -> None:
        """An instant that UTC cannot represent is a ValueError naming the field."""
        with pytest.raises(ValueError, match=r"^created_at must be within datetime's range"):
            step(created_at=edge)

    def test_created_at_held_in_utc(self) -> None:
        """An aware timestamp in any zone is held as the same instant in UTC."""
        plus2 = timezone(timedelta(hours=2))
        s = step(created_at=datetime(2026, 1, 1, 14, 0, 0, 1, tzinfo=plus2))
        assert s.created_at == datetime(2026, 1, 1, 12, 0, 0, 1, tzinfo=UTC)
        assert s.created_at.tzinfo is UTC

    def test_created_at_defaults_to_now(self) -> None:
        """Omitting created_at stamps the current UTC time."""
        before = datetime.now(UTC)
        stamped = RunStep("s", 0, StepType.user).created_at
        assert before <= stamped <= datetime.now(UTC)

    def test_tool_args_json(self) -> None:
        """tool_args must be JSON text: a summary step's checkpoint lives there."""
        with pytest.raises(ValueError, match=r"^tool_args must be JSON text"):
            step(tool_args="{'a': 1}")

    def test_content_surrogate(self) -> None:
        """Lone surrogates are refused in content."""
        with pytest.raises(ValueError, match=r"^content must not contain lone surrogates"):
            step(content="\udc00")

    def test_content_keeps_everything_else(self) -> None:
        """Content keeps NUL, whitespace, emoji and RTL text exactly."""
        text = " a\x00b\n\t🙂 שלום  \n"
        assert step(content=text).content == text

    def test_evolve_revalidates(self) -> None:
        """attrs.evolve re-runs validators, so a changed step is still valid."""
        with pytest.raises(ValueError, match=r"^step_index must be"):
            attrs.evolve(step(), step_index=-5)


class TestFinalizeSummary:
    def test_status_from_str(self) -> None:
        """A status value converts to the enum member."""
        assert FinalizeSummary("timeout").status is RunStatus.timeout

    def test_unknown_status(self) -> None:
        """Unknown statuses are refused."""
        with pytest.raises(ValueError, match=r"^status must be one of completed"):
            FinalizeSummary("done")

    def test_data_bytes_carried_is_int64(self) -> None:
        """data_bytes_carried fits int64, not only int32."""
        assert FinalizeSummary("completed", data_bytes_carried=2**63 - 1).data_bytes_carried
        with pytest.raises(ValueError, match=r"^data_bytes_carried must be an int in"):
            FinalizeSummary("completed", data_bytes_carried=2**63)

    @pytest.mark.parametrize(
        "field", ["prompt_tokens", "completion_tokens", "step_count", "duration_ms"]
    )
    def test_int32_fields(self, field: str) -> None:
        """Counts and durations are int32 >= 0."""
        with pytest.raises(ValueError, match=rf"^{field} must be an int in \[0, 2147483647\]"):
            FinalizeSummary("completed", **{field: 2**31})  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=rf"^{field} must be an int"):
            FinalizeSummary("completed", **{field: False})  # type: ignore[arg-type]


class TestCompactionCheckpoint:
    def test_round_trip(self) -> None:
        """to_json/from_json round-trip and use the documented form."""
        cp = CompactionCheckpoint(retain_from_step=12)
        assert json.loads(cp.to_json()) == {"retain_from_step": 12}
        assert CompactionCheckpoint.from_json(cp.to_json()) == cp

    def test_from_reserialized_json(self) -> None:
        """A store may re-serialize (spacing, key order); parsing is JSON-semantic."""
        text = '{ "other": 1,  "retain_from_step":3 }'
        assert CompactionCheckpoint.from_json(text) == CompactionCheckpoint(3)

    @pytest.mark.parametrize(
        "bad", ["{}", "[]", '{"retain_from_step": "3"}', '{"retain_from_step": true}', "nope"]
    )
    def test_from_bad_json(self, bad: str) -> None:
        """Malformed checkpoints are ValueErrors the loop can ignore."""
        with pytest.raises(ValueError, match=r"^(checkpoint|retain_from_step) must be"):
            CompactionCheckpoint.from_json(bad)

    def test_negative(self) -> None:
        """A checkpoint index is >= 0."""
        with pytest.raises(ValueError, match=r"^retain_from_step must be an int in"):
            CompactionCheckpoint.from_json('{"retain_from_step": -1}')


class TestSessionInfo:
    def test_status_optional(self) -> None:
        """A session never finalized has status None."""
        info = SessionInfo(id="a", status=None, step_count=0, created_at=AWARE, updated_at=AWARE)
        assert info.status is None

    def test_status_from_str(self) -> None:
        """A status value converts to the enum member, as in FinalizeSummary."""
        info = SessionInfo(
            id="a",
            status="timeout",
            step_count=0,  # type: ignore[arg-type]
            created_at=AWARE,
            updated_at=AWARE,
        )
        assert info.status is RunStatus.timeout

    def test_unknown_status(self) -> None:
        """An unknown status names the field and the allowed values."""
        with pytest.raises(ValueError, match=r"^status must be one of completed"):
            SessionInfo(
                id="a",
                status="done",
                step_count=0,  # type: ignore[arg-type]
                created_at=AWARE,
                updated_at=AWARE,
            )


class TestWithData:
    def test_replaces_only_data(self) -> None:
        """with_data keeps id, model and prompt and swaps the data."""
        base = Session("s", model="m", system_prompt="p", data="1")
        assert base.with_data('{"a": 2}') == Session(
            "s", model="m", system_prompt="p", data='{"a": 2}'
        )
        assert base.with_data(None).data is None
        assert base.data == "1"

    def test_validates_new_data(self) -> None:
        """Invalid JSON or a non-str is refused just as at construction."""
        with pytest.raises(ValueError, match=r"^data must be JSON text"):
            Session("s").with_data("{")
        with pytest.raises(TypeError, match=r"^data must be a str"):
            Session("s").with_data(3)  # type: ignore[arg-type]
