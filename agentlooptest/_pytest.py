"""Front door 1: pytest base classes, one test per clause.

A store's test module subclasses ``StepStoreContract`` and/or
``SessionStoreContract`` as ``TestMyStore`` and gives a ``harness`` fixture.
Capability skips happen in a sync fixture, before the check runs, so pytest
shows their reasons. Each test is a plain function running its clause in its
own ``trio.run``: a failure is the clause's did / expected / got / why text
as pytest's failure message, with no nursery exception group or library
frames around it.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import pytest
import trio

from agentlooptest._certify import factory_error, factory_failure
from agentlooptest._clause import Clause, Violation
from agentlooptest._harness import Harness
from agentlooptest._registry import CLAUSES
from agentlooptest._run_clause import CLAUSE_TIMEOUT, ClauseFailed, run_check
from agentlooptest._stores import probe, skip_reason

_BY_NAME: dict[str, Clause] = {c.test_name: c for c in CLAUSES}
_PROBED: dict[tuple[type, str], frozenset[str] | str] = {}
"""Per test class and protocol: the store's capabilities, or the factory's failure."""


def asyncio_auto_mode(config: pytest.Config) -> bool:
    """Whether pytest-asyncio is active in auto mode (it would claim the trio tests)."""
    if not config.pluginmanager.hasplugin("asyncio"):
        return False
    mode = getattr(config.option, "asyncio_mode", None)
    if mode is None:
        try:
            mode = config.getini("asyncio_mode")
        except ValueError:
            return False
    return str(mode) == "auto"


def _capabilities(
    contract: _Contract, test: str, harness: Harness, protocol: str
) -> frozenset[str]:
    """Probe the store once per test class; a factory failure is told in full once only."""
    owner = type(contract)
    known = _PROBED.get((owner, protocol))
    if isinstance(known, frozenset):
        return known
    if isinstance(known, str):
        pytest.fail(
            f"[{protocol}.factory] not run: the harness could not open a store ({known} says why)",
            pytrace=False,
        )
    try:
        found = trio.run(partial(probe, harness, protocol, clause_timeout=contract.clause_timeout))
    except Violation as violation:
        _PROBED[owner, protocol] = test
        pytest.fail(factory_failure(protocol, violation), pytrace=False)
    except Exception as exc:
        _PROBED[owner, protocol] = test
        pytest.fail(factory_error(protocol, exc), pytrace=False)
    _PROBED[owner, protocol] = found
    return found


def _factory(harness: Harness, protocol: str) -> object:
    return harness.new_step_store if protocol == "step" else harness.new_session_store


class _Contract:
    clause_timeout: float = CLAUSE_TIMEOUT
    """Seconds one clause may run before it fails as hung or spinning; override per class."""

    @pytest.fixture
    def harness(self) -> Harness:
        """Override with a plain (not async) fixture returning an ``agentlooptest.Harness``."""
        pytest.fail(
            f"{type(self).__name__} needs a `harness` fixture returning agentlooptest.Harness",
            pytrace=False,
        )

    @pytest.fixture
    def _agentlooptest_harness(self, request: pytest.FixtureRequest, harness: object) -> Harness:
        """Check the setup and skip, with its reason, a clause this store cannot be held to."""
        if asyncio_auto_mode(request.config):
            pytest.fail(
                "agentlooptest: pytest-asyncio is in auto mode and would run these trio tests "
                "under asyncio; set asyncio_mode = strict (its default) for this suite",
                pytrace=False,
            )
        if not isinstance(harness, Harness) or trio.lowlevel.in_trio_run():
            pytest.fail(
                "agentlooptest: the `harness` fixture must be a plain (not async) fixture "
                f"returning agentlooptest.Harness (no async fixture in its chain: the "
                f"contract probes the store before the trio test starts), got {harness!r:.100}",
                pytrace=False,
            )
        clause = _BY_NAME[request.node.originalname]
        capabilities: frozenset[str] = frozenset()
        if _factory(harness, clause.protocol) is not None:
            capabilities = _capabilities(self, request.node.name, harness, clause.protocol)
        reason = skip_reason(clause, harness, capabilities)
        if reason is not None:
            pytest.skip(f"[{clause.id}] {reason}")
        return harness


def _test(clause: Clause) -> Callable[[Any, Harness], None]:
    def test(self: Any, _agentlooptest_harness: Harness) -> None:
        __tracebackhide__ = True
        check = partial(
            run_check, clause, _agentlooptest_harness, clause_timeout=self.clause_timeout
        )
        try:
            trio.run(check)
        except ClauseFailed as failed:
            message = str(failed)
        else:
            return
        pytest.fail(message, pytrace=False)  # outside the except: no "during handling"

    test.__name__ = test.__qualname__ = clause.test_name
    test.__doc__ = f"[{clause.id}] {clause.title}"
    return test


class StepStoreContract(_Contract):
    """The ``StepStore`` clauses as pytest tests; subclass as ``TestX`` and give ``harness``.

    ``harness`` must be a plain (not async) fixture returning a
    :class:`Harness` whose factories give a fresh, empty store per call::

        class TestMyStore(StepStoreContract):
            @pytest.fixture
            def harness(self, tmp_path):
                paths = (tmp_path / f"store-{i}.db" for i in itertools.count())

                async def new_store():
                    return await MyStore.open(next(paths))

                return Harness(new_step_store=new_store)

    Each clause is one test named after its id (``test_step_order_oldest_first``),
    so ``-k`` selects clauses; a capability the store lacks is skipped with
    its reason. The tests are generated, so no file spells their names:
    ``agentlooptest clauses --where -k test_step_order_oldest_first`` prints
    the ``file:line`` of the check behind one.
    """


class SessionStoreContract(_Contract):
    """The ``SessionStore`` clauses as pytest tests; subclass as ``TestX`` and give ``harness``."""


for _clause in CLAUSES:
    _owner = StepStoreContract if _clause.protocol == "step" else SessionStoreContract
    setattr(_owner, _clause.test_name, _test(_clause))
del _clause, _owner
