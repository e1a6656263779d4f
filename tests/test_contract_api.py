"""The public face of agentlooptest: names, Harness, clause list, reports, packaging."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from xml.etree import ElementTree

import pytest

import agentlooptest
from agentlooptest import (
    CAPABILITIES,
    CLAUSES,
    ClauseResult,
    Harness,
    Report,
    certify,
    memory_harness,
)


def test_all_names_exist_and_are_documented() -> None:
    """Every name in __all__ exists, is public and carries a docstring (or is a constant)."""
    assert sorted(agentlooptest.__all__) == agentlooptest.__all__
    for name in agentlooptest.__all__:
        assert not name.startswith("_")
        value = getattr(agentlooptest, name)
        if not name.isupper():
            assert value.__doc__, name


def test_no_private_leaks() -> None:
    """The package namespace holds __all__, its private modules and nothing else public."""
    public = {n for n in vars(agentlooptest) if not n.startswith("_") and n.isidentifier()}
    assert public - set(agentlooptest.__all__) <= {"annotations", "pytest", "require"}


def test_clause_ids_are_unique_and_stable_shaped() -> None:
    """Ids are unique dotted kebab-case strings under their protocol; each has a title and why."""
    ids = [c.id for c in CLAUSES]
    assert len(ids) == len(set(ids))
    for c in CLAUSES:
        assert re.fullmatch(r"(step|session)(\.[a-z0-9]+(-[a-z0-9]+)*)+", c.id)
        assert c.id.startswith(c.protocol + ".")
        assert c.title
        assert c.why
        assert c.capability in (None, "reopen", *CAPABILITIES)


def test_clause_list_covers_both_protocols_and_every_capability() -> None:
    """Both protocols, every optional capability and durability have clauses."""
    needs = {c.capability for c in CLAUSES}
    assert needs >= {None, "reopen", *CAPABILITIES}
    assert {c.protocol for c in CLAUSES} == {"step", "session"}


def test_harness_needs_a_factory() -> None:
    """A harness with neither factory is refused; non-callables are refused by field name."""
    with pytest.raises(TypeError, match=r"^Harness needs new_step_store"):
        Harness()
    with pytest.raises(TypeError, match=r"^reopen must be an async callable or None"):
        Harness(new_step_store=memory_harness().new_step_store, reopen=3)  # type: ignore[arg-type]


async def test_report_shape() -> None:
    """certify() returns a Report: ok, per-clause results, level, duration, dict, JUnit."""
    report = await certify(memory_harness(), pattern="step.window")
    assert report.ok
    assert [r.id for r in report.results] == [c.id for c in CLAUSES if "step.window" in c.id]
    assert all(r.outcome == "passed" for r in report.results)
    assert report.level.startswith("step: base")
    assert report.duration > 0
    doc = json.loads(json.dumps(report.to_dict()))
    assert doc["ok"] is True
    assert len(doc["results"]) == len(report.results)
    root = ElementTree.fromstring(report.to_junit_xml())
    assert root.find("testsuite") is not None


async def test_session_only_harness_skips_step_protocol() -> None:
    """With only a session factory, step clauses are skipped with the reason."""
    harness = Harness(new_session_store=memory_harness().new_session_store)
    report = await certify(harness, pattern="step.order")
    skipped = report.skipped
    assert skipped
    assert all("no new_step_store" in r.message for r in skipped)
    assert "step: not certified (no factory)" in report.level
    assert not report.ok
    assert report.verdict.startswith("NOTHING CERTIFIED")


async def test_failure_message_names_clause_action_expectation_and_consequence() -> None:
    """A failure message carries the clause id, did, expected, got and why."""
    from agentloopmem import StepStore

    class Backwards(StepStore):
        async def last_n(self, session_id: str, n: int) -> list:  # type: ignore[type-arg]
            return (await super().last_n(session_id, n))[::-1]

    async def new() -> Backwards:
        return Backwards()

    report = await certify(Harness(new_step_store=new), pattern="step.order.oldest-first")
    [result] = report.results
    lines = result.message.splitlines()
    assert lines[0].startswith("[step.order.oldest-first] ")
    assert [line.split(":")[0].strip() for line in lines[1:5]] == ["did", "expected", "got", "why"]
    assert "conversation backwards" in lines[4]


def _fails_once(results: list[ClauseResult]) -> None:
    """The first clause fails in full; every other one is not run, referring to it."""
    first, *rest = results
    assert first.outcome == "failed"
    assert rest
    for r in rest:
        assert r.outcome == "not run"
        assert r.message.endswith(f"({first.id} says why)"), r.message


def test_factory_returning_wrong_thing_fails_every_clause_of_that_protocol() -> None:
    """A factory that does not return a store fails its protocol's clauses, readably."""
    import trio

    async def not_a_store() -> object:
        return object()

    report = trio.run(certify, Harness(new_step_store=not_a_store))
    step_results = [r for r in report.results if r.protocol == "step"]
    assert step_results
    _fails_once(step_results)
    assert "a StepStore" in step_results[0].message


def test_factory_that_hangs_fails_within_the_clause_timeout() -> None:
    """A factory that never returns fails its protocol in clause_timeout, not forever."""
    import trio

    async def hangs() -> object:
        await trio.sleep_forever()

    async def run() -> Report:
        with trio.fail_after(10):
            return await certify(Harness(new_step_store=hangs), clause_timeout=0.2)

    report = trio.run(run)
    step_results = [r for r in report.results if r.protocol == "step"]
    assert step_results
    _fails_once(step_results)
    assert "a store within 0.2s" in step_results[0].message
    assert "never returned" in step_results[0].message


