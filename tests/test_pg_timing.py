"""PostgresStore's own timing: wait_timeout and reconnect_interval (checked, and used)."""

from __future__ import annotations

import pytest
import trio
from _pg_cluster import cluster
from _pg_private import can_run_private_server

from agentloop import RunStep, StepType, StoreUnavailableError
from agentloopsql import PostgresStore


def step(index: int) -> RunStep:
    return RunStep(session_id="s", step_index=index, step_type=StepType.user, content="x")


class TestOptions:
    @pytest.mark.parametrize(
        ("field", "value", "error", "pattern"),
        [
            ("wait_timeout", 0, ValueError, r"^wait_timeout must be"),
            ("wait_timeout", "1", TypeError, r"^wait_timeout must be"),
            ("reconnect_interval", 0, ValueError, r"^reconnect_interval must be"),
            ("reconnect_interval", None, TypeError, r"^reconnect_interval must be"),
        ],
    )
    async def test_bad_timing_is_refused_before_connecting(
        self, field: str, value: object, error: type[Exception], pattern: str
    ) -> None:
        """A bad wait_timeout or reconnect_interval is refused, naming it, before any connect."""
        with pytest.raises(error, match=pattern):
            await PostgresStore.open("host=127.0.0.1 port=1", **{field: value})  # type: ignore[arg-type]


class TestReconnect:
    async def test_restart_is_bridged_by_the_store_not_the_pool(self, postgres_dsn: str) -> None:
        """After the server restarts, the store's own retries reconnect: the pool never saw
        a failed attempt (so its 1 s backoff never ran), and the next call succeeds."""
        if not can_run_private_server():
            pytest.fail("this test needs initdb and a postgres user")
        with cluster(synchronous="") as made:
            primary = made.primary
            async with await PostgresStore.open(
                primary.dsn, pool_size=2, pool_timeout=2, reconnect_interval=0.05
            ) as store:
                await store.append(step(0))
                await trio.to_thread.run_sync(primary.crash)
                with pytest.raises(StoreUnavailableError):
                    await store.append(step(1))  # lost, and no server to retry on
                await trio.to_thread.run_sync(primary.start)
                await store.append(step(2))
                assert [s.step_index for s in await store.last_n("s", 5)][-1] == 2
                assert store._pool.get_stats().get("connections_errors", 0) == 0
