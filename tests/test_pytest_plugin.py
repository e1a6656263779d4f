"""The pytest plugin: its fixtures, the failure transcripts and the strict ini option."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parent.parent
PLUGIN = "agentloopmem._pytest_plugin"

EVAL = '''
import pytest

from agentloop import Loop, ModelReply, RunStatus, ScriptedModel, ToolCall, tool


@tool
async def lookup(city: str) -> str:
    """Look the weather up."""
    raise RuntimeError("weather service down")


def model():
    return ScriptedModel(
        [ModelReply(tool_calls=[ToolCall("c1", "lookup", '{"city": "Oslo"}')]), "It is sunny."]
    )


@pytest.mark.trio
async def test_weather(agentloop_steps, agentloop_sessions, agentloop_config):
    loop = Loop(model=model(), steps=agentloop_steps, sessions=agentloop_sessions,
                tools=[lookup], config=agentloop_config)
    result = await loop.run("user-42", "Weather in Oslo?")
    assert result.status is RunStatus.completed
'''


def _plugin_args() -> list[str]:
    """``-p`` the plugin unless the installed distribution already registers it."""
    installed = importlib.metadata.entry_points(group="pytest11")
    return [] if any(ep.value == PLUGIN for ep in installed) else ["-p", PLUGIN]


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest(*_plugin_args(), "-p", "no:cacheprovider", *args)


def test_the_entry_point_names_the_plugin() -> None:
    """pyproject registers the plugin under pytest11, so installing the package loads it."""
    with (ROOT / "pyproject.toml").open("rb") as file:
        points = tomllib.load(file)["project"]["entry-points"]["pytest11"]
    assert points == {"agentloop": PLUGIN}


def test_fixtures_are_fresh_per_test_and_one_object(pytester: pytest.Pytester) -> None:
    """Each test gets its own empty store; the step store is the session store."""
    pytester.makepyfile(
        """
        import pytest
        from agentloop import RunStep, StepType
        from agentloopmem import MemoryStore

        @pytest.mark.trio
        @pytest.mark.parametrize("run", [1, 2])
        async def test_fresh(agentloop_steps, agentloop_sessions, run):
            assert agentloop_steps is agentloop_sessions
            assert isinstance(agentloop_sessions, MemoryStore)
            assert await agentloop_steps.all("s") == []
            await agentloop_steps.append(RunStep("s", 0, StepType.user, content="hi"))
            assert agentloop_sessions.steps is not None
        """
    )
    _run(pytester).assert_outcomes(passed=2)


def test_a_failed_eval_shows_the_transcript(pytester: pytest.Pytester) -> None:
    """The failing test's report holds the session's transcript: the steps the run took."""
    pytester.makepyfile(EVAL.replace("RunStatus.completed", "RunStatus.error"))
    result = _run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*agentloop transcript: user-42*",
            "*Weather in Oslo?*",
            "*lookup*Oslo*",
            "*weather service down*",
            "*It is sunny.*",
        ]
    )


def test_a_passing_test_shows_no_transcript(pytester: pytest.Pytester) -> None:
    """A passing test that wrote sessions adds nothing to the output, even with -rA."""
    pytester.makepyfile(EVAL)
    result = _run(pytester, "-rA")
    result.assert_outcomes(passed=1)
    assert "agentloop transcript" not in result.stdout.str()


def test_a_failure_without_the_fixtures_shows_no_transcript(pytester: pytest.Pytester) -> None:
    """Only tests that took the stores get transcripts."""
    pytester.makepyfile("def test_plain():\n    assert 1 == 2\n")
    result = _run(pytester)
    result.assert_outcomes(failed=1)
    assert "agentloop transcript" not in result.stdout.str()


def test_steps_appended_without_a_session_row_are_shown(pytester: pytest.Pytester) -> None:
    """Sessions that only have steps (no session write) appear too, each in its own section."""
    pytester.makepyfile(
        """
        import pytest
        from agentloop import RunStep, StepType

        @pytest.mark.trio
        async def test_raw(agentloop_steps, agentloop_sessions):
            await agentloop_sessions.update_data("with-row", '{"k": 1}')
            await agentloop_steps.append(RunStep("steps-only", 0, StepType.user, content="ping"))
            await agentloop_steps.append_many([RunStep("batch", 0, StepType.user, content="b")])
            assert False, "the eval failed"
        """
    )
    result = _run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*agentloop transcript: with-row*",
            "*agentloop transcript: steps-only*",
            "*ping*",
            "*agentloop transcript: batch*",
        ]
    )


def test_strict_ini_makes_a_broken_tool_fail_the_run(pytester: pytest.Pytester) -> None:
    """agentloop_strict = true: the tool's error ends the run with status error."""
    pytester.makeini("[pytest]\nagentloop_strict = true\n")
    pytester.makepyfile(EVAL)
    result = _run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*assert <RunStatus.error*", "*agentloop transcript: user-42*"])


def test_the_config_fixture_follows_the_ini(pytester: pytest.Pytester) -> None:
    """agentloop_config is LoopConfig(strict=<ini>), the rest default; false without the ini."""
    pytester.makepyfile(
        """
        from agentloop import LoopConfig

        def test_config(agentloop_config):
            assert agentloop_config == LoopConfig(strict=False)
        """
    )
    _run(pytester).assert_outcomes(passed=1)
    pytester.makeini("[pytest]\nagentloop_strict = true\n")
    pytester.makepyfile(
        """
        from agentloop import LoopConfig

        def test_config(agentloop_config):
            assert agentloop_config == LoopConfig(strict=True)
        """
    )
    _run(pytester).assert_outcomes(passed=1)


def test_the_plugin_defers_its_imports() -> None:
    """Loading the plugin does not import the eval store (nor the renderer through it)."""
    code = f"import sys\nimport {PLUGIN}\nassert 'agentloopmem._eval' not in sys.modules\n"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_the_fixtures_work_under_asyncio(pytester: pytest.Pytester) -> None:
    """An asyncio eval (anyio's plugin) uses the same fixtures; its failure shows the transcript."""
    pytester.makepyfile(
        """
        import pytest
        from agentloop import Loop, ScriptedModel

        @pytest.fixture
        def anyio_backend():
            return "asyncio"

        @pytest.mark.anyio
        async def test_eval(agentloop_steps, agentloop_sessions, agentloop_config):
            loop = Loop(model=ScriptedModel(["from asyncio"]), steps=agentloop_steps,
                        sessions=agentloop_sessions, config=agentloop_config)
            assert (await loop.run("s-1", "hi")).text == "something else"
        """
    )
    result = _run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*agentloop transcript: s-1*", "*from asyncio*"])
