"""The contract's docs page (docs/howto/certify.md) stays in step with the clause list."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentlooptest import CLAUSES
from agentlooptest._cli import clause_table, main

README = Path(__file__).resolve().parent.parent / "docs" / "howto" / "certify.md"


def _readme_table() -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index("<!-- clause-table:start -->\n") + len("<!-- clause-table:start -->\n")
    end = text.index("<!-- clause-table:end -->")
    return text[start:end].strip()


def test_readme_clause_table_matches_clause_list() -> None:
    """The README table is exactly `agentlooptest clauses --markdown` (regenerate it if not)."""
    assert _readme_table() == clause_table(), (
        "docs/howto/certify.md's clause table is stale: replace it with "
        "`python -m agentlooptest clauses --markdown`"
    )


def test_table_has_one_row_per_clause() -> None:
    """Every clause id appears in the table exactly once."""
    table = _readme_table()
    for c in CLAUSES:
        assert table.count(f"| `{c.id}` |") == 1


def test_readme_numbers_match_the_contract() -> None:
    """The README's program count and example verdict follow the settings and the clause list."""
    from agentlooptest._clauses._machines import SETTINGS

    text = README.read_text(encoding="utf-8")
    assert f"two hypothesis state machines ({SETTINGS.max_examples} programs each" in text
    assert f"): {len(CLAUSES)} passed, ..." in text


def test_readme_where_example_is_what_the_cli_prints(capsys: pytest.CaptureFixture[str]) -> None:
    """The README's `clauses --where` example line is the command's output, file:line included."""
    text = README.read_text(encoding="utf-8")
    command = "$ agentlooptest clauses --where -k test_step_order_oldest_first\n"
    shown = text[text.index(command) + len(command) :].splitlines()[0]
    assert main(["clauses", "--where", "-k", "test_step_order_oldest_first"]) == 0
    assert capsys.readouterr().out.splitlines() == [shown]
