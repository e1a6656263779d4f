"""Front door 1: pytest base classes, one test per clause.

A store's test module subclasses ``StepStoreContract`` and/or
``SessionStoreContract`` as ``TestMyStore`` and gives a ``harness`` fixture.
Capability skips happen in a sync fixture, before the trio test starts, so
pytest shows their reasons.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
import trio

from agentlooptest._certify import factory_failure
from agentlooptest._clause import CAPABILITIES, Clause, Violation
from agentlooptest._harness import Harness
from agentlooptest._registry import CLAUSES
from agentlooptest._run_clause import run_check
from agentlooptest._stores import probe, skip_reason

_BY_NAME: dict[str, Clause] = {c.test_name: c for c in CLAUSES}
_PROBED: dict[tuple[Harness, str], frozenset[str]] = {}


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


def _capabilities(harness: Harness, protocol: str) -> frozenset[str]:
    try:
        return _PROBED[harness, protocol]
    except (KeyError, TypeError):
        pass
    try:
        found = trio.run(probe, harness, protocol)
    except Violation as violation:
        pytest.fail(factory_failure(protocol, violation), pytrace=False)
    with contextlib.suppress(TypeError):  # an unhashable factory: probe again next time
        _PROBED[harness, protocol] = found
    return found


def _factory(harness: Harness, protocol: str) -> object:
    return harness.new_step_store if protocol == "step" else harness.new_session_store


class _Contract:
    pytestmark = pytest.mark.trio

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
        if clause.capability in CAPABILITIES and _factory(harness, clause.protocol) is not None:
            capabilities = _capabilities(harness, clause.protocol)
        reason = skip_reason(clause, harness, capabilities)
        if reason is not None:
            pytest.skip(f"[{clause.id}] {reason}")
        return harness


def _test(clause: Clause) -> Callable[[Any, Harness], Coroutine[Any, Any, None]]:
    async def test(self: Any, _agentlooptest_harness: Harness) -> None:
        await run_check(clause, _agentlooptest_harness)

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
