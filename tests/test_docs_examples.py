"""Every python example of the README and the docs pages runs in a test, strictly.

The examples other test modules run are listed in ``RUN_ELSEWHERE``; the rest
run here. A page that gains or loses an example fails ``test_every_example_is_run``
until the example has a test.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from _docs import DOCS, ROOT, block, page, printed, python_blocks
from _sql_support import drop_schema

import agentloop
import agentloopmem
import agentloopsql
import agentlooptest

PLUGIN = "agentloopmem._pytest_plugin"

# page -> how many of its python examples the tests run (here or in the module named).
RUN_ELSEWHERE = {
    "README.md": "test_examples.py (quick start), test_readme_eval_snippet_passes",
    "memory.md": "test_mem_lease.py, test_mem_revisions.py",
    "stores.md": "test_sql_readme.py (SQLite; the PostgreSQL one-liner is compiled here)",
    "howto/asyncio.md": "test_examples.py",
    "howto/workers.md": "test_lease_processes.py",
    "howto/certify.md": "test_contract_api.py (compiled) and test_certify_snippets_compile",
    "postgres-failover.md": "test_pg_failover.py (a real primary and standby); compiled here",
}
EXAMPLES = {
    "README.md": 2,
    "tutorial.md": 2,
    "memory.md": 2,
    "stores.md": 2,
    "howto/asyncio.md": 1,
    "howto/workers.md": 1,
    "howto/certify.md": 3,
    "howto/postgres.md": 1,
    "howto/retention.md": 1,
    "howto/lifecycle.md": 1,
    "postgres-failover.md": 1,
}


def _plugin_args() -> list[str]:
    installed = importlib.metadata.entry_points(group="pytest11")
    return [] if any(ep.value == PLUGIN for ep in installed) else ["-p", PLUGIN]


def _pytest(directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "pytest", "-q", "-W", "error", "-p", "no:cacheprovider"]
    return subprocess.run(
        [*command, *_plugin_args(), *args],
        cwd=directory,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def _run(code: str, cwd: Path) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", code],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_every_example_is_run() -> None:
    """Each page has exactly the examples the tests know of, and no page has untested ones."""
    pages = ["README.md", *(str(p.relative_to(DOCS)) for p in sorted(DOCS.rglob("*.md")))]
    counts = {name: len(python_blocks(name)) for name in pages}
    assert {name: n for name, n in counts.items() if n} == EXAMPLES


def test_tutorial_suite_passes_in_strict_mode(tmp_path: Path) -> None:
    """The tutorial's eval suite, with its pyproject setting, passes under the plugin."""
    toml = re.search(r"```toml\n(.*?)```", page("tutorial.md"), re.DOTALL)
    assert toml is not None
    (tmp_path / "pyproject.toml").write_text(toml.group(1), encoding="utf-8")
    (tmp_path / "test_agent.py").write_text(python_blocks("tutorial.md")[0], encoding="utf-8")
    done = _pytest(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout


def test_tutorial_suite_needs_strict_mode(tmp_path: Path) -> None:
    """Without agentloop_strict the bad-arguments eval fails, showing the run's transcript."""
    (tmp_path / "test_agent.py").write_text(python_blocks("tutorial.md")[0], encoding="utf-8")
    done = _pytest(tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 failed, 1 passed" in done.stdout
    assert "agentloop transcript: user-7" in done.stdout
    assert "agentloop transcript: user-42" not in done.stdout


def test_tutorial_example_without_fixtures_passes(tmp_path: Path) -> None:
    """The tutorial's plain Loop example, saved as a test file, passes with warnings as errors."""
    (tmp_path / "test_plain.py").write_text(
        block("tutorial.md", "## Without the fixtures"), encoding="utf-8"
    )
    done = _pytest(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout


def test_readme_eval_snippet_passes(tmp_path: Path) -> None:
    """The README's eval-suite snippet passes under the plugin."""
    code = block("README.md", "## An eval suite in a few lines")
    (tmp_path / "test_snippet.py").write_text(code, encoding="utf-8")
    done = _pytest(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout


def test_retention_example_prints_what_it_says(tmp_path: Path) -> None:
    """The retention how-to's example runs and prints what its comments say."""
    code = block("howto/retention.md")
    assert _run(code, tmp_path) == printed(code) != []


def test_lifecycle_example_prints_what_it_says(tmp_path: Path) -> None:
    """The lifecycle how-to's example (paging, labels, a fork, export into SQLite) prints
    what its comments say."""
    code = block("howto/lifecycle.md")
    assert _run(code, tmp_path) == printed(code) != []


def test_postgres_example_prints_what_it_says(postgres_dsn: str, tmp_path: Path) -> None:
    """The PostgreSQL how-to's example runs on the test server; its schema is dropped after."""
    import psycopg

    def howto_schemas() -> set[str]:
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'howto\\_%'"
            ).fetchall()
        return {row[0] for row in rows}

    before = howto_schemas()
    code = block("howto/postgres.md")
    try:
        out = subprocess.run(
            [sys.executable, "-W", "error", "-c", code],
            cwd=tmp_path,
            env={**os.environ, "AGENTLOOP_PG_DSN": postgres_dsn},
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
    finally:
        for schema in howto_schemas() - before:
            drop_schema(postgres_dsn, schema)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == printed(code) != []


def test_one_line_snippets_compile() -> None:
    """The snippets that are not whole programs are at least valid Python."""
    snippets = [python_blocks("stores.md")[1], *python_blocks("howto/certify.md")]
    snippets += python_blocks("postgres-failover.md")
    for number, code in enumerate(snippets):
        # A snippet awaiting at top level is compiled as the body of a coroutine.
        body = "async def _():\n" + "".join(f"    {line}\n" for line in code.splitlines())
        compile(code if "await" not in code else body, f"snippet {number}", "exec")


def test_failover_snippet_names_real_open_parameters() -> None:
    """The failover page's PostgresStore.open call uses only parameters open has."""
    import inspect

    [code] = python_blocks("postgres-failover.md")
    named = set(re.findall(r"^\s*(\w+)=", code, re.MULTILINE))
    assert named
    assert named <= set(inspect.signature(agentloopsql.PostgresStore.open).parameters)


@pytest.mark.parametrize(
    "package", [agentloop, agentloopmem, agentlooptest, agentloopsql], ids=lambda m: m.__name__
)
def test_the_reference_names_every_public_name(package: object) -> None:
    """docs/reference documents every name in each package's __all__ (a directive or prose)."""
    text = "\n".join(p.read_text(encoding="utf-8") for p in (DOCS / "reference").glob("*.md"))
    name = package.__name__  # type: ignore[attr-defined]
    missing = [
        public
        for public in package.__all__  # type: ignore[attr-defined]
        if f":: {name}.{public}\n" not in text and f"`{public}`" not in text
    ]
    assert missing == [], f"add these to a page of docs/reference: {missing}"


def test_readme_is_a_front_page() -> None:
    """The README fits on a few screens and links every guide it names."""
    text = page("README.md")
    assert len(text.splitlines()) <= 300
    targets = re.findall(r"\]\((docs/[^)#]+)\)", text)
    assert targets
    assert [t for t in targets if not (ROOT / t).exists()] == []
