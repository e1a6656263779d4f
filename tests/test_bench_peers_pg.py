"""``python -m bench --peers`` on PostgreSQL: ours vs the peers and the raw psycopg reference."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import psycopg
import pytest
from test_bench_peers import TINY, UNREACHABLE

from bench import _floor_pg, _peers_load, _peers_pg, peers
from bench._peers_mem import Handle
from bench._peers_timing import AsyncioLoop, TrioLoop
from bench._report import SpreadRow

ROOT = Path(__file__).resolve().parent.parent
OURS = ("agentloop", "agentloopmem", "agentloopsql", "agentlooptest")
MEASURES = [
    "postgres append @5",
    "postgres append @20",
    "postgres append @40",
    "postgres newest-20 read @5",
    "postgres newest-20 read @20",
    "postgres newest-20 read @40",
    "postgres 2 concurrent appenders, 8 appends",
    "postgres 4 concurrent appenders, 8 appends",
]
needs_pg_peers = pytest.mark.skipif(
    bool(_peers_load.missing(_peers_load.ON_POSTGRES)),
    reason="the PostgreSQL peers are not installed: pip install -e '.[peers]'",
)


class _Named:
    """A stand-in side: only its label is read when rows are made."""

    def __init__(self, label: str) -> None:
        self.label = label


def _leftover_schemas(dsn: str, prefix: str) -> list[str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT nspname FROM pg_namespace WHERE starts_with(nspname, %s)", (prefix,)
        ).fetchall()
    return [name for (name,) in rows]


def _fixed_base(monkeypatch: pytest.MonkeyPatch, token: str) -> str:
    """Makes this test's schemas start with a name no other run uses."""
    monkeypatch.setattr(_peers_pg.secrets, "token_hex", lambda n: token)
    return f"agentloop_bench_{token}"


def test_rows_name_every_measure_and_end_each_with_the_reference() -> None:
    """Per measure: one "vs" row per peer (target >= 1), then the raw psycopg reference,
    printed as raw time / our time: judged (>= 0.7) for reads only."""
    raw = _peers_pg.Raw(UNREACHABLE, "unused")
    try:
        ours, lang = _Named("ours"), _Named("LangGraph AsyncPostgresSaver (x 1)")
        timings: _peers_pg.Timings = {}
        for measure in [(k, h) for k in ("append", "read") for h in (5, 20, 40)] + [
            ("tasks", 2),
            ("tasks", 4),
        ]:
            timings[measure, "ours"] = [2.0, 4.0]
            timings[measure, lang.label] = [6.0, 8.0]
            timings[measure, raw.label] = [1.0, 1.0]
        rows = _peers_pg._rows(TINY, timings, ours, [lang, raw])
    finally:
        raw.loop.close()
    assert [row.name for row in rows[::2]] == MEASURES
    assert [row.name for row in rows[1::2]] == MEASURES
    assert all(row.detail.startswith(f"vs {lang.label}") for row in rows[::2])
    assert all(row.detail.startswith("vs raw psycopg (reference") for row in rows[1::2])
    assert {(row.ratio, row.low, row.high, row.target) for row in rows[::2]} == {
        (2.5, 2.0, 3.0, ">= 1")
    }
    reference = {(row.name.split(" @")[0], row.ratio, row.ok) for row in rows[1::2]}
    assert reference == {
        ("postgres append", 0.375, True),
        ("postgres newest-20 read", 0.375, False),
        ("postgres 2 concurrent appenders, 8 appends", 0.375, True),
        ("postgres 4 concurrent appenders, 8 appends", 0.375, True),
    }
    assert {row.target for row in rows[1::2] if "read" in row.name} == {">= 0.7"}


