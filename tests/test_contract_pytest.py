"""The pytest front door, as a store author uses it: a subclass and a `harness` fixture."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from agentlooptest._pytest import asyncio_auto_mode

_HEADER = '''
import pytest
import agentloopmem
from agentlooptest import Harness, SessionStoreContract, StepStoreContract


class Backwards(agentloopmem.StepStore):
    async def last_n(self, session_id, n):
        return (await super().last_n(session_id, n))[::-1]


async def new_backwards():
    return Backwards()


async def new_plain():
    return agentloopmem.StepStore()


class Bare:
    """A step store with no optional capability."""

    def __init__(self):
        self.inner = agentloopmem.StepStore()

    async def append(self, step):
        await self.inner.append(step)

    async def last_n(self, session_id, n):
        return await self.inner.last_n(session_id, n)


async def new_bare():
    return Bare()
'''


def _pytest(tmp_path: Path, body: str, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_user_store.py").write_text(_HEADER + textwrap.dedent(body), encoding="utf-8")
    (tmp_path / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rfs", *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)},
    )


def test_one_test_per_clause_with_failures_explained(tmp_path: Path) -> None:
    """A broken store fails exactly the clause tests that catch it, with the full message."""
    run = _pytest(
        tmp_path,
        """
        class TestBackwards(StepStoreContract):
            @pytest.fixture
            def harness(self):
                return Harness(new_step_store=new_backwards)
        """,
        "-k",
        "oldest_first or newest_n or unknown_session",
    )
    assert run.returncode == 1, run.stdout
    assert "3 selected" in run.stdout or "3 items" in run.stdout or "deselected" in run.stdout
    assert "FAILED test_user_store.py::TestBackwards::test_step_order_oldest_first" in run.stdout
    assert "[step.order.oldest-first] last_n returns its window oldest first" in run.stdout
    assert "why:      the loop replays last_n" in run.stdout
    assert "test_step_unknown_session_empty PASSED" in run.stdout or "1 passed" in run.stdout


def test_capability_skips_show_their_reason(tmp_path: Path) -> None:
    """Clauses for capabilities the store lacks are skipped with the reason in pytest's output."""
    run = _pytest(
        tmp_path,
        """
        class TestBare(StepStoreContract):
            @pytest.fixture
            def harness(self):
                return Harness(new_step_store=new_bare)
        """,
        "-k",
        "closed or durable or all_insertion",
    )
    assert run.returncode == 0, run.stdout
    assert "[step.closed] the store has no aclose() (agentloop.SupportsAclose)" in run.stdout
    assert "[step.all.insertion-order] the store has no all()" in run.stdout
    assert "[step.durable] no reopen in the harness" in run.stdout


def test_session_clauses_skip_without_a_session_factory(tmp_path: Path) -> None:
    """A harness with only a step factory skips the session clauses, saying why."""
    run = _pytest(
        tmp_path,
        """
        class TestStepsOnly(StepStoreContract, SessionStoreContract):
            @pytest.fixture
            def harness(self):
                return Harness(new_step_store=new_plain)
        """,
        "-k",
        "session_get",
    )
    assert run.returncode == 0, run.stdout
    assert "no new_session_store in the harness" in run.stdout


def test_async_harness_fixture_is_refused_clearly(tmp_path: Path) -> None:
    """An async `harness` fixture is refused, naming the fixture, before any clause runs."""
    run = _pytest(
        tmp_path,
        """
        class TestAsync(StepStoreContract):
            @pytest.fixture
            async def harness(self):
                return Harness(new_step_store=new_plain)
        """,
        "-k",
        "oldest_first",
    )
    assert run.returncode == 1
    # The clause tests are plain functions, so pytest itself refuses the async fixture.
    assert "requested an async fixture 'harness'" in run.stdout


def test_missing_harness_fixture_is_explained(tmp_path: Path) -> None:
    """Forgetting the `harness` fixture says what to define."""
    run = _pytest(tmp_path, "class TestNothing(StepStoreContract):\n    pass\n", "-k", "oldest")
    assert run.returncode == 1
    assert "needs a `harness` fixture returning agentlooptest.Harness" in run.stdout


def _config(has_asyncio: bool, option: Any = None, ini: Any = None) -> Any:
    def getini(name: str) -> Any:
        if ini is None:
            raise ValueError(name)
        return ini

    return SimpleNamespace(
        pluginmanager=SimpleNamespace(hasplugin=lambda name: has_asyncio and name == "asyncio"),
        option=SimpleNamespace(asyncio_mode=option),
        getini=getini,
    )


@pytest.mark.parametrize(
    ("config", "auto"),
    [
        (_config(False), False),
        (_config(True, option="strict"), False),
        (_config(True, option="auto"), True),
        (_config(True, ini="auto"), True),
        (_config(True, ini="strict"), False),
        (_config(True), False),
    ],
)
def test_asyncio_auto_mode_detection(config: Any, auto: bool) -> None:
    """pytest-asyncio's auto mode is detected from its option or ini setting."""
    assert asyncio_auto_mode(config) is auto


def test_a_failure_is_the_clause_text_without_library_frames(tmp_path: Path) -> None:
    """pytest shows did/expected/got/why as the failure: no exception group, no frames."""
    run = _pytest(
        tmp_path,
        """
        class TestBackwards(StepStoreContract):
            @pytest.fixture
            def harness(self):
                return Harness(new_step_store=new_backwards)
        """,
        "-k",
        "oldest_first",
    )
    assert run.returncode == 1, run.stdout
    assert "ExceptionGroup" not in run.stdout
    assert "Traceback" not in run.stdout
    assert "agentlooptest/_" not in run.stdout  # no library frame
    assert "  expected: " in run.stdout


def test_a_broken_factory_is_told_once(tmp_path: Path) -> None:
    """A factory that raises is explained in full in one test; the others refer to it."""
    run = _pytest(
        tmp_path,
        """
        async def broken():
            raise ConnectionRefusedError("no server at 127.0.0.1:1")

        class TestBroken(StepStoreContract):
            @pytest.fixture
            def harness(self):
                return Harness(new_step_store=broken)
        """,
        "-k",
        "step_order",
    )
    assert run.returncode == 1, run.stdout
    assert run.stdout.count("Traceback (most recent call last)") == 1
    assert run.stdout.count("(test_step_order_oldest_first says why)") == 3


def test_expected_failures_are_xfail_and_strict(tmp_path: Path) -> None:
    """A listed clause that fails is xfailed; a listed clause that passes fails."""
    run = _pytest(
        tmp_path,
        """
        class TestKnown(StepStoreContract):
            @pytest.fixture
            def harness(self):
                return Harness(
                    new_step_store=new_backwards,
                    expected_failures={
                        "step.order.oldest-first": "reversed until the fix lands",
                        "step.unknown-session-empty": "was lossy once",
                    },
                )
        """,
        "-k",
        "oldest_first or unknown_session_empty",
    )
    assert run.returncode == 1, run.stdout
    assert " 1 failed, " in run.stdout, run.stdout
    assert " 1 xfailed in " in run.stdout
    assert "expected to fail but passed" in run.stdout
