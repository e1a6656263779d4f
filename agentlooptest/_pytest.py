"""Front door 1: pytest base classes, one test per clause.

A store's test module subclasses ``StepStoreContract`` and/or
``SessionStoreContract`` as ``TestMyStore`` and gives a ``harness`` fixture.
Capability skips happen in a sync fixture, before the check runs, so pytest
shows their reasons. Each test is a plain function running its clause in its
own event loop (``trio.run`` by default): a failure is the clause's did /
expected / got / why text as pytest's failure message, with no nursery
exception group or library frames around it.

Which event loop: the class attribute ``backend``. ``"trio"`` (the default)
and ``"asyncio"`` run every clause there; ``"anyio"`` takes it from the
``anyio_backend`` fixture of anyio's pytest plugin, so the suite's own
``anyio_backend`` (or anyio's default, every installed backend) decides and
each clause runs once per backend it names. A store that cannot run on the
chosen backend fails one test with a message naming the one it needs; the
class's other tests then fail as not run, referring to it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest
import trio

from agentlooptest._backends import (
    BACKENDS,
    Backend,
    needs_other,
    run_in,
    wrong_backend_message,
)
from agentlooptest._certify import (
    CLAUSE_TIMEOUT,
    ClauseFailed,
    WrongBackend,
    factory_error,
    factory_failure,
    run_check,
)
from agentlooptest._clause import Clause, Violation
from agentlooptest._clauses import CLAUSES
from agentlooptest._harness import Harness, probe, skip_reason

_BY_NAME: dict[str, Clause] = {c.test_name: c for c in CLAUSES}
_PROBED: dict[tuple[type, str, str], frozenset[str] | str] = {}
"""Per test class, protocol and backend: the store's capabilities, or the factory's failure."""
_WRONG: dict[tuple[type, str], tuple[Backend, str]] = {}
"""Per test class and backend it ran on: the backend the store needs, and the test saying so."""

_PROTOCOL_NAMES = {"step": "StepStore", "session": "SessionStore"}


def _backend_of(value: object) -> tuple[Backend, dict[str, Any]]:
    """``anyio_backend``'s value (a name, or a name and its options) as the contract runs it."""
    name, options = value, {}
    if isinstance(value, tuple) and len(value) == 2:
        name, options = value[0], dict(value[1])
    if name not in BACKENDS:
        pytest.fail(
            f"agentlooptest: anyio_backend is {value!r}; the contract runs on {BACKENDS}",
            pytrace=False,
        )
    return name, options


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
    contract: _Contract,
    request: pytest.FixtureRequest,
    harness: Harness,
    protocol: str,
) -> frozenset[str]:
    """Probe the store once per test class; a factory failure is told in full once only."""
    owner, test = type(contract), request.node.name
    backend, options = contract._run_on(request)
    key = (owner, protocol, backend)
    known = _PROBED.get(key)
    if isinstance(known, frozenset):
        return known
    if isinstance(known, str):
        pytest.fail(
            f"[{protocol}.factory] not run: the harness could not open a store ({known} says why)",
            pytrace=False,
        )
    check = partial(probe, harness, protocol, clause_timeout=contract.clause_timeout)
    try:
        found = run_in(backend, check, options=options)
    except Violation as violation:
        _PROBED[key] = test
        _wrong_factory(owner, test, protocol, backend, violation.__context__)
        pytest.fail(factory_failure(protocol, violation), pytrace=False)
    except Exception as exc:
        _PROBED[key] = test
        _wrong_factory(owner, test, protocol, backend, exc)
        pytest.fail(factory_error(protocol, exc), pytrace=False)
    _PROBED[key] = found
    return found


def _wrong_factory(
    owner: type, test: str, protocol: str, backend: Backend, exc: BaseException | None
) -> None:
    """Fail (once) saying which backend the store needs, when ``exc`` says that."""
    found = needs_other(exc, backend)
    if found is None:
        return
    need, error = found
    _WRONG[owner, backend] = need, test
    title = f"the harness opens a {_PROTOCOL_NAMES[protocol]}"
    message = wrong_backend_message(f"{protocol}.factory", title, backend, need, error)
    pytest.fail(message, pytrace=False)


def _factory(harness: Harness, protocol: str) -> object:
    return harness.new_step_store if protocol == "step" else harness.new_session_store


