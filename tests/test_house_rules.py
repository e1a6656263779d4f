"""The house rules that a reviewer would otherwise check by hand.

- Sibling packages reach into ``agentloop`` only through its public face and
  the two declared shared-helper modules, ``agentloop._validate`` (the checks)
  and ``agentloop._backend`` (the rules that differ between trio and asyncio).
- No module in the four packages passes 350 lines; no function passes 60.
- Every skipped SQL test says why.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("agentloop", "agentloopmem", "agentlooptest", "agentloopsql")
SIBLINGS = ("agentloopmem", "agentlooptest", "agentloopsql", "bench")
SHARED_HELPERS = ("agentloop._shared", "agentloop._validate", "agentloop._backend")
MAX_MODULE_LINES = 350
MAX_FUNCTION_LINES = 60


def _modules(*packages: str) -> Iterator[Path]:
    for package in packages:
        yield from sorted((ROOT / package).rglob("*.py"))


def _where(path: Path, node: ast.AST) -> str:
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
    return f"{shown}:{getattr(node, 'lineno', 0)}"


def private_agentloop_imports(path: Path) -> list[str]:
    """Each import in ``path`` of a private ``agentloop`` name other than the shared helpers."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] != "agentloop" or not any(p.startswith("_") for p in parts[1:]):
                continue
            module = ".".join(parts[:2])
            public_helper = module in SHARED_HELPERS and (
                name == module or not parts[-1].startswith("_")
            )
            if not public_helper:
                found.append(f"{_where(path, node)} imports {name}")
    return found


def long_functions(path: Path) -> list[str]:
    """Each function or method in ``path`` longer than the limit, with its length."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            assert node.end_lineno is not None
            length = node.end_lineno - node.lineno + 1
            if length > MAX_FUNCTION_LINES:
                found.append(f"{_where(path, node)} {node.name}: {length} lines")
    return found


def test_siblings_import_only_public_agentloop_names() -> None:
    """No module outside agentloop imports agentloop._* except the shared helper module."""
    offenders = [hit for path in _modules(*SIBLINGS) for hit in private_agentloop_imports(path)]
    assert offenders == []


def test_private_import_check_catches_each_form(tmp_path: Path) -> None:
    """Every way of naming a private agentloop module is caught; the shared helper is not."""
    source = tmp_path / "mod.py"
    source.write_text(
        "import agentloop._types\n"
        "from agentloop._run import Run\n"
        "from agentloop import _types, Session\n"
        "from agentloop._validate import preview\n"
        "from agentloop._validate import _secret\n"
        "from agentloop import _validate\n"
        "from agentloop._backend import call_starts\n"
        "from agentloopmem._steps import StepStore\n"
    )
    hits = [hit.split(" imports ")[1] for hit in private_agentloop_imports(source)]
    assert hits == [
        "agentloop._types",
        "agentloop._run.Run",
        "agentloop._types",
        "agentloop._validate._secret",
    ]


def test_modules_are_short() -> None:
    """No module in the four packages passes the line limit."""
    long_modules = [
        f"{path.relative_to(ROOT)}: {lines} lines"
        for path in _modules(*PACKAGES)
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    ]
    assert long_modules == []


def test_functions_fit_on_a_screen() -> None:
    """No function or method in the four packages passes the line limit."""
    assert [hit for path in _modules(*PACKAGES) for hit in long_functions(path)] == []


def test_long_function_check_measures_the_whole_body(tmp_path: Path) -> None:
    """A function one line over the limit is caught; one at the limit is not."""
    body = "\n".join(f"    x{n} = {n}" for n in range(MAX_FUNCTION_LINES - 1))
    source = tmp_path / "mod.py"
    source.write_text(f"def at_limit():\n{body}\n\nasync def over():\n{body}\n    return 1\n")
    assert [hit.split(" ", 1)[1] for hit in long_functions(source)] == [
        f"over: {MAX_FUNCTION_LINES + 1} lines"
    ]


def test_sql_skips_say_why() -> None:
    """Without a PostgreSQL DSN every PostgreSQL test is skipped, and each skip has a reason."""
    env = {k: v for k, v in os.environ.items() if k not in ("AGENTLOOP_PG_DSN", "CI")}
    files = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").glob("test_sql_*.py"))
    run = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider"),
            *("-k", "postgres", *files, "tests/test_postgres.py"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    skips = [line for line in run.stdout.splitlines() if line.startswith("SKIPPED")]
    assert skips, run.stdout
    assert [line for line in skips if "AGENTLOOP_PG_DSN" not in line] == []
    assert run.returncode == 0, run.stdout
