"""PostgreSQL test fixtures: a cutting TCP proxy, a silent server, a private server.

Not a test module. Everything listens on 127.0.0.1 only.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from glob import glob


class CuttingProxy:
    """Forwards TCP connections to ``target``; :meth:`cut_clients` drops only the client side.

    The server side of a cut connection stays open, so the server keeps running
    whatever statement it was executing, unaware that its client is gone. Once
    ``refusing`` is set, every new connection is dropped as it arrives.
    """

    refusing = False

    def __init__(self, target: tuple[str, int]) -> None:
        self._target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._clients: list[socket.socket] = []
        self._servers: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True, name="test proxy").start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self.refusing:
                client.close()
                continue
            server = socket.create_connection(self._target)
            with self._lock:
                self._clients.append(client)
                self._servers.append(server)
            for src, dst in ((client, server), (server, client)):
                threading.Thread(target=_pump, args=(src, dst), daemon=True).start()

    def cut_clients(self) -> None:
        """Close the client side of every connection made so far."""
        with self._lock:
            clients, self._clients = self._clients, []
        for sock in clients:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def close(self) -> None:
        """Stop listening and close every socket, both sides."""
        self._listener.close()
        self.cut_clients()
        with self._lock:
            servers, self._servers = self._servers, []
        for sock in servers:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


@contextlib.contextmanager
def cutting_proxy(dsn: str) -> Iterator[CuttingProxy]:
    """A :class:`CuttingProxy` in front of the server ``dsn`` names, closed after the block."""
    import psycopg  # as in the rest of this module: only PostgreSQL tests need it

    info = psycopg.conninfo.conninfo_to_dict(dsn)
    cutter = CuttingProxy((str(info.get("host", "127.0.0.1")), int(str(info.get("port", 5432)))))
    try:
        yield cutter
    finally:
        cutter.close()


def _pump(src: socket.socket, dst: socket.socket) -> None:
    """Copy ``src`` to ``dst`` until ``src`` ends; never closes the other direction's socket."""
    with contextlib.suppress(OSError):
        while data := src.recv(65536):
            dst.sendall(data)


@contextlib.contextmanager
def silent_server() -> Iterator[int]:
    """A port on 127.0.0.1 that accepts TCP connections and never says anything."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True, name="silent server").start()
    try:
        yield listener.getsockname()[1]
    finally:
        listener.close()
        for sock in accepted:
            sock.close()


def free_port() -> int:
    """A port on 127.0.0.1 nothing listens on (right now)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def _pg_bin(name: str) -> str | None:
    found = sorted(glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return found[-1] if found else None


def can_run_private_server() -> bool:
    """Whether initdb and pg_ctl exist and a ``postgres`` user can run them."""
    import pwd

    if _pg_bin("initdb") is None or _pg_bin("postgres") is None:
        return False
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        return False
    return os.geteuid() == 0 or pwd.getpwuid(os.geteuid()).pw_name == "postgres"


def _as_postgres(args: list[str]) -> list[str]:
    return args if os.geteuid() != 0 else ["runuser", "-u", "postgres", "--", *args]


@contextlib.contextmanager
def private_server(*, max_connections: int, password: str) -> Iterator[int]:
    """A throwaway PostgreSQL on a free 127.0.0.1 port, with password (scram) auth.

    The superuser is ``postgres`` with ``password``. Stopped (by its pid) and
    deleted on exit.
    """
    import pwd

    home = tempfile.mkdtemp(prefix="agentloop-pg-")
    entry = pwd.getpwnam("postgres")
    os.chown(home, entry.pw_uid, entry.pw_gid)
    data = os.path.join(home, "data")
    pwfile = os.path.join(home, "pw")
    with open(pwfile, "w") as handle:
        handle.write(password)
    os.chown(pwfile, entry.pw_uid, entry.pw_gid)
    initdb, postgres = _pg_bin("initdb"), _pg_bin("postgres")
    assert initdb is not None
    assert postgres is not None
    subprocess.run(
        _as_postgres(
            [initdb, "-D", data, "-U", "postgres", "--auth=scram-sha-256", f"--pwfile={pwfile}"]
        ),
        check=True,
        capture_output=True,
    )
    port = free_port()
    options = [
        "-D",
        data,
        "-p",
        str(port),
        "-c",
        "listen_addresses=127.0.0.1",
        "-c",
        f"unix_socket_directories={home}",
        "-c",
        f"max_connections={max_connections}",
        "-c",
        "superuser_reserved_connections=0",
        "-c",
        "fsync=off",
    ]
    server = subprocess.Popen(
        _as_postgres([postgres, *options]), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        _wait_ready(port, server, password)
        yield port
    finally:
        _stop(server, data)
        shutil.rmtree(home, ignore_errors=True)


def _wait_ready(port: int, server: subprocess.Popen[bytes], password: str) -> None:
    """Wait until the server accepts a login: listening is not enough while it starts up."""
    import psycopg

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"private PostgreSQL exited with {server.returncode}")
        try:
            psycopg.connect(
                host="127.0.0.1", port=port, user="postgres", password=password, dbname="postgres"
            ).close()
            return
        except psycopg.OperationalError:
            time.sleep(0.05)
    raise RuntimeError("private PostgreSQL did not accept a login within 30 s")


def _stop(server: subprocess.Popen[bytes], data: str) -> None:
    """Stop the postmaster by its pid (fast shutdown), then wait for it."""
    import signal

    pid = _postmaster_pid(data) or server.pid
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGINT)
    try:
        server.wait(timeout=20)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGQUIT)
        server.wait(timeout=10)


def _postmaster_pid(data: str) -> int | None:
    try:
        with open(os.path.join(data, "postmaster.pid")) as handle:
            return int(handle.readline())
    except (OSError, ValueError):
        return None
