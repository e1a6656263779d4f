"""A store that never returns, or spins without yielding, still gets a report within its timeout.

Each spinning store is the correct reference store with one method turned
into a Python loop that never awaits: the clause must end after
``clause_timeout`` (plus the watchdog's grace) naming that method, in every
front door: ``certify()``, the CLI (its report files written) and pytest.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from broken._good import GoodBoth, harness_for

from agentlooptest import Harness, certify

TIMEOUT = 1.0  # generous: under load a clause takes a while to reach the method


def _spinning(method: str) -> type[GoodBoth]:
    async def spin(self: Any, *args: Any, **kwargs: Any) -> Any:
        while True:  # never awaits: only the watchdog can end this
            pass

    spin.__code__ = spin.__code__.replace(co_qualname=f"Spins.{method}")
    return type("Spins", (GoodBoth,), {method: spin})


SPINS = [
    ("append", "step.order.oldest-first"),
    ("last_n", "step.window.newest-n"),
    ("all", "step.all.insertion-order"),
    ("delete_session", "session.delete.removes-all"),
    ("get", "session.get.unknown-returns-id"),
    ("exists", "session.get.unknown-creates-nothing"),
    ("update_data", "session.data.latest-wins"),
    ("finalize", "session.finalize.repeatable"),
    ("put", "session.put.seeds-get"),
    ("final", "session.final.latest"),
    ("list_sessions", "session.list.order"),
    ("last_n", "step.model-based"),
    ("get", "session.model-based"),
    ("append", "step.cancel.append"),
    ("get", "session.concurrency.read-your-writes"),
]


ASYNCIO_SPINS = [SPINS[0], SPINS[4], SPINS[11], SPINS[13]]
"""Under asyncio: a representative few (a plain call, a thread round trip, a cancelled call)."""


@pytest.mark.parametrize(("method", "clause_id"), SPINS, ids=lambda v: str(v))
async def test_a_spinning_method_fails_its_clause_in_time(method: str, clause_id: str) -> None:
    """The clause fails within its timeout, naming the spinning method and the clause's line."""
    await _fails_in_time(method, clause_id)


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize(("method", "clause_id"), ASYNCIO_SPINS, ids=lambda v: str(v))
async def test_a_spinning_method_fails_in_time_under_asyncio(method: str, clause_id: str) -> None:
    """asyncio has no instruments: the watchdog sees the loop stop turning instead."""
    await _fails_in_time(method, clause_id)


async def _fails_in_time(method: str, clause_id: str) -> None:
    # A model-based clause reaches the method after some thread round trips: under load
    # that takes longer than TIMEOUT, and the clause would fail as hung elsewhere first.
    timeout = 3.0 if clause_id.endswith("model-based") else TIMEOUT
    start = time.monotonic()
    report = await certify(
        harness_for(_spinning(method)), pattern=clause_id, clause_timeout=timeout
    )
    took = time.monotonic() - start
    result = report.result(clause_id)
    assert result.outcome == "failed"
    assert f"Spins.{method} (test_contract_stall.py:" in result.message, result.message
    assert "without ever yielding to the event loop" in result.message
    assert "hint:     a loop that polls" in result.message
    assert took < 10 * timeout + 3, took


@pytest.mark.anyio
async def test_a_spinning_aclose_fails_in_time() -> None:
    """aclose spinning is caught too (the clause's stores are closed inside its deadline)."""
    report = await certify(
        harness_for(_spinning("aclose")), pattern="step.closed", clause_timeout=TIMEOUT
    )
    assert "Spins.aclose" in report.result("step.closed").message