def test_a_missing_postgres_peer_is_named_with_every_package_it_needs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A peer whose driver is absent counts as missing; stderr names it, each package it
    needs and the extra that installs them."""
    driverless = _peers_load.Peer("p", "pytest", "pytest", ("no-such-driver-xyz",))
    assert _peers_load.missing((driverless,)) == [driverless]
    assert "p (pytest + no-such-driver-xyz)" in _peers_load.missing_message([driverless])
    monkeypatch.setattr(_peers_load, "importable", lambda peer: False)
    assert peers.rows(TINY, pg_dsn=UNREACHABLE) == []
    err = capsys.readouterr().err
    assert "ADK DatabaseSessionService (google-adk + sqlalchemy + greenlet + asyncpg)" in err
    assert "LangGraph AsyncPostgresSaver (langgraph-checkpoint-postgres)" in err
    assert "OpenAI Agents SQLAlchemySession (openai-agents + sqlalchemy" in err
    assert _peers_load.INSTALL_HINT in err


def test_no_server_leaves_the_postgres_rows_out_and_says_where(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The PostgreSQL peers installed but no server at the DSN: no rows, and stderr says why."""
    monkeypatch.setattr(_peers_load, "importable", lambda peer: peer in _peers_load.ON_POSTGRES)
    assert peers.rows(TINY, pg_dsn=UNREACHABLE) == []
    err = capsys.readouterr().err
    assert f"PostgreSQL peers left out: no connection to {UNREACHABLE}" in err
    assert peers.DSN_VARIABLE in err


class _Counting:
    """A side that only counts the sessions it is asked for."""

    label, schema = "counting", "unused"

    def __init__(self) -> None:
        self.loop = AsyncioLoop()
        self.made: list[int] = []

    async def session(self, history: int) -> Handle:
        self.made.append(history)
        return Handle(len(self.made), iter(()))


@pytest.mark.parametrize(
    ("history", "rounds", "sessions"),
    [
        (100, 5, [1, 2, 3, 4, 5]),
        (1_000, 5, [1] * 5),
        (1_000, 7, [1] * 5 + [2] * 2),
        (10_000, 7, [1] * 7),
    ],
)
def test_an_append_session_takes_at_most_a_tenth_of_its_history(
    history: int, rounds: int, sessions: list[int]
) -> None:
    """20 appends a round: at 100 every round gets a fresh session; at 1,000 one takes five
    rounds; at 10,000 one lasts the whole run."""
    side = _Counting()
    try:
        handles = _peers_pg._append_sessions(side, history, peers.Sizes(pg_rounds=rounds))
    finally:
        side.loop.close()
    assert [handle.session for handle in handles] == sessions
    assert side.made == [history] * max(sessions)


def test_the_trio_side_keeps_one_run_for_every_block() -> None:
    """Each block of ours runs in the same trio run, on its own thread, and returns its value."""
    import trio

    loop = TrioLoop()
    try:

        async def token() -> object:
            await trio.lowlevel.checkpoint()
            return trio.lowlevel.current_trio_token()

        assert loop.run(token) is loop.run(token)
    finally:
        loop.close()


