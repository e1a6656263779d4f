"""The house rules that a reviewer would otherwise check by hand.

- Public APIs only: no private module, class or attribute of another project.
- Sibling packages reach into ``agentloop`` only through its public face and
  the one declared shared-helper module, ``agentloop._shared``, whose names
  they use stay few.
- One module per concept: at most :data:`MAX_MODULES` modules in the four
  packages, and no import cycle between modules (``TYPE_CHECKING`` and local
  imports included) but the one documented in ``docs/architecture.md``.
- Every third-party module the packages import is a declared dependency with
  a version range (lower and upper bound) that the installed version meets.
- No function passes 60 lines.
- Every skipped SQL test says why.
"""

from __future__ import annotations

import ast
import importlib.metadata
import os
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("agentloop", "agentloopmem", "agentlooptest", "agentloopsql")
SIBLINGS = ("agentloopmem", "agentlooptest", "agentloopsql", "bench")
SHARED = "agentloop._shared"
MAX_SHARED_NAMES = 15
MAX_MODULES = 80
MAX_FUNCTION_LINES = 60
# Loop's defaults are in-memory stores, imported lazily (the one allowed cycle).
ALLOWED_EDGES = {("agentloop._loop", "agentloopmem")}
# Where agentloop reaches a sibling at all: that cycle, and `python -m agentloop` handing
# over to the command in agentloopsql (nothing imports __main__, so it closes no cycle).
SIBLING_EDGES = {*ALLOWED_EDGES, ("agentloop.__main__", "agentloopsql._cli")}


def _modules(*packages: str) -> Iterator[Path]:
    for package in packages:
        yield from sorted((ROOT / package).rglob("*.py"))


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _where(path: Path, node: ast.AST) -> str:
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
    return f"{shown}:{getattr(node, 'lineno', 0)}"


def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


def _imported(node: ast.Import | ast.ImportFrom, package: str) -> list[str]:
    """The full dotted names ``node`` imports (``from a import b`` gives ``a.b``)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        base = ".".join([*package.split(".")[: len(package.split(".")) - node.level + 1], base])
    return [f"{base}.{alias.name}".strip(".") for alias in node.names]


def _is_private(part: str) -> bool:
    return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))


# -- public APIs only ----------------------------------------------------------------------


def _our_private_names() -> set[str]:
    """Every private name our packages (and bench) define: functions, classes, attributes,
    parameters, slots."""
    names: set[str] = set()
    for path in _modules(*PACKAGES, "bench"):
        for node in ast.walk(_parse(path)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Attribute | ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.attr if isinstance(node, ast.Attribute) else node.id)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
            elif isinstance(node, ast.alias) and node.asname:
                names.add(node.asname)
            elif isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__slots__" for t in node.targets
            ):
                names.update(c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant))
    return {name for name in names if isinstance(name, str) and _is_private(name)}


def foreign_private_uses(path: Path, ours: set[str]) -> list[str]:
    """Each use in ``path`` of another project's private module, class or attribute.

    Caught: importing a private module or name of another project; reading an
    attribute with a private name our packages never define (``task._must_cancel``,
    ``enum_type._value2member_map_``), directly or through ``getattr``/``hasattr``.
    """
    found = []
    for node in ast.walk(_parse(path)):
        if isinstance(node, ast.Import | ast.ImportFrom) and not getattr(node, "level", 0):
            for name in _imported(node, ""):
                parts = name.split(".")
                if parts[0] not in (*PACKAGES, "bench", "__future__") and any(
                    map(_is_private, parts)
                ):
                    found.append(f"{_where(path, node)} imports {name}")
        elif isinstance(node, ast.Attribute) and _is_private(node.attr) and node.attr not in ours:
            found.append(f"{_where(path, node)} reads .{node.attr}")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr", "setattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and _is_private(node.args[1].value)
            and node.args[1].value not in ours
        ):
            found.append(f"{_where(path, node)} {node.func.id}(..., {node.args[1].value!r})")
    return found


def test_no_private_internals_of_other_projects() -> None:
    """No module of the four packages (or bench) uses another project's private API."""
    ours = _our_private_names()
    assert [
        hit for path in _modules(*PACKAGES, "bench") for hit in foreign_private_uses(path, ours)
    ] == []


