"""A private PostgreSQL primary and streaming standby for the failover tests (not a test module).

Built with ``initdb`` and ``pg_basebackup -R`` as the ``postgres`` user, on free
127.0.0.1 ports, in a temporary directory; :func:`cluster` stops every server
it started (immediately: nothing of them is kept) and removes the directory.
Trust authentication on 127.0.0.1 only.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator

from _pg_private import _as_postgres, _pg_bin, free_port


class Node:
    """One server of the cluster: its data directory and port."""

    def __init__(self, home: str, name: str) -> None:
        self.name = name
        self.data = os.path.join(home, name)
        self.port = free_port()
        self.home = home
        self.running = False

    @property
    def dsn(self) -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres"

    def start(self) -> None:
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={self.home}"
        )
        _run("pg_ctl", "start", "-w", "-t", "30", "-D", self.data, "-o", options, "-l", self.log)
        self.running = True

    def crash(self) -> None:
        """Stop at once, as a crash would (``pg_ctl stop -m immediate``)."""
        _run("pg_ctl", "stop", "-w", "-m", "immediate", "-D", self.data)
        self.running = False

    def promote(self) -> None:
        _run("pg_ctl", "promote", "-w", "-t", "30", "-D", self.data)

    def sql(self, statement: str) -> list[tuple[object, ...]]:
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True, connect_timeout=5) as conn:
            cur = conn.execute(statement)  # type: ignore[call-overload]
            return cur.fetchall() if cur.description else []

    def require_standby(self, name: str) -> None:
        """Make every commit wait for the synchronous standby ``name`` (``''``: none), and
        wait until it does (the reload reaches the server's processes a little later)."""
        self.sql(f"ALTER SYSTEM SET synchronous_standby_names = '{name}'")
        self.sql("SELECT pg_reload_conf()")
        deadline = time.monotonic() + 10
        while self._commit_waits() != bool(name):
            assert time.monotonic() < deadline, "synchronous_standby_names did not take effect"
            time.sleep(0.05)

    def _commit_waits(self) -> bool:
        """Whether a commit now waits for a standby (a probe cancelled after 0.3 s)."""
        import threading

        import psycopg

        cut: list[object] = []
        with psycopg.connect(self.dsn, autocommit=True, connect_timeout=5) as conn:
            conn.add_notice_handler(cut.append)
            timer = threading.Timer(0.3, getattr(conn, "cancel_safe", conn.cancel))
            timer.start()
            try:
                conn.execute(  # a write: its commit waits for the standbys, if any
                    "CREATE TABLE IF NOT EXISTS probe (x int); INSERT INTO probe VALUES (1)"
                )
            except psycopg.errors.QueryCanceled:
                pass
            finally:
                timer.cancel()
        return bool(cut)

    @property
    def log(self) -> str:
        return os.path.join(self.home, f"{self.name}.log")


class Cluster:
    """A primary and (after :meth:`add_standby`) one standby named ``standby1``."""

    def __init__(self, home: str) -> None:
        self.home = home
        self.primary = Node(home, "primary")
        self.standby = Node(home, "standby")

    def add_standby(self) -> None:
        """Copy the primary with ``pg_basebackup -R`` and start it streaming as ``standby1``."""
        _run(
            "pg_basebackup",
            "-h",
            "127.0.0.1",
            "-p",
            str(self.primary.port),
            "-U",
            "postgres",
            "-D",
            self.standby.data,
            "-R",
            "-X",
            "stream",
        )
        with open(os.path.join(self.standby.data, "postgresql.auto.conf"), "a") as conf:
            conf.write(
                f"primary_conninfo = 'host=127.0.0.1 port={self.primary.port} user=postgres "
                "application_name=standby1'\n"
                # Once promoted it has no standby of its own: it must not wait for one.
                "synchronous_standby_names = ''\n"
            )
        self.standby.start()
        deadline = time.monotonic() + 30
        while not self.primary.sql(
            "SELECT 1 FROM pg_stat_replication WHERE application_name = 'standby1' "
            "AND state = 'streaming'"
        ):
            assert time.monotonic() < deadline, "the standby did not start streaming in 30 s"
            time.sleep(0.05)

    @property
    def dsn(self) -> str:
        """Both servers, the primary first, for a read-write session only."""
        return (
            f"postgresql://postgres@127.0.0.1:{self.primary.port},127.0.0.1:{self.standby.port}"
            "/postgres?target_session_attrs=read-write&connect_timeout=2"
        )


def _run(tool: str, *args: str) -> None:
    path = _pg_bin(tool)
    assert path is not None, f"{tool} is not installed"
    subprocess.run(_as_postgres([path, *args]), check=True, capture_output=True, timeout=60)


@contextlib.contextmanager
def cluster(*, synchronous: str) -> Iterator[Cluster]:
    """A running private primary whose ``synchronous_standby_names`` is ``synchronous``.

    Every server is stopped and the directory removed on exit.
    """
    home = tempfile.mkdtemp(prefix="agentloop-failover-")
    entry = pwd.getpwnam("postgres")
    os.chown(home, entry.pw_uid, entry.pw_gid)
    made = Cluster(home)
    try:
        _run("initdb", "-D", made.primary.data, "-U", "postgres", "--auth=trust")
        with open(os.path.join(made.primary.data, "postgresql.conf"), "a") as conf:
            conf.write(
                "wal_level = replica\nmax_wal_senders = 5\nfsync = off\n"
                f"synchronous_standby_names = '{synchronous}'\n"
            )
        made.primary.start()
        yield made
    finally:
        for node in (made.standby, made.primary):
            if node.running:
                with contextlib.suppress(Exception):
                    node.crash()
        shutil.rmtree(home, ignore_errors=True)