def test_ours_against_the_reference_alone_and_every_schema_dropped(
    postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No peer chosen: ours and the raw reference still run; nothing they made is left."""
    base = _fixed_base(monkeypatch, f"tref{id(monkeypatch):x}")
    rows = _peers_pg.rows(TINY, [], postgres_dsn)
    assert [row.name for row in rows] == MEASURES
    assert all(row.detail.startswith("vs raw psycopg (reference") for row in rows)
    assert all(math.isfinite(row.ratio) and row.ratio > 0 for row in rows)
    assert _leftover_schemas(postgres_dsn, base) == []


def test_a_failed_measurement_still_drops_every_schema(
    postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A side that fails mid-run: the error comes out, and the schemas made are gone."""
    base = _fixed_base(monkeypatch, f"tfail{id(monkeypatch):x}")

    def broken(sides: object, sizes: object) -> None:
        assert len(_leftover_schemas(postgres_dsn, base)) == 2  # ours, the reference's
        raise RuntimeError("a side failed")

    monkeypatch.setattr(_peers_pg, "_measure", broken)
    with pytest.raises(RuntimeError, match="a side failed"):
        _peers_pg.rows(TINY, [], postgres_dsn)
    assert _leftover_schemas(postgres_dsn, base) == []


@needs_pg_peers
def test_a_tiny_round_against_every_postgres_peer(
    postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each measure has a "vs" row per PostgreSQL peer, then the reference, with a sane
    spread; every schema is dropped afterwards."""
    base = _fixed_base(monkeypatch, f"tpeers{id(monkeypatch):x}")
    rows = _peers_pg.rows(TINY, list(_peers_load.ON_POSTGRES), postgres_dsn)
    labels = [peer.label for peer in _peers_load.ON_POSTGRES] + ["raw psycopg (reference"]
    assert [row.name for row in rows] == [name for name in MEASURES for _ in labels]
    assert all(row.detail.startswith(f"vs {labels[i % len(labels)]}") for i, row in enumerate(rows))
    for row in rows:
        assert isinstance(row, SpreadRow)
        assert math.isfinite(row.ratio)
        assert 0 < row.low <= row.ratio <= row.high
    assert _leftover_schemas(postgres_dsn, base) == []


def test_bench_imports_only_public_names_of_our_packages() -> None:
    """No bench module imports a private module or name of agentloop* (they may move)."""
    found = []
    for path in sorted((ROOT / "bench").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [f"{node.module}.{alias.name}" for alias in node.names]
            else:
                continue
            for name in names:
                parts = name.split(".")
                if parts[0] in OURS and any(part.startswith("_") for part in parts[1:]):
                    found.append(f"{path.name}:{node.lineno} {name}")
    assert found == []


FLOOR_READS = [
    "postgres newest-20 read @20",
    "postgres get",
    "postgres get_many of 20",
    "postgres list_sessions(limit=20)",
]


def test_floor_rows_judge_every_read_under_both_backends() -> None:
    """Per read, a trio row then an asyncio row, each raw time / our time, judged >= 0.7."""
    sides = [_Named("ours (PostgresStore, trio)"), _Named("ours (PostgresStore, asyncio)")]
    raw = _Named(_floor_pg.Raw.label)
    timings: _floor_pg.Timings = {}
    for i in range(len(_floor_pg.READS)):
        timings[i, sides[0].label] = [2.0, 2.0]
        timings[i, sides[1].label] = [1.0, 1.0]
        timings[i, raw.label] = [1.0, 1.0]
    rows = _floor_pg._rows(TINY, timings, [*sides, raw])  # type: ignore[list-item]
    assert [row.name for row in rows] == [
        f"{name}, {backend}" for name in FLOOR_READS for backend in ("trio", "asyncio")
    ]
    assert [(row.ratio, row.ok) for row in rows] == [(0.5, False), (1.0, True)] * 4
    assert {row.target for row in rows} == {">= 0.7"}


def test_a_tiny_floor_run_reads_real_rows_and_drops_every_schema(
    postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every read of ours and of the floor returns what was filled; the schemas are gone."""
    token = f"tfloor{id(monkeypatch):x}"
    monkeypatch.setattr(_floor_pg.secrets, "token_hex", lambda n: token)
    seen: list[int] = []
    measure = _floor_pg._measure

    def counting(sides: list[_floor_pg.Side], sizes: peers.Sizes) -> _floor_pg.Timings:
        for side in sides:
            results = [side.loop.run(read) for read in side.reads()]
            seen.append(len(results[0]))  # the newest 20 of 20 steps
            assert len(results[2]) == _floor_pg.LOOKUPS
            assert len(results[3]) == _floor_pg.LOOKUPS
        return measure(sides, sizes)

    monkeypatch.setattr(_floor_pg, "_measure", counting)
    rows = _floor_pg.rows(TINY, postgres_dsn)
    assert seen == [20, 20, 20]
    assert [row.name.rsplit(", ", 1)[0] for row in rows[::2]] == FLOOR_READS
    assert all(math.isfinite(row.ratio) and row.ratio > 0 for row in rows)
    assert _leftover_schemas(postgres_dsn, f"agentloop_floor_{token}") == []