def test_private_use_check_catches_each_form(tmp_path: Path) -> None:
    """Private imports, attributes and getattr of another project are caught; ours are not."""
    source = tmp_path / "mod.py"
    source.write_text(
        "import anyio._backends._asyncio\n"
        "from psycopg._connection import X\n"
        "from enum import _EnumDict\n"
        "x = task._must_cancel\n"
        "y = getattr(task, '_fut_waiter', None)\n"
        "z = self._ours\n"
        "w = obj.__dict__\n"
    )
    hits = [hit.split(" ", 1)[1] for hit in foreign_private_uses(source, {"_ours"})]
    assert hits == [
        "imports anyio._backends._asyncio",
        "imports psycopg._connection.X",
        "imports enum._EnumDict",
        "reads ._must_cancel",
        "getattr(..., '_fut_waiter')",
    ]


# -- what the siblings share ---------------------------------------------------------------


def private_agentloop_imports(path: Path) -> list[str]:
    """Each import in ``path`` of a private ``agentloop`` name other than ``_shared``'s."""
    found = []
    for node in ast.walk(_parse(path)):
        if not isinstance(node, ast.Import | ast.ImportFrom) or getattr(node, "level", 0):
            continue
        for name in _imported(node, ""):
            parts = name.split(".")
            if parts[0] != "agentloop" or not any(map(_is_private, parts[1:])):
                continue
            if ".".join(parts[:2]) == SHARED and not any(map(_is_private, parts[2:])):
                continue
            found.append(f"{_where(path, node)} imports {name}")
    return found


def shared_names_used() -> set[str]:
    """The names of ``agentloop._shared`` that the sibling packages import."""
    used = set()
    for path in _modules(*SIBLINGS):
        for node in ast.walk(_parse(path)):
            if isinstance(node, ast.ImportFrom) and node.module == SHARED:
                used.update(alias.name for alias in node.names)
    return used


def test_siblings_import_only_public_agentloop_names() -> None:
    """No module outside agentloop imports agentloop._* except the shared helper module."""
    offenders = [hit for path in _modules(*SIBLINGS) for hit in private_agentloop_imports(path)]
    assert offenders == []


def test_siblings_share_few_private_names() -> None:
    """The siblings use at most 15 names of agentloop._shared, and it exports no more."""
    import agentloop._shared as shared

    assert shared_names_used() <= set(shared.__all__)
    assert len(shared.__all__) <= MAX_SHARED_NAMES


def test_private_import_check_catches_each_form(tmp_path: Path) -> None:
    """Every way of naming a private agentloop module is caught; the shared module is not."""
    source = tmp_path / "mod.py"
    source.write_text(
        "import agentloop._types\n"
        "from agentloop._run import Run\n"
        "from agentloop import _types, Session\n"
        "from agentloop._shared import preview\n"
        "from agentloop._shared import _secret\n"
        "from agentloop import _shared\n"
        "from agentloopmem._steps import StepStore\n"
    )
    hits = [hit.split(" imports ")[1] for hit in private_agentloop_imports(source)]
    assert hits == [
        "agentloop._types",
        "agentloop._run.Run",
        "agentloop._types",
        SHARED + "._secret",
    ]


# -- one module per concept ----------------------------------------------------------------


def import_graph() -> dict[str, set[str]]:
    """Each module of the four packages -> the modules of ours it imports, anywhere in it."""
    names = {_module_name(path): path for path in _modules(*PACKAGES)}
    graph: dict[str, set[str]] = {}
    for module, path in names.items():
        package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
        edges: set[str] = set()
        for node in ast.walk(_parse(path)):
            if isinstance(node, ast.Import | ast.ImportFrom):
                for name in _imported(node, package):
                    while name and name not in names:
                        name = name.rpartition(".")[0]
                    if name and name != module:
                        edges.add(name)
        graph[module] = edges
    return graph


