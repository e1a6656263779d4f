"""The pytest plugin for eval suites, registered through the ``pytest11`` entry point.

Installing ``agentloop-seam`` is enough: pytest loads this module in every run,
so it imports nothing but pytest until a test asks for one of its fixtures.

Fixtures (each test gets its own, empty):

- ``agentloop_sessions``: an in-memory store (``agentloopmem.MemoryStore``),
  the session store and the step store in one object, with every capability.
- ``agentloop_steps``: the same object, as the step store. Hand both to
  ``Loop(steps=agentloop_steps, sessions=agentloop_sessions)``: the session
  store covers the step store, so a run's lease fences its appends too.
- ``agentloop_config``: ``LoopConfig(strict=...)`` from the ``agentloop_strict``
  ini option (default false). ``Loop(config=agentloop_config)`` then ends a
  run with status ``error`` on a tool error or the run's own ``LoopWarning``,
  so a broken tool fails the eval; ``attrs.evolve(agentloop_config, ...)``
  changes other settings and keeps that one.

When a test that used the stores fails, its report gains one section per
session written through them, ``agentloop transcript: <session id>``: the
transcript ``agentloop show`` prints (settings, every step, the run summary).
A passing test shows nothing.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from agentloop import LoopConfig
    from agentloopmem._eval import EvalStore

STRICT_INI = "agentloop_strict"

_STORE = pytest.StashKey["EvalStore"]()
_SHOWN = pytest.StashKey[bool]()


def pytest_addoption(parser: pytest.Parser) -> None:
    """Declare the ``agentloop_strict`` ini option."""
    parser.addini(
        STRICT_INI,
        "agentloop_config fixture: LoopConfig(strict=...), so a tool error or a "
        "LoopWarning ends a run with status error (default: false)",
        type="bool",
        default=False,
    )


@pytest.fixture
def agentloop_sessions(request: pytest.FixtureRequest) -> EvalStore:
    """A fresh in-memory store for this test: session store and step store in one.

    Every session written through it is shown, as a transcript, in the report of
    the test if it fails.
    """
    from agentloopmem._eval import EvalStore

    store = EvalStore()
    request.node.stash[_STORE] = store
    return store


@pytest.fixture
def agentloop_steps(agentloop_sessions: EvalStore) -> EvalStore:
    """The step store of this test: the same object as ``agentloop_sessions``."""
    return agentloop_sessions


@pytest.fixture
def agentloop_config(request: pytest.FixtureRequest) -> LoopConfig:
    """``LoopConfig(strict=<the agentloop_strict ini option>)``, the other settings default."""
    from agentloop import LoopConfig

    return LoopConfig(strict=bool(request.config.getini(STRICT_INI)))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Add the transcripts to the first failed report of a test that used the stores."""
    report = yield
    store = item.stash.get(_STORE, None)
    if report.failed and store is not None and not item.stash.get(_SHOWN, False):
        item.stash[_SHOWN] = True
        from agentloopmem._eval import transcripts

        for session_id, text in transcripts(store):
            report.sections.append((f"agentloop transcript: {session_id}", text))
    return report
