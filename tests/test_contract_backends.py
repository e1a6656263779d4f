"""The contract under asyncio: certify(), the CLI's --backend, and a store tied to one backend.

A store that needs the other backend fails once, with a message naming the
backend to use; every other clause refers to that one instead of repeating
its traceback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from broken.native import asyncio_factory_harness, asyncio_harness, trio_harness

from agentlooptest import Harness, Report, certify

ROOT = Path(__file__).resolve().parent.parent


def _told_once(report: Report, need: str) -> None:
    """The first failure names ``need`` and how to run there; every other one refers to it."""
    [first] = report.failed
    assert f"the store needs {need}: under " in first.message, first.message
    assert f"--backend {need}" in first.message
    assert "Traceback" not in first.message
    rest = report.not_run
    assert rest, "every other clause is not run against a store on the wrong backend"
    assert report.passed == ()
    assert not report.ok
    assert f"{len(rest)} not run" in report.verdict
    for r in rest:
        assert (
            r.message.splitlines()[1] == f"  not run: the store needs {need} ({first.id} says why)"
        )


LIFECYCLE = {
    "page_sessions",
    "set_labels",
    "prune_steps",
    "steps_after",
    "expire_sessions",
    "fork_session",
    "restore_session",
}
"""The session-lifecycle capabilities, which the asyncio-native store does not offer."""


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_an_asyncio_only_store_is_certified_under_asyncio() -> None:
    """Every clause passes against a store that calls asyncio directly, durability included.

    Its checkpoints are ``asyncio.sleep(0)``: the cancellation clauses
    cancel it at each one, the concurrency clauses race its calls.
    """
    report = await certify(asyncio_harness())
    assert report.failed == (), "\n\n".join(r.message for r in report.failed)
    assert {r.capability for r in report.skipped} == {"lease", *LIFECYCLE}  # it has neither
    assert report.verdict.startswith("CERTIFIED")


@pytest.mark.parametrize(
    "harness", [asyncio_harness, asyncio_factory_harness], ids=["calls", "factory"]
)
async def test_an_asyncio_store_under_trio_fails_once_naming_asyncio(harness: type) -> None:
    """Its calls (or its factory) need asyncio's loop: one message says to use asyncio."""
    report = await certify(harness())
    _told_once(report, "asyncio")


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_trio_store_under_asyncio_fails_once_naming_trio() -> None:
    report = await certify(trio_harness())
    _told_once(report, "trio")
    assert "not conformant" in report.level


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_other_errors_are_not_taken_for_a_backend_mismatch() -> None:
    """A store raising its own RuntimeError fails that clause only, with its traceback."""

    class Fails:
        async def append(self, step: object) -> None:
            raise RuntimeError("disk full")

        async def last_n(self, session_id: str, n: int) -> list[object]:
            return []

    async def new() -> Fails:
        return Fails()

    report = await certify(Harness(new_step_store=new), pattern="step.order")
    assert all("disk full" in r.message for r in report.failed)
    assert all("the store needs" not in r.message for r in report.failed)


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests'}"}
    return subprocess.run(
        [sys.executable, "-m", "agentlooptest", "certify", *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=cwd,
        env=env,
        timeout=600,
    )


def test_the_cli_certifies_under_asyncio_with_json(tmp_path: Path) -> None:
    """--backend asyncio runs the whole contract there; --json is the usual report."""
    out = tmp_path / "report.json"
    run = _cli(
        "--backend", "asyncio", "--json", str(out), "broken.native:asyncio_harness", cwd=tmp_path
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "certifying broken.native:asyncio_harness under asyncio" in run.stderr
    doc = json.loads(out.read_text(encoding="utf-8"))
    assert doc["ok"] is True
    [target] = doc["targets"]
    lacking = {"lease", *LIFECYCLE}
    assert {r["outcome"] for r in target["results"] if r["capability"] not in lacking} == {"passed"}


def test_the_cli_under_the_wrong_backend_says_which(tmp_path: Path) -> None:
    """Under the default trio an asyncio store fails once; the output says --backend asyncio."""
    out = tmp_path / "report.json"
    run = _cli(
        "--json", str(out), "-k", "step.order", "broken.native:asyncio_harness", cwd=tmp_path
    )
    assert run.returncode == 1
    assert run.stdout.count("--backend asyncio") == 1, run.stdout
    assert "Traceback" not in run.stdout
    doc = json.loads(out.read_text(encoding="utf-8"))
    assert doc["ok"] is False


def test_the_cli_certifies_the_builtin_stores_under_asyncio(tmp_path: Path) -> None:
    """Without a target, --backend asyncio certifies the built-in stores in an asyncio loop."""
    out = tmp_path / "report.json"
    run = _cli("--backend", "asyncio", "--json", str(out), "-k", "step.cancel", cwd=tmp_path)
    doc = json.loads(out.read_text(encoding="utf-8"))
    by_name = {t["target"]: t for t in doc["targets"]}
    assert "certifying agentloopmem under asyncio" in run.stderr
    memory = by_name["agentloopmem"]
    assert [r["outcome"] for r in memory["results"]] == ["passed"] * 3, run.stdout


def test_the_cli_refuses_an_unknown_backend(tmp_path: Path) -> None:
    run = _cli("--backend", "curio", cwd=tmp_path)
    assert run.returncode == 2
    assert "invalid choice: 'curio'" in run.stderr


_USER_HEADER = """
import pytest
from agentlooptest import StepStoreContract
from broken.native import asyncio_harness, trio_harness
"""


def _user_pytest(tmp_path: Path, body: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run pytest on a store author's test module, as they would."""
    (tmp_path / "test_user_store.py").write_text(_USER_HEADER + body, encoding="utf-8")
    (tmp_path / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests'}"}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rfs", "-v", *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
        env=env,
        timeout=600,
    )


def test_a_pytest_class_runs_its_clauses_under_asyncio(tmp_path: Path) -> None:
    """``backend = "asyncio"`` on the class: every clause test runs in an asyncio loop."""
    body = """
class TestMine(StepStoreContract):
    backend = "asyncio"

    @pytest.fixture
    def harness(self):
        return asyncio_harness()
"""
    run = _user_pytest(tmp_path, body, "-k", "step_order or step_cancel")
    assert run.returncode == 0, run.stdout
    assert "7 passed" in run.stdout, run.stdout


def test_a_pytest_class_on_the_wrong_backend_fails_once(tmp_path: Path) -> None:
    """The default trio class on an asyncio store: one test says use asyncio, the rest refer."""
    body = """
class TestMine(StepStoreContract):
    @pytest.fixture
    def harness(self):
        return asyncio_harness()
"""
    run = _user_pytest(tmp_path, body, "-k", "step_order")
    assert run.returncode == 1
    assert run.stdout.count("the store needs asyncio: under trio") == 1, run.stdout
    assert "backend = 'asyncio'" in run.stdout
    assert run.stdout.count("not run: the store needs asyncio (test_step_order") == 3


def test_a_pytest_class_follows_the_suites_anyio_backend(tmp_path: Path) -> None:
    """``backend = "anyio"``: each clause runs once per value of the suite's anyio_backend."""
    (tmp_path / "conftest.py").write_text(
        "import pytest\n\n\n"
        "@pytest.fixture(params=['trio', 'asyncio'])\n"
        "def anyio_backend(request):\n"
        "    return request.param\n",
        encoding="utf-8",
    )
    body = """
class TestMine(StepStoreContract):
    backend = "anyio"

    @pytest.fixture
    def harness(self):
        return trio_harness()
"""
    run = _user_pytest(tmp_path, body, "-k", "step_order")
    assert run.returncode == 1
    assert run.stdout.count("[trio] PASSED") == 4, run.stdout
    assert run.stdout.count("the store needs trio: under asyncio") == 1
    assert run.stdout.count("[asyncio] ERROR") == 4  # in the fixture that probes the store


def test_a_pytest_class_with_an_unknown_backend_is_refused(tmp_path: Path) -> None:
    body = """
class TestMine(StepStoreContract):
    backend = "curio"

    @pytest.fixture
    def harness(self):
        return trio_harness()
"""
    run = _user_pytest(tmp_path, body)
    assert run.returncode != 0
    assert "TestMine.backend must be 'trio', 'asyncio' or 'anyio', got 'curio'" in run.stdout


def test_anyios_own_anyio_backend_runs_every_installed_backend(tmp_path: Path) -> None:
    """Without a suite override, anyio's default anyio_backend runs each clause on both."""
    body = """
import agentloopmem
from agentlooptest import memory_harness


class TestMemory(StepStoreContract):
    backend = "anyio"

    @pytest.fixture
    def harness(self):
        return memory_harness()
"""
    run = _user_pytest(tmp_path, body, "-k", "step_order")
    assert run.returncode == 0, run.stdout
    assert run.stdout.count("[trio] PASSED") == 4, run.stdout
    assert run.stdout.count("[asyncio] PASSED") == 4