def test_sync_factory_is_refused_at_construction() -> None:
    """A class or a plain function as a field is a TypeError naming the field, at once."""
    import functools

    import agentloopmem

    with pytest.raises(TypeError, match=r"^new_step_store must be an async callable.*a class"):
        Harness(new_step_store=agentloopmem.StepStore)

    def plain() -> object:
        return agentloopmem.StepStore()

    with pytest.raises(TypeError, match=r"^new_session_store must be .*a plain \(sync\) callable"):
        Harness(new_session_store=plain)
    with pytest.raises(TypeError, match=r"^cleanup must be an async callable"):
        Harness(new_step_store=memory_harness().new_step_store, cleanup=plain)

    async def made(kind: str) -> object:
        return agentloopmem.StepStore()

    class Factory:
        async def __call__(self) -> object:
            return agentloopmem.StepStore()

    Harness(new_step_store=functools.partial(made, "steps"))  # both accepted
    Harness(new_step_store=Factory())


def test_a_factory_that_returns_no_awaitable_is_told_factories_are_async() -> None:
    """A factory that passes for async yet returns a plain value fails readably when called."""
    import trio

    import agentloopmem

    class Lies:
        async def __call__(self) -> object:  # pragma: no cover - replaced below
            raise AssertionError

    lies = Lies()
    harness = Harness(new_step_store=lies)
    object.__setattr__(harness, "new_step_store", agentloopmem.StepStore)
    report = trio.run(certify, harness)
    step_results = [r for r in report.results if r.protocol == "step"]
    _fails_once(step_results)
    assert "factories are zero-argument async callables" in step_results[0].message
    assert "TypeError" not in step_results[0].message


_BLOCK = (
    "import sys\n"
    "for name in ('pytest', 'hypothesis', 'pytest_trio', '_pytest'):\n"
    "    sys.modules[name] = None\n"
)


def test_importing_without_the_extra_fails_in_one_line() -> None:
    """Without pytest/hypothesis, importing agentlooptest fails naming agentloop-seam[contract]."""
    code = _BLOCK + (
        "try:\n"
        "    import agentlooptest\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
        "else:\n"
        "    print('imported')\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    [line] = run.stdout.splitlines()
    assert "pip install 'agentloop-seam[contract]'" in line
    assert "pytest" in line
    assert "hypothesis" in line


def test_contract_needs_no_pytest_trio() -> None:
    """agentlooptest imports, and certifies under asyncio, with pytest-trio absent."""
    code = (
        "import sys\n"
        "sys.modules['pytest_trio'] = None\n"
        "import asyncio, agentlooptest\n"
        "harness = agentlooptest.memory_harness()\n"
        "report = asyncio.run(agentlooptest.certify(harness, pattern='step.window'))\n"
        "print(report.ok, len(report.results) > 0)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert run.stdout.split() == ["True", "True"]


def test_core_packages_import_without_the_extra() -> None:
    """agentloop and agentloopmem import with pytest and hypothesis absent."""
    code = _BLOCK + "import agentloop, agentloopmem\nprint('ok')\n"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "ok"


class _NeedsSession:
    """A step store with a foreign key: appends need the session registered first."""

    def __init__(self) -> None:
        from agentloopmem import StepStore

        self.inner = StepStore()
        self.known: set[str] = set()
        self.ensured: list[str] = []

    async def register(self, session_id: str) -> None:
        self.ensured.append(session_id)
        self.known.add(session_id)

    async def append(self, step: object) -> None:
        from agentloop import RunStep

        if isinstance(step, RunStep) and step.session_id not in self.known:
            raise ValueError(f"no session row for {step.session_id!r}")
        await self.inner.append(step)  # type: ignore[arg-type]

    async def last_n(self, session_id: str, n: int) -> list[object]:
        return list(await self.inner.last_n(session_id, n))


async def _new_fk() -> _NeedsSession:
    return _NeedsSession()


async def _ensure(store: _NeedsSession, session_id: str) -> None:
    await store.register(session_id)


async def test_ensure_session_prepares_foreign_keys() -> None:
    """With ensure_session, a store whose steps need a session row passes; without, it fails."""
    with_hook = await certify(Harness(new_step_store=_new_fk, ensure_session=_ensure))
    assert with_hook.failed == (), "\n\n".join(r.message for r in with_hook.failed)
    without = await certify(Harness(new_step_store=_new_fk), pattern="step.order.oldest-first")
    assert not without.ok


def test_readme_example_compiles() -> None:
    """The certify how-to's pytest example is valid Python."""
    from _docs import block

    compile(block("howto/certify.md"), "docs/howto/certify.md", "exec")


@pytest.mark.parametrize(
    ("a", "b", "equal"),
    [
        ('{"a": 1, "b": [2]}', '{"b":[2],"a":1}', True),
        ("1", "1.0", True),
        ("[1e2]", "[100]", True),
        ("true", "1", False),
        ("[0]", "[false]", False),
        ("null", "0", False),
        ("12345678901234567890", "1.2345678901234567e19", False),
        ('"a"', '"b"', False),
    ],
)
def test_json_equality_is_semantic(a: str, b: str, equal: bool) -> None:
    """JSON documents compare as JSON values: key order and number spelling do not matter."""
    from agentlooptest._data import json_equal

    assert json_equal(a, b) is equal
