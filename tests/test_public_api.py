"""Each package's public face: ``__all__`` is exact, sorted, and leaks nothing private."""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys
import types

import pytest

# Every public module: the four packages and the one public submodule.
PACKAGES = ["agentloop", "agentloopmem", "agentlooptest", "agentloopsql", "agentloopsql.testing"]
PUBLIC_SUBMODULES = {"agentloopsql.testing"}
OURS = ("agentloop", "agentloopmem", "agentlooptest", "agentloopsql")
# What ``from __future__ import annotations`` binds in every module.
_FUTURE_ANNOTATIONS = sys.modules["__future__"].annotations


def _is_ours(name: str) -> bool:
    return name.split(".")[0] in OURS


def _not_a_name(name: str) -> bool:
    """Private, or not an identifier at all: ``@py_builtins`` and ``@pytest_ar`` are what
    pytest's assertion rewriting adds to a module it rewrote (it rewrites every module of a
    distribution with a pytest11 entry point, as ours has for the plugin); nothing can
    import them."""
    return name.startswith("_") or not name.isidentifier()


def _leaks(module: types.ModuleType) -> list[str]:
    """Public attributes that are not in ``__all__`` and should not be reachable.

    A leak is one of our modules other than a declared public one, one of our
    functions or classes that no package exports, or (on a package's face,
    its ``__init__``) any module at all. A plain public module may keep its
    standard-library imports (``agentloopsql.testing.os``), as Python modules do.
    """
    exported = set(module.__all__)
    public_names = {n for m in OURS for n in importlib.import_module(m).__all__}
    is_package = hasattr(module, "__path__")
    leaked = []
    for name, value in vars(module).items():
        if _not_a_name(name) or name in exported or value is _FUTURE_ANNOTATIONS:
            continue
        if isinstance(value, types.ModuleType):
            if value.__name__ in PUBLIC_SUBMODULES:
                continue
            if is_package or _is_ours(value.__name__):
                leaked.append(name)
        elif (
            (inspect.isclass(value) or inspect.isfunction(value))
            and _is_ours(value.__module__)
            and name not in public_names
        ):
            leaked.append(name)
    return sorted(leaked)


@pytest.mark.parametrize("name", PACKAGES)
def test_all_names_exist(name: str) -> None:
    """Every name in __all__ is importable from the package."""
    module = importlib.import_module(name)
    missing = [n for n in module.__all__ if not hasattr(module, n)]
    assert missing == []


@pytest.mark.parametrize("name", PACKAGES)
def test_all_is_sorted_and_public(name: str) -> None:
    """__all__ is alphabetised and holds no private names."""
    exported = importlib.import_module(name).__all__
    assert list(exported) == sorted(exported)
    assert not [n for n in exported if n.startswith("_")]


@pytest.mark.parametrize("name", PACKAGES)
def test_nothing_private_is_reachable(name: str) -> None:
    """No helper, private submodule or imported module hangs off the public face."""
    assert _leaks(importlib.import_module(name)) == []


def test_the_leak_check_catches_a_leak() -> None:
    """A helper, a private submodule and an imported module on a package's face are caught."""
    face = types.ModuleType("agentloopfake")
    face.__path__ = []
    face.__all__ = ["Session"]
    face.Session = importlib.import_module("agentloop").Session  # exported: fine
    face._hidden = len  # private: fine

    def helper() -> None: ...

    helper.__module__ = "agentloop._validate"
    face.helper = helper
    face.validate = importlib.import_module("agentloop._validate")
    face.pytest = pytest
    assert _leaks(face) == ["helper", "pytest", "validate"]


@pytest.mark.parametrize("name", PACKAGES)
def test_public_names_are_documented(name: str) -> None:
    """Every exported class and function says what it guarantees."""
    module = importlib.import_module(name)
    undocumented = [
        n
        for n in module.__all__
        if callable(getattr(module, n)) and not (getattr(module, n).__doc__ or "").strip()
    ]
    assert undocumented == []


@pytest.mark.parametrize("name", ["agentloop", "agentloopmem", "agentloopsql"])
def test_imports_without_test_dependencies(name: str) -> None:
    """The runtime packages import with only attrs, trio and outcome: no pytest, hypothesis,
    psycopg (``PostgresStore.open`` names the extra to install)."""
    code = (
        "import sys\n"
        "for blocked in ('pytest', 'hypothesis', 'psycopg', 'psycopg_pool'):\n"
        "    sys.modules[blocked] = None\n"
        f"import {name}\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
