"""Tools: the Tool value, ToolContext, and the @tool decorator."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from agentloop import Tool, ToolContext, ToolSpec, tool


async def noop(args: dict[str, Any], ctx: ToolContext) -> str:
    return "ok"


class TestTool:
    def test_spec(self) -> None:
        """A Tool's spec carries its name, description and schema."""
        item = Tool("noop", "does nothing", {"type": "object"}, noop)
        assert item.spec == ToolSpec("noop", "does nothing", {"type": "object"})

    def test_parameters_are_a_read_only_deep_copy(self) -> None:
        """The schema is copied at construction and cannot be changed through the tool."""
        schema: dict[str, Any] = {"type": "object", "properties": {"q": {"type": "string"}}}
        item = Tool("noop", "", schema, noop)
        schema["properties"]["q"]["type"] = "integer"
        assert item.parameters["properties"]["q"] == {"type": "string"}
        assert item.spec.parameters == item.parameters
        assert isinstance(item.parameters, dict)
        assert json.loads(json.dumps(item.parameters)) == item.parameters
        with pytest.raises(TypeError, match=r"^tool parameters are read-only"):
            item.parameters["hacked"] = True
        with pytest.raises(TypeError, match=r"^tool parameters are read-only"):
            item.spec.parameters["properties"]["q"].update(type="integer")
        with pytest.raises(TypeError, match=r"^tool parameters are read-only"):
            ToolSpec("x", "", {"enum": [1, 2]}).parameters["enum"].append(3)
        mutable = copy.deepcopy(item.parameters)
        mutable["properties"]["q"]["type"] = "integer"
        assert type(mutable["properties"]) is dict
        assert item.parameters["properties"]["q"] == {"type": "string"}

    def test_fn_must_be_async(self) -> None:
        """A sync function is refused with TypeError."""

        def sync(args: dict[str, Any], ctx: ToolContext) -> str:
            return ""

        with pytest.raises(TypeError, match=r"^fn must be an async function"):
            Tool("x", "", {}, sync)  # type: ignore[arg-type]

    def test_name_checked(self) -> None:
        """An empty name is refused."""
        with pytest.raises(ValueError, match=r"^name must be a non-empty str"):
            Tool("", "", {}, noop)


class TestToolContext:
    def test_defaults_to_empty_dict(self) -> None:
        """With no session data, ctx.data starts as an empty dict to fill in place."""
        ctx = ToolContext("s")
        assert (ctx.session_id, ctx.data) == ("s", {})
        ctx.data["k"] = 1
        assert ctx.data == {"k": 1}

    def test_none_is_json_null(self) -> None:
        """An explicit None is a stored JSON null, not "no data"."""
        assert ToolContext("s", None).data is None

    def test_session_id_is_read_only(self) -> None:
        """A tool cannot change which session it runs for."""
        with pytest.raises(AttributeError):
            ToolContext("s").session_id = "t"  # type: ignore[misc]


class TestDecorator:
    def test_schema_from_annotations(self) -> None:
        """Annotated parameters become the JSON schema; defaults make them optional."""

        @tool
        async def search(
            ctx: ToolContext, query: str, limit: int = 10, tags: list[str] | None = None
        ) -> str:
            """Search the notes.

            More detail that the model does not need.
            """
            return query

        assert search.name == "search"
        assert search.description == "Search the notes."
        assert search.parameters == {
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "limit": {"type": "integer"},
                "tags": {
                    "anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}]
                },
            },
            "required": ["query"],
            "additionalProperties": False,
        }

    async def test_calls_with_args_and_context(self) -> None:
        """The built tool passes arguments by name and the context to its ToolContext parameter."""

        @tool(name="put", description="store it")
        async def store(key: str, context: ToolContext, value: float = 0.0) -> str:
            context.data[key] = value
            return f"{key}={value}"

        ctx = ToolContext("s")
        assert (store.name, store.description) == ("put", "store it")
        assert await store.fn({"key": "a", "value": 2}, ctx) == "a=2"
        assert ctx.data == {"a": 2}

    async def test_checks_arguments(self) -> None:
        """Unknown, missing and wrongly typed arguments are TypeErrors."""

        @tool
        async def f(n: int, flag: bool = False) -> str:
            return str(n)

        ctx = ToolContext("s")
        with pytest.raises(TypeError, match=r"^unexpected argument\(s\) \['x'\]"):
            await f.fn({"n": 1, "x": 2}, ctx)
        with pytest.raises(TypeError, match=r"^missing required argument\(s\) \['n'\]"):
            await f.fn({}, ctx)
        with pytest.raises(TypeError, match=r"^argument 'n' must be integer, got True"):
            await f.fn({"n": True}, ctx)
        with pytest.raises(TypeError, match=r"^argument 'flag' must be boolean"):
            await f.fn({"n": 1, "flag": "yes"}, ctx)

    async def test_checks_optional_arguments(self) -> None:
        """An X | None argument accepts null or an X, and nothing else."""

        @tool
        async def f(n: int | None = None, x: float | None = None) -> str:
            return f"{n!r} {x!r}"

        ctx = ToolContext("s")
        assert await f.fn({"n": None, "x": 2}, ctx) == "None 2"
        assert await f.fn({"n": 3}, ctx) == "3 None"
        with pytest.raises(TypeError, match=r"^argument 'n' must be integer or null, got 'abc'$"):
            await f.fn({"n": "abc"}, ctx)
        with pytest.raises(TypeError, match=r"^argument 'n' must be integer or null, got True$"):
            await f.fn({"n": True}, ctx)

    def test_refuses_unsupported_functions(self) -> None:
        """Sync functions, unannotated or unsupported parameters are refused at decoration."""

        def sync() -> str:
            return ""

        async def bare(x):  # type: ignore[no-untyped-def]
            return ""

        async def odd(x: complex) -> str:
            return ""

        with pytest.raises(TypeError, match=r"^@tool needs an async function"):
            tool(sync)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"^@tool parameter 'x' needs a type annotation"):
            tool(bare)
        with pytest.raises(TypeError, match=r"^@tool parameter 'x' must be annotated with str"):
            tool(odd)

    def test_unresolvable_annotation(self) -> None:
        """An annotation naming something that does not exist is a TypeError."""

        async def f(x: Missing) -> str:  # type: ignore[name-defined]  # noqa: F821
            return ""

        with pytest.raises(TypeError, match=r"^@tool could not resolve the annotations"):
            tool(f)
