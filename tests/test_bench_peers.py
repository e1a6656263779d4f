"""``python -m bench --peers``: ours vs the peer libraries, and a clear word without them."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from bench import __main__ as bench_main
from bench import _peers_load, peers
from bench._report import Row, SpreadRow, render

TINY = peers.Sizes(
    small=5,
    history=20,
    big=60,
    ops=5,
    rounds=2,
    durable_ops=4,
    durable_pairs=2,
    tasks=3,
    task_ops=2,
    pg_big=40,
    pg_ops=3,
    pg_rounds=2,
    pg_tasks=(2, 4),
    pg_task_appends=8,
    pg_floor_ops=3,
)
needs_peers = pytest.mark.skipif(
    bool(peers.missing()), reason="the peers extra is not installed: pip install -e '.[peers]'"
)
# Nothing listens on port 1: the PostgreSQL rows are left out at once (their own tests run them).
UNREACHABLE = "postgresql://postgres@127.0.0.1:1/test"


def _spread_rows(rows: list[Row]) -> list[SpreadRow]:
    assert all(isinstance(row, SpreadRow) for row in rows)
    return [row for row in rows if isinstance(row, SpreadRow)]


@needs_peers
def test_peers_section_compares_ours_with_every_peer_at_tiny_sizes() -> None:
    """Every measure has a "vs" row per peer and a growth row per store, with a sane spread
    (the PostgreSQL peers are left out here: ``tests/test_bench_peers_pg.py`` runs them)."""
    rows = _spread_rows(peers.rows(TINY, pg_dsn=UNREACHABLE))
    details = [row.detail for row in rows]
    for peer in peers.PEERS:
        hit = any(d.startswith(f"vs {peer.label}") for d in details)
        assert hit is (peer not in _peers_load.ON_POSTGRES), peer
    names = {row.name for row in rows}
    assert {
        "mem append @20",
        "mem newest-20 read @20",
        "mem append @20 [asyncio]",
        "mem newest-20 read @20 [asyncio]",
        "mem append 60 vs 5",
        "mem newest-20 read 60 vs 5",
        "sqlite newest-20 read @20",
        "sqlite newest-20 read 60 vs 5",
        "sqlite durable append, paired",
        "sqlite 3 concurrent appenders",
    } == names
    assert sum("durable" in row.name for row in rows) == 1  # ours at FULL, the peer as shipped
    assert sum(" as shipped at " in d for d in details) == 1  # the peer's own synchronous
    for row in rows:
        assert math.isfinite(row.ratio)
        assert row.ratio > 0
        assert row.low <= row.ratio <= row.high


@needs_peers
def test_a_missing_peer_is_named_and_the_others_still_run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without google-adk the ADK rows are left out, stderr says so, the rest is measured."""
    monkeypatch.setattr(_peers_load, "importable", lambda peer: peer is not _peers_load.ADK)
    rows = peers.rows(TINY, pg_dsn=UNREACHABLE)
    err = capsys.readouterr().err
    assert "google-adk" in err
    assert _peers_load.INSTALL_HINT in err
    assert not any(_peers_load.ADK.label in row.detail for row in rows)
    assert any(_peers_load.LANGGRAPH.label in row.detail for row in rows)
    assert any(_peers_load.OPENAI.label in row.detail for row in rows)


def test_peers_flag_without_any_peer_exits_2_and_says_how_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """No peer importable: nothing is measured, the message names each package and the extra."""
    monkeypatch.setattr(_peers_load, "importable", lambda peer: False)
    assert bench_main.main(["--peers"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    for package in ("google-adk", "langgraph-checkpoint", "openai-agents"):
        assert package in err
    assert "pip install -e '.[peers]'" in err


def test_a_peer_whose_package_is_not_installed_counts_as_missing() -> None:
    """Presence is read from the installed distributions, without importing anything."""
    ghost = _peers_load.Peer("ghost", "no_such_package_xyz.sessions", "no-such-package-xyz")
    assert _peers_load.missing((ghost,)) == [ghost]
    assert not _peers_load.importable(ghost)


def test_plain_bench_never_imports_a_peer() -> None:
    """``python -m bench`` without ``--peers`` runs as before: no peer module is loaded."""
    code = (
        "import sys, bench.__main__, bench.peers\n"
        "bench.peers.missing()\n"
        "hit = [m for m in sys.modules if m.split('.')[0] in ('agents', 'google', 'langgraph')]\n"
        "print(hit)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "[]"


def test_unknown_section_still_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    """The section list keeps its old contract next to the new flag."""
    assert bench_main.main(["--peers", "nope"]) == 2
    assert "unknown section" in capsys.readouterr().err


def test_spread_row_prints_median_and_min_max() -> None:
    """A ratio with spread shows as ``median (low-high)`` in the table."""
    table = render([SpreadRow("m", "d", 2.5, 1.0, True, low=1.25, high=3.0), Row("p", "q", 1.5, 2)])
    assert "2.50 (1.25-3.00)" in table
    assert "1.50" in table


@needs_peers
def test_langgraph_steps_grow_the_messages_channel_as_a_graph_does() -> None:
    """Each LangGraph append records the node's write and a checkpoint holding the whole
    conversation; the read slices the newest 20 messages from the latest checkpoint."""
    from bench import _peers_mem

    subject = _peers_mem.LangGraph(TINY)

    async def scenario() -> None:
        handle = await subject.session(30)
        saver, thread = handle.session
        latest = await saver.aget_tuple(thread)
        assert len(latest.checkpoint["channel_values"]["messages"]) == 30
        for _ in range(TINY.ops):
            await subject.append(handle)
        latest = await saver.aget_tuple(thread)
        assert len(latest.checkpoint["channel_values"]["messages"]) == 30 + TINY.ops
        parent = await saver.aget_tuple(latest.parent_config)
        assert [write[1:] for write in parent.pending_writes] == [
            ("messages", [_peers_mem.MESSAGE])
        ]  # the node's write, recorded on the checkpoint it ran from
        window = await subject.read(handle)
        assert window == [_peers_mem.MESSAGE] * _peers_mem.WINDOW

    subject.run(scenario)