def cycles(graph: dict[str, set[str]], allowed: set[tuple[str, str]]) -> list[list[str]]:
    """The import cycles of ``graph`` (each once, as the modules around it), ``allowed``
    edges left out."""
    found: list[list[str]] = []
    seen: set[frozenset[str]] = set()

    def walk(start: str, module: str, path: list[str]) -> None:
        for target in sorted(graph.get(module, ())):
            if (module, target) in allowed:
                continue
            if target == start:
                if frozenset(path) not in seen:
                    seen.add(frozenset(path))
                    found.append([*path, start])
            elif target not in path and target > start:
                walk(start, target, [*path, target])

    for start in sorted(graph):
        walk(start, start, [start])
    return found


def test_at_most_80_modules() -> None:
    """The four packages hold at most 80 modules: one per concept, not one per helper."""
    assert len(list(_modules(*PACKAGES))) <= MAX_MODULES


def test_no_import_cycles() -> None:
    """No two modules import each other, directly or around a loop, TYPE_CHECKING included."""
    assert cycles(import_graph(), ALLOWED_EDGES) == []


def test_agentloop_reaches_siblings_only_where_documented() -> None:
    """agentloop imports a sibling only in the two places docs/architecture.md names."""
    edges = {
        (module, target)
        for module, targets in import_graph().items()
        if module.split(".")[0] == "agentloop"
        for target in targets
        if target.split(".")[0] != "agentloop"
    }
    assert edges == SIBLING_EDGES


def test_cycle_check_finds_a_loop() -> None:
    """A loop of three modules is found once; a chain and an allowed edge are not loops."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"f"}, "f": {"e"}}
    assert cycles(graph, {("f", "e")}) == [["a", "b", "c", "a"]]


def long_functions(path: Path) -> list[str]:
    """Each function or method in ``path`` longer than the limit, with its length."""
    found = []
    for node in ast.walk(_parse(path)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            assert node.end_lineno is not None
            length = node.end_lineno - node.lineno + 1
            if length > MAX_FUNCTION_LINES:
                found.append(f"{_where(path, node)} {node.name}: {length} lines")
    return found


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


# -- declared dependencies -----------------------------------------------------------------


def _requirements() -> list[Requirement]:
    with (ROOT / "pyproject.toml").open("rb") as file:
        project = tomllib.load(file)["project"]
    extras = [r for name, reqs in project["optional-dependencies"].items() for r in reqs]
    return [Requirement(r) for r in [*project["dependencies"], *extras]]


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def third_party_imports() -> dict[str, str]:
    """Each top-level module the four packages import from outside the stdlib -> a place."""
    found: dict[str, str] = {}
    for path in _modules(*PACKAGES):
        for node in ast.walk(_parse(path)):
            if isinstance(node, ast.Import | ast.ImportFrom) and not getattr(node, "level", 0):
                for name in _imported(node, ""):
                    top = name.split(".")[0]
                    if top not in sys.stdlib_module_names and top not in (*PACKAGES, "__future__"):
                        found.setdefault(top, _where(path, node))
    return found


def test_every_import_is_a_declared_dependency() -> None:
    """Each third-party module imported is provided by a distribution pyproject declares."""
    declared = {_norm(r.name) for r in _requirements()}
    providers = importlib.metadata.packages_distributions()
    undeclared = {
        module: where
        for module, where in third_party_imports().items()
        if not {_norm(d) for d in providers.get(module, [module])} & declared
    }
    assert undeclared == {}


def test_every_dependency_has_a_range_the_installed_version_meets() -> None:
    """Every runtime dependency has a lower and an upper bound, and what CI installed fits."""
    with (ROOT / "pyproject.toml").open("rb") as file:
        project = tomllib.load(file)["project"]
    runtime = [*project["dependencies"], *project["optional-dependencies"]["postgres"]]
    runtime += project["optional-dependencies"]["contract"]
    problems = []
    for text in runtime:
        requirement = Requirement(text)
        operators = {spec.operator for spec in requirement.specifier}
        if not operators & {">=", ">", "~=", "=="} or not operators & {"<", "<=", "~=", "=="}:
            problems.append(f"{text}: needs a lower and an upper bound")
            continue
        installed = importlib.metadata.version(requirement.name)
        if not requirement.specifier.contains(installed, prereleases=True):
            problems.append(f"{text}: {installed} is installed")
    assert problems == []


# -- SQL skips -----------------------------------------------------------------------------


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
