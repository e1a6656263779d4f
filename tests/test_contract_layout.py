"""The contract is laid out by clause id: one table maps each family to its module, in order."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import agentlooptest
from agentlooptest import CLAUSES
from agentlooptest._clauses import FAMILIES, family
from agentlooptest._cli import main

_PACKAGE = Path(agentlooptest._clauses.__file__).parent
_ROOT = Path(agentlooptest.__file__).resolve().parent.parent


def test_each_clause_lives_in_the_module_its_family_names() -> None:
    """`step.order.oldest-first` is in the module FAMILIES names for `step.order`, and so on."""
    for c in CLAUSES:
        assert c.check.__module__ == FAMILIES[family(c.id)].__name__, c.id


def test_families_name_every_clause_module_and_every_family_has_clauses() -> None:
    """FAMILIES maps every family of CLAUSES, and every clause module of the package is in it."""
    on_disk = {p.stem for p in _PACKAGE.glob("*.py") if not p.stem.startswith("_")}
    assert {m.__name__.rpartition(".")[2] for m in FAMILIES.values()} == on_disk
    assert {family(c.id) for c in CLAUSES} == set(FAMILIES)


def test_each_module_docstring_names_its_families() -> None:
    """A module's docstring lists the families FAMILIES gives it, so its first lines say so."""
    for name, module in FAMILIES.items():
        assert f"``{name}" in (module.__doc__ or ""), (name, module.__name__)


def test_clauses_follow_families_step_first() -> None:
    """CLAUSES runs family by family in FAMILIES order, every step clause before any session one."""
    ranks = list(FAMILIES)
    order = [ranks.index(family(c.id)) for c in CLAUSES]
    assert order == sorted(order)
    protocols = [c.protocol for c in CLAUSES]
    assert protocols == sorted(protocols, key=lambda p: p != "step")


@pytest.mark.parametrize("clause", CLAUSES, ids=lambda c: c.id)
def test_where_points_at_the_clause_decorator(clause: agentlooptest.Clause) -> None:
    """`Clause.where` is the `@clause(` line whose next line is the clause's id."""
    path, _, line = clause.where.rpartition(":")
    lines = (_ROOT / path).read_text(encoding="utf-8").splitlines()
    module = FAMILIES[family(clause.id)].__name__
    assert path == module.replace(".", "/") + ".py"
    assert lines[int(line) - 1].startswith("@clause(")
    assert lines[int(line)].strip() == f'"{clause.id}",'


def test_cli_where_lists_every_clause(capsys: pytest.CaptureFixture[str]) -> None:
    """`clauses --where` prints each clause's id, pytest test name and file:line."""
    assert main(["clauses", "--where"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert rows == [[c.id, c.test_name, c.where] for c in CLAUSES]


def test_cli_where_answers_for_a_test_name(capsys: pytest.CaptureFixture[str]) -> None:
    """`-k test_...` finds a clause by its pytest test name, which no source file spells out."""
    assert main(["clauses", "--where", "-k", "test_step_order_oldest_first"]) == 0
    [row] = capsys.readouterr().out.splitlines()
    assert row.split() == [
        "step.order.oldest-first",
        "test_step_order_oldest_first",
        next(c.where for c in CLAUSES if c.id == "step.order.oldest-first"),
    ]


def test_cli_clauses_refuses_a_pattern_that_selects_nothing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`clauses -k` that matches nothing is a usage error, as it is for `certify`."""
    assert main(["clauses", "--where", "-k", "test_no_such_clause"]) == 2
    assert "no clause matches -k 'test_no_such_clause'" in capsys.readouterr().err


def test_certify_selects_by_test_name(capsys: pytest.CaptureFixture[str]) -> None:
    """`certify -k test_step_window_*` runs exactly the clauses with those test names."""
    assert main(["certify", "agentlooptest:memory_harness", "-k", "test_step_window_*"]) == 0
    out = capsys.readouterr().out
    ran = {c.id for c in CLAUSES if f"{c.id} " in out}
    assert ran == {c.id for c in CLAUSES if c.id.startswith("step.window.")}


_NO_PYTEST = textwrap.dedent(
    """
    import sys
    import trio
    import agentlooptest
    from agentlooptest._cli import main

    assert "pytest" not in sys.modules, "import agentlooptest"
    assert main(["clauses", "--where"]) == 0
    assert main(["certify", "-k", "step.window"]) == 0
    assert "pytest" not in sys.modules, "the CLI"
    seen = []

    def on_start(clause, i, total):
        seen.append((clause.id, "pytest" in sys.modules))

    harness = agentlooptest.memory_harness()
    report = trio.run(lambda: agentlooptest.certify(harness, on_start=on_start))
    assert report.ok, report.verdict
    first_model = next(i for i, (cid, _) in enumerate(seen) if cid.endswith(".model-based"))
    assert not any(loaded for _, loaded in seen[: first_model + 1]), seen
    assert "hypothesis" in sys.modules
    assert agentlooptest.StepStoreContract.__name__ == "StepStoreContract"
    assert "pytest" in sys.modules
    print("ok")
    """
)


def test_certify_and_the_cli_do_not_import_pytest() -> None:
    """agentlooptest, its CLI and certify() never import pytest; the base classes load it late.

    The model-based clauses import hypothesis, whose trio plugin imports
    pytest when it is installed: the check stops at the first of them.
    """
    run = subprocess.run(
        [sys.executable, "-c", _NO_PYTEST],
        capture_output=True,
        text=True,
        check=False,
        cwd=_ROOT,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.splitlines()[-1] == "ok"


def test_lazy_base_classes_behave_like_attributes() -> None:
    """The lazily loaded names import, show in dir(), and a wrong name is an AttributeError."""
    from agentlooptest import SessionStoreContract, StepStoreContract

    assert {"SessionStoreContract", "StepStoreContract"} <= set(dir(agentlooptest))
    assert (
        StepStoreContract.__module__ == SessionStoreContract.__module__ == "agentlooptest._pytest"
    )
    with pytest.raises(AttributeError, match=r"^module 'agentlooptest' has no attribute 'Nope'$"):
        _ = agentlooptest.Nope  # type: ignore[attr-defined]