@pytest.mark.anyio
async def test_a_spinning_factory_is_reported_once() -> None:
    """A factory that spins fails its protocol once in full; the other clauses refer to it."""

    async def spins() -> Any:
        while True:
            pass

    report = await certify(Harness(new_step_store=spins), clause_timeout=TIMEOUT)
    [first] = report.failed
    assert f"ran past {TIMEOUT:g}s without ever yielding" in first.message
    assert "spins (test_contract_stall.py:" in first.message
    rest = report.not_run
    assert rest
    assert all(f"({first.id} says why)" in r.message for r in rest)
    assert all(len(r.message.splitlines()) == 2 for r in rest)


@pytest.mark.anyio
async def test_a_store_swallowing_base_exceptions_is_still_ended() -> None:
    """A spin that catches the watchdog's exception and goes on is interrupted again."""
    swallowed = []

    class Stubborn(GoodBoth):
        async def get(self, session_id: str) -> Any:
            for _ in range(3):
                try:
                    while True:
                        pass
                except BaseException as exc:  # the defect under test
                    swallowed.append(exc)
            while True:
                pass

    report = await certify(
        harness_for(Stubborn), pattern="session.get.unknown-returns-id", clause_timeout=TIMEOUT
    )
    assert len(swallowed) == 3
    assert "Stubborn.get" in report.result("session.get.unknown-returns-id").message


def test_the_cli_writes_its_reports_for_a_spinning_store(tmp_path: Path) -> None:
    """``agentlooptest certify`` on a spinning store exits 1 in time with JSON and JUnit written."""
    (tmp_path / "spinstore.py").write_text(
        textwrap.dedent(
            """
            import agentloopmem
            from agentlooptest import Harness

            class Spins(agentloopmem.SessionStore):
                async def get(self, session_id):
                    while True:
                        pass

            async def new():
                return Spins()

            harness = Harness(new_session_store=new)
            """
        ),
        encoding="utf-8",
    )
    root = Path(__file__).resolve().parent.parent
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "agentlooptest",
            "certify",
            "spinstore:harness",
            "-k",
            "session.get",
            "--clause-timeout",
            "0.3",
            "--json",
            "out.json",
            "--junit-xml",
            "out.xml",
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    assert run.returncode == 1, run.stdout + run.stderr
    doc = json.loads((tmp_path / "out.json").read_text(encoding="utf-8"))
    assert "Spins.get" in doc["targets"][0]["results"][0]["message"]
    assert "Spins.get" in (tmp_path / "out.xml").read_text(encoding="utf-8")


def test_pytest_ends_a_spinning_store_with_the_clause_text(tmp_path: Path) -> None:
    """Under pytest a spinning store fails its test within the class's clause_timeout."""
    (tmp_path / "test_spin.py").write_text(
        textwrap.dedent(
            """
            import pytest
            import agentloopmem
            from agentlooptest import Harness, SessionStoreContract

            class Spins(agentloopmem.SessionStore):
                async def get(self, session_id):
                    while True:
                        pass

            async def new():
                return Spins()

            class TestSpins(SessionStoreContract):
                clause_timeout = 0.3

                @pytest.fixture
                def harness(self):
                    return Harness(new_session_store=new)
            """
        ),
        encoding="utf-8",
    )
    (tmp_path / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    root = Path(__file__).resolve().parent.parent
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-rf",
            "-k",
            "session_get_unknown_returns_id",
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    assert run.returncode == 1, run.stdout
    assert "got:      the store call Spins.get (test_spin.py:" in run.stdout
    assert "ExceptionGroup" not in run.stdout
    assert "Traceback" not in run.stdout
    assert "During handling" not in run.stdout


@pytest.mark.anyio
async def test_the_loop_is_usable_after_a_spin_was_interrupted() -> None:
    """The interrupted run goes on: a later clause of the same certify() passes."""
    report = await certify(
        harness_for(_spinning("exists")), pattern="session.get.unknown", clause_timeout=TIMEOUT
    )
    assert report.result("session.get.unknown-returns-id").outcome == "passed"
    assert report.result("session.get.unknown-creates-nothing").outcome == "failed"
    await anyio.lowlevel.checkpoint()
