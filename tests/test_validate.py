"""agentloop._validate: the shared checks, field validators and the trusted builder."""

from __future__ import annotations

import argparse
import math
from datetime import UTC, datetime
from typing import Any

import attrs
import pytest

from agentloop import (
    FinalizeSummary,
    RunResult,
    RunStatus,
    RunStep,
    Session,
    StepType,
    Tool,
    ToolSpec,
)
from agentloop._shared import check_seconds, trusted_builder
from agentloop._validate import JSON_DEPTH_MAX, SECONDS_MAX, check_json_value
from agentloopsql import PostgresStore, SqliteStore
from agentlooptest._cli import _seconds as cli_seconds


async def _echo(args: dict[str, Any], ctx: object) -> str:
    return "ok"


class TestSeconds:
    @pytest.mark.parametrize("value", [1, 0.001, 5.0, SECONDS_MAX, 2**31 // 1000])
    def test_accepted(self, value: float) -> None:
        """Finite seconds > 0 up to 2**31 - 1 ms are accepted, as a float."""
        assert check_seconds(value, "t") == float(value)

    @pytest.mark.parametrize(
        "value", [0, -1, math.nan, math.inf, -math.inf, SECONDS_MAX + 0.001, 2**31 / 1000, 1e300]
    )
    def test_refused(self, value: float) -> None:
        """NaN, infinity, <= 0 and more than the drivers' int milliseconds hold are ValueError."""
        with pytest.raises(
            ValueError, match=r"^t must be a finite number of seconds > 0 and <= 2147483\.647, got"
        ):
            check_seconds(value, "t")

    @pytest.mark.parametrize("value", [True, "5", None, b"1"])
    def test_not_a_number(self, value: object) -> None:
        """bool, str, None are TypeError naming the field."""
        with pytest.raises(TypeError, match=r"^t must be a number of seconds, got"):
            check_seconds(value, "t")

    def test_minimum_is_inclusive(self) -> None:
        """A minimum is the smallest value accepted; below it the message states it."""
        assert check_seconds(0.001, "t", minimum=0.001) == 0.001
        with pytest.raises(ValueError, match=r"seconds >= 0.001 and"):
            check_seconds(0.0009, "t", minimum=0.001)

    async def test_sqlite_busy_timeout_bounded(self) -> None:
        """busy_timeout above 2**31 - 1 ms is refused; at the bound the store opens and writes."""
        with pytest.raises(ValueError, match=r"^busy_timeout must be .* <= 2147483\.647"):
            await SqliteStore.open(":memory:", busy_timeout=2**31 / 1000)
        async with await SqliteStore.open(":memory:", busy_timeout=SECONDS_MAX) as store:
            await store.append(RunStep("s", 0, "user"))
            assert len(await store.all("s")) == 1

    async def test_postgres_timeouts_bounded(self) -> None:
        """pool_timeout and statement_timeout above the bound are refused before connecting."""
        dsn = "postgresql://nobody@127.0.0.1:1/none"
        with pytest.raises(ValueError, match=r"^pool_timeout must be .* <= 2147483\.647"):
            await PostgresStore.open(dsn, pool_timeout=1e10)
        with pytest.raises(ValueError, match=r"^statement_timeout must be .* <= 2147483\.647"):
            await PostgresStore.open(dsn, statement_timeout=2**31 / 1000)

    def test_cli_clause_timeout_bounded(self) -> None:
        """The CLI's --clause-timeout follows the same rule, phrased for argparse."""
        assert cli_seconds("2.5") == 2.5
        with pytest.raises(argparse.ArgumentTypeError, match=r"^must be a finite number of sec"):
            cli_seconds("1e10")
        with pytest.raises(argparse.ArgumentTypeError, match=r"^must be a number of seconds"):
            cli_seconds("soon")


class TestJsonValue:
    def test_json_accepted(self) -> None:
        """Nested dicts, lists, tuples and every JSON scalar pass."""
        check_json_value(
            {"a": [1, 2.5, True, None, "x\x00"], "b": {"c": (1, 2)}, "big": 10**30}, "p"
        )

    @pytest.mark.parametrize(
        ("value", "error", "pattern"),
        [
            ({"enum": {1, 2}}, TypeError, r"^p\['enum'\] must be JSON .*got \{1, 2\} \(set\)"),
            ({"a": [b"x"]}, TypeError, r"^p\['a'\]\[0\] must be JSON .*\(bytes\)"),
            ({"d": datetime(2020, 1, 1, tzinfo=UTC)}, TypeError, r"^p\['d'\] .*\(datetime\)"),
            ({"x": {"y": math.nan}}, ValueError, r"^p\['x'\]\['y'\] must be a finite number"),
            ({"x": -math.inf}, ValueError, r"^p\['x'\] must be a finite number"),
            ({1: "a"}, TypeError, r"^p keys must be str \(JSON object keys\), got 1 \(int\)"),
            ({"s": "\ud800"}, ValueError, r"^p\['s'\] must not contain lone surrogates"),
            (object(), TypeError, r"^p must be JSON"),
        ],
    )
    def test_refused_with_path(self, value: object, error: type[Exception], pattern: str) -> None:
        """Each non-JSON part is refused with the path inside the value."""
        with pytest.raises(error, match=pattern):
            check_json_value(value, "p")

    def test_cycle_refused(self) -> None:
        """A container holding itself is a ValueError, not a RecursionError."""
        schema: dict[str, Any] = {"properties": {}}
        schema["properties"]["self"] = schema
        with pytest.raises(ValueError, match=r"^p\['properties'\]\['self'\] contains itself"):
            check_json_value(schema, "p")

    def test_shared_subtree_is_not_a_cycle(self) -> None:
        """The same dict twice side by side is fine: only a path back to itself is a cycle."""
        shared = {"type": "string"}
        check_json_value({"a": shared, "b": [shared, shared]}, "p")

    def test_depth_bounded(self) -> None:
        """Nesting up to JSON_DEPTH_MAX passes; deeper is a ValueError, well before recursion."""
        value: Any = "leaf"
        for _ in range(JSON_DEPTH_MAX):
            value = [value]
        check_json_value(value, "p")
        with pytest.raises(ValueError, match=rf"nests deeper than {JSON_DEPTH_MAX} levels"):
            check_json_value([value], "p")
        for _ in range(5000):
            value = {"k": value}
        with pytest.raises(ValueError, match=r"nests deeper"):
            check_json_value(value, "p")

    @pytest.mark.parametrize("build", [Tool, ToolSpec])
    def test_tool_parameters_must_be_json(self, build: Any) -> None:
        """Tool and ToolSpec refuse a non-JSON schema at construction, naming the path."""
        args: tuple[Any, ...] = (_echo,) if build is Tool else ()
        bad = {"type": "object", "properties": {"when": {"default": datetime.now(UTC)}}}
        with pytest.raises(TypeError, match=r"^parameters\['properties'\]\['when'\]\['default'\]"):
            build("t", "d", bad, *args)
        with pytest.raises(ValueError, match=r"^parameters\['minimum'\] must be a finite number"):
            build("t", "d", {"minimum": math.nan}, *args)
        cyclic: dict[str, Any] = {}
        cyclic["items"] = [cyclic]
        with pytest.raises(ValueError, match=r"contains itself"):
            build("t", "d", cyclic, *args)

    def test_spec_reuses_the_checked_schema(self) -> None:
        """Tool.spec hands over the frozen schema as is: checked once, at construction."""
        tool = Tool("t", "d", {"type": "object"}, _echo)
        assert tool.spec.parameters is tool.parameters


class TestEnumMember:
    def test_value_strings_convert(self) -> None:
        """FinalizeSummary and RunResult both take a status value and hold the member."""
        assert FinalizeSummary("timeout").status is RunStatus.timeout
        assert RunResult("completed", "", 0, 0, 0, 0).status is RunStatus.completed

    @pytest.mark.parametrize("status", [5, None, b"completed"])
    def test_wrong_type_is_type_error(self, status: object) -> None:
        """Not a str nor a member: TypeError, the same for every status field."""
        with pytest.raises(TypeError, match=r"^status must be a RunStatus \(one of completed"):
            FinalizeSummary(status)
        with pytest.raises(TypeError, match=r"^status must be a RunStatus \(one of completed"):
            RunResult(status, "", 0, 0, 0, 0)

    def test_unknown_value_is_value_error(self) -> None:
        """A str that is no member's value: ValueError listing the values."""
        with pytest.raises(ValueError, match=r"^status must be one of completed, error"):
            RunResult("done", "", 0, 0, 0, 0)
        with pytest.raises(ValueError, match=r"^step_type must be one of user, tool_call"):
            RunStep("s", 0, "thought")


@attrs.frozen
class _Sample:
    a: int = attrs.field(validator=attrs.validators.gt(0))
    b: str = "b"
    c: list[int] = attrs.field(factory=list)
    d: int = attrs.field(default=0, kw_only=True)


class TestTrustedBuilder:
    def test_equals_normal_construction(self) -> None:
        """A RunStep built trusted equals and hashes like one built with validators."""
        when = datetime(2024, 1, 2, tzinfo=UTC)
        fields = ("s", 3, StepType.response, "hi", '{"a": 1}', 5, 6, 7, when)
        checked = RunStep(*fields)
        trusted = trusted_builder(RunStep)(*fields)
        assert trusted == checked
        assert hash(trusted) == hash(checked)
        assert type(trusted) is RunStep

    def test_defaults_factories_keywords(self) -> None:
        """Defaults and factories are filled per call; keyword-only fields stay keyword-only."""
        build = trusted_builder(_Sample)
        first, second = build(1), build(a=2, d=4)
        assert first == _Sample(1)
        assert second == _Sample(2, d=4)
        assert first.c is not second.c
        with pytest.raises(TypeError):
            build(1, "b", [], 4)

    def test_skips_validators_and_stays_frozen(self) -> None:
        """Nothing is checked (the caller vouches for the values) and the value stays frozen."""
        value = trusted_builder(_Sample)(-1)
        assert value.a == -1
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            value.a = 2  # type: ignore[misc]

    def test_cached_per_class(self) -> None:
        """The builder is compiled once per class."""
        assert trusted_builder(RunStep) is trusted_builder(RunStep)

    def test_refuses_what_it_cannot_build(self) -> None:
        """Non-attrs, dict-based and self-taking factories are refused at once."""
        with pytest.raises(TypeError, match=r"slotted attrs class"):
            trusted_builder(int)
        with pytest.raises(TypeError, match=r"slotted attrs class"):
            trusted_builder(attrs.make_class("D", ["x"], slots=False))
        with pytest.raises(TypeError, match=r"cannot fill"):
            trusted_builder(
                attrs.make_class(
                    "F",
                    {"x": attrs.field(default=attrs.Factory(lambda self: 1, takes_self=True))},
                    slots=True,
                )
            )

    def test_session_with_data_uses_it(self) -> None:
        """Session.with_data builds the same value as the checked path."""
        session = Session("s", "m", "p", '{"a": 1}')
        assert session.with_data("[1]") == Session("s", "m", "p", "[1]")