class _Contract:
    clause_timeout: float = CLAUSE_TIMEOUT
    """Seconds one clause may run before it fails as hung or spinning; override per class."""

    backend: str = "trio"
    """The event loop each clause runs in: ``"trio"``, ``"asyncio"``, or ``"anyio"``.

    ``"anyio"`` runs each clause once per value of the ``anyio_backend``
    fixture (anyio's pytest plugin; a suite overrides it to choose).
    """

    backend_options: dict[str, Any] | None = None
    """Options for the backend's run (``anyio.run``'s ``backend_options``), e.g. uvloop."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.backend not in (*BACKENDS, "anyio"):
            raise TypeError(
                f"{cls.__name__}.backend must be 'trio', 'asyncio' or 'anyio', got {cls.backend!r}"
            )
        for name, clause in _BY_NAME.items():  # the tests take anyio_backend, or not
            if hasattr(cls, name) and name not in vars(cls):
                setattr(cls, name, _test(clause, cls.backend == "anyio"))

    @pytest.fixture
    def harness(self) -> Harness:
        """Override with a plain (not async) fixture returning an ``agentlooptest.Harness``."""
        pytest.fail(
            f"{type(self).__name__} needs a `harness` fixture returning agentlooptest.Harness",
            pytrace=False,
        )

    def _run_on(self, request: pytest.FixtureRequest) -> tuple[Backend, dict[str, Any]]:
        if self.backend == "anyio":
            return _backend_of(request.getfixturevalue("anyio_backend"))
        return self.backend, dict(self.backend_options or {})  # type: ignore[return-value]

    @pytest.fixture
    def _agentlooptest_harness(self, request: pytest.FixtureRequest, harness: object) -> Harness:
        """Check the setup and skip, with its reason, a clause this store cannot be held to."""
        if asyncio_auto_mode(request.config):
            pytest.fail(
                "agentlooptest: pytest-asyncio is in auto mode and would run these trio tests "
                "under asyncio; set asyncio_mode = strict (its default) for this suite",
                pytrace=False,
            )
        if not isinstance(harness, Harness) or _in_event_loop():
            pytest.fail(
                "agentlooptest: the `harness` fixture must be a plain (not async) fixture "
                f"returning agentlooptest.Harness (no async fixture in its chain: the "
                f"contract probes the store before the test's event loop starts), "
                f"got {harness!r:.100}",
                pytrace=False,
            )
        clause = _BY_NAME[request.node.originalname]
        backend, _ = self._run_on(request)
        wrong = _WRONG.get((type(self), backend))
        if wrong is not None:
            pytest.fail(
                f"[{clause.id}] {clause.title}\n  not run: the store needs {wrong[0]} "
                f"({wrong[1]} says why)",
                pytrace=False,
            )
        capabilities: frozenset[str] = frozenset()
        if _factory(harness, clause.protocol) is not None:
            capabilities = _capabilities(self, request, harness, clause.protocol)
        reason = skip_reason(clause, harness, capabilities)
        if reason is not None:
            pytest.skip(f"[{clause.id}] {reason}")
        return harness


def _in_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return trio.lowlevel.in_trio_run()
    return True


def _run_test(
    contract: _Contract, request: pytest.FixtureRequest, clause: Clause, harness: Harness
) -> None:
    __tracebackhide__ = True
    backend, options = contract._run_on(request)
    check = partial(run_check, clause, harness, clause_timeout=contract.clause_timeout)
    reason = harness.expected_failures.get(clause.id)
    try:
        run_in(backend, check, options=options)
    except ClauseFailed as failed:
        message = str(failed)
        if isinstance(failed, WrongBackend):
            _WRONG[type(contract), backend] = failed.backend, request.node.name
        elif reason is not None:
            pytest.xfail(f"{reason}\n{message}")
    else:
        if reason is None:
            return
        message = (
            f"[{clause.id}] {clause.title}\n  expected to fail but passed: the harness lists "
            f"it in expected_failures ({reason!r}); remove it from expected_failures"
        )
    pytest.fail(message, pytrace=False)  # outside the except: no "during handling"


def _test(clause: Clause, from_anyio: bool = False) -> Callable[..., None]:
    if from_anyio:

        def test(
            self: Any,
            request: pytest.FixtureRequest,
            _agentlooptest_harness: Harness,
            anyio_backend: object,
        ) -> None:
            __tracebackhide__ = True
            _run_test(self, request, clause, _agentlooptest_harness)

    else:

        def test(  # type: ignore[misc]
            self: Any, request: pytest.FixtureRequest, _agentlooptest_harness: Harness
        ) -> None:
            __tracebackhide__ = True
            _run_test(self, request, clause, _agentlooptest_harness)

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
