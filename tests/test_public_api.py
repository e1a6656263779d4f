"""Each package's public face: ``__all__`` is exact, sorted, and leaks nothing private."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

PACKAGES = ["agentloop", "agentloopmem"]


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
def test_public_names_are_documented(name: str) -> None:
    """Every exported class and function says what it guarantees."""
    module = importlib.import_module(name)
    undocumented = [
        n
        for n in module.__all__
        if callable(getattr(module, n)) and not (getattr(module, n).__doc__ or "").strip()
    ]
    assert undocumented == []


@pytest.mark.parametrize("name", ["agentloop", "agentloopmem"])
def test_imports_without_test_dependencies(name: str) -> None:
    """The runtime packages import with only attrs and trio: no pytest, hypothesis, psycopg."""
    code = (
        "import sys\n"
        "for blocked in ('pytest', 'hypothesis', 'psycopg', 'psycopg_pool'):\n"
        "    sys.modules[blocked] = None\n"
        f"import {name}\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
