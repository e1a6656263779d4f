"""agentloopsql's public face: exports, the optional driver, the ready-made harnesses."""

from __future__ import annotations

import subprocess
import sys

import pytest

import agentloopsql
from agentloopsql import testing


def test_all_names_exist_and_nothing_private_leaks() -> None:
    """Every name in __all__ exists; the public names are exactly the two stores."""
    assert agentloopsql.__all__ == ["PostgresStore", "SqliteStore"]
    for name in agentloopsql.__all__:
        assert getattr(agentloopsql, name).__module__.startswith("agentloopsql._")
    public = {n for n in vars(agentloopsql) if not n.startswith("_") and n.isidentifier()}
    assert public - {"annotations"} <= set(agentloopsql.__all__) | {"testing"}


def test_import_without_psycopg() -> None:
    """agentloopsql imports without psycopg; PostgresStore.open then names the extra."""
    code = (
        "import sys; sys.modules['psycopg'] = None; sys.modules['psycopg_pool'] = None\n"
        "import trio, agentloopsql\n"
        "try:\n"
        "    trio.run(agentloopsql.PostgresStore.open, 'postgresql://x')\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out == (
        "PostgresStore needs psycopg 3 and psycopg-pool: pip install 'agentloop-seam[postgres]'\n"
    )


def test_postgres_harness_needs_a_dsn(monkeypatch: pytest.MonkeyPatch) -> None:
    """testing.postgres() without a DSN says which variable to set."""
    monkeypatch.delenv(testing.DSN_VARIABLE, raising=False)
    with pytest.raises(LookupError, match=r"^set AGENTLOOP_PG_DSN"):
        testing.postgres()


async def test_sqlite_harness_gives_fresh_empty_stores() -> None:
    """Each factory call is a new, empty file; reopen reaches the same file."""
    from agentloop import RunStep

    harness = testing.sqlite()
    assert harness.new_step_store is not None
    assert harness.reopen is not None
    first = await harness.new_step_store()
    second = await harness.new_step_store()
    await first.append(RunStep("s", 0, "user"))
    assert await second.all("s") == []
    again = await harness.reopen(first)
    assert len(await again.all("s")) == 1
    for store in (first, second, again):
        await store.aclose()
