"""SqliteStore.open: foreign, garbage and damaged files are refused untouched; errors say why."""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import re
import shutil
import sqlite3
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import trio

from agentloop import RunStep, StoreError, StoreUnavailableError
from agentloopsql import SqliteStore
from agentloopsql._sqlite_schema import MIGRATIONS, SCHEMA_VERSION, add_functions

if TYPE_CHECKING:
    from collections.abc import Iterator

ROOT = Path(__file__).resolve().parent.parent


def snapshot(path: Path) -> tuple[str, bool, bool]:
    """The file's bytes (hashed) and whether its -wal and -shm files exist."""
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return digest, Path(f"{path}-wal").exists(), Path(f"{path}-shm").exists()


def make_db(path: Path, *statements: str, user_version: int | None = None) -> Path:
    """A SQLite file (rollback journal, as most applications leave theirs) from ``statements``."""
    conn = sqlite3.connect(path, isolation_level=None)
    add_functions(conn)  # the function the checksum migration calls
    for statement in statements:
        conn.execute(statement)
    if user_version is not None:
        conn.execute(f"PRAGMA user_version = {user_version:d}")
    conn.close()
    return path


def our_ddl(*, replace: tuple[str, str] = ("", ""), skip: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The current schema's statements, one edited (``replace``), some left out (``skip``)."""
    statements = [
        s for version in MIGRATIONS for s in version if not any(part in s for part in skip)
    ]
    return tuple(s.replace(*replace) for s in statements)


async def make_store(path: Path, steps: int = 1, content: str = "kept") -> Path:
    async with await SqliteStore.open(path) as store:
        for index in range(steps):
            await store.append(RunStep("s", index, "tool_result", content=content))
    return path


async def refused(path: Path, pattern: str, **kwargs: bool) -> StoreError:
    """Open ``path``, expecting a plain StoreError matching ``pattern``, the file untouched."""
    before = snapshot(path)
    with pytest.raises(StoreError, match=pattern) as info:
        await SqliteStore.open(path, **kwargs)
    assert not isinstance(info.value, StoreUnavailableError)
    assert str(info.value).endswith("; nothing was changed")
    assert snapshot(path) == before
    return info.value


class TestForeignFiles:
    @pytest.mark.parametrize("journal", ["DELETE", "WAL"])
    @pytest.mark.parametrize("version", [0, 1])
    async def test_foreign_steps_table_refused_untouched(
        self, tmp_path: Path, version: int, journal: str
    ) -> None:
        """Another application's `Steps` table is refused untouched, whatever user_version says."""
        path = make_db(
            tmp_path / "app.db",
            f"PRAGMA journal_mode = {journal}",
            "CREATE TABLE Steps (id INTEGER PRIMARY KEY, body TEXT)",
            "INSERT INTO steps (body) VALUES ('theirs')",
            user_version=version,
        )
        shape = (
            r"it has no agentloopsql schema \(user_version 0\) but already holds 'steps'"
            if version == 0
            else r"table 'steps' has columns \['id', 'body'\], expected \['seq', "
        )
        await refused(path, rf"^refusing SQLite database '.*app\.db': {shape}")

    async def test_view_named_like_our_table(self, tmp_path: Path) -> None:
        """A view where our table belongs is refused, naming it."""
        path = make_db(
            tmp_path / "v.db",
            *our_ddl(
                skip=("CREATE TABLE steps", "steps_by_session", "TABLE steps ADD", "UPDATE steps")
            ),
            user_version=SCHEMA_VERSION,
        )
        make_db(path, "CREATE VIEW steps AS SELECT 1 AS seq")
        await refused(
            path,
            rf"'steps' is a view, expected a table \(agentloopsql schema version {SCHEMA_VERSION}",
        )

    async def test_column_of_another_type(self, tmp_path: Path) -> None:
        """One column's constraints differ from what its schema version creates: refused."""
        ddl = our_ddl(replace=("step_total INTEGER NOT NULL DEFAULT 0", "step_total INTEGER"))
        path = make_db(tmp_path / "c.db", *ddl, user_version=SCHEMA_VERSION)
        await refused(
            path,
            r"column sessions\.step_total is 'INTEGER', expected 'INTEGER NOT NULL DEFAULT 0'",
        )

    async def test_missing_index(self, tmp_path: Path) -> None:
        """Our tables without our index are refused (the migration would not add it)."""
        path = make_db(
            tmp_path / "i.db", *our_ddl(skip=("steps_by_session",)), user_version=SCHEMA_VERSION
        )
        await refused(path, r"table 'steps' lacks the index 'steps_by_session'")

    async def test_extra_unique_index(self, tmp_path: Path) -> None:
        """A unique index someone added to our table could refuse our writes: refused."""
        path = await make_store(tmp_path / "u.db")
        make_db(path, "CREATE UNIQUE INDEX one_per_index ON steps (step_index)")
        await refused(path, r"table 'steps' has a unique index 'one_per_index'")

    async def test_unrelated_tables_and_plain_indexes_are_accepted(self, tmp_path: Path) -> None:
        """Other tables, views and a non-unique index on ours are kept and do not matter."""
        path = make_db(
            tmp_path / "shared.db",
            "CREATE TABLE notes (body TEXT)",
            "INSERT INTO notes VALUES ('theirs')",
        )
        await make_store(path)
        make_db(
            path, "CREATE INDEX steps_by_time ON steps (created_us)", "CREATE VIEW n AS SELECT 1"
        )
        async with await SqliteStore.open(path) as store:
            await store.append(RunStep("s", 1, "tool_result", content="more"))
            assert [s.content for s in await store.all("s")] == ["kept", "more"]
        with sqlite3.connect(path) as conn:
            assert conn.execute("SELECT body FROM notes").fetchall() == [("theirs",)]

    async def test_not_a_database(self, tmp_path: Path) -> None:
        """A file that is not SQLite is refused as such (a StoreError, not 'retry later')."""
        path = tmp_path / "junk.db"
        path.write_bytes(b"this is not a database" * 100)
        await refused(
            path, r"^cannot open SQLite database '.*junk\.db': it is not a SQLite database"
        )


class TestUserVersion:
    @pytest.mark.parametrize(
        ("version", "pattern"),
        [
            (0, r"it has no agentloopsql schema \(user_version 0\) but already holds .*'sessions'"),
            (-1, r"its user_version is -1, which agentloopsql never writes"),
            (
                SCHEMA_VERSION + 1,
                r"the database schema is version \d+ .*newer than this agentloopsql",
            ),
        ],
    )
    async def test_garbage_version_refused_untouched(
        self, tmp_path: Path, version: int, pattern: str
    ) -> None:
        """Our own file with a reset, negative or newer user_version is refused untouched."""
        path = await make_store(tmp_path / "ours.db")
        make_db(path, user_version=version)
        await refused(path, rf"^refusing SQLite database '.*ours\.db': {pattern}")

    async def test_new_file_is_migrated(self, tmp_path: Path) -> None:
        """A new (or empty) file gets our tables, WAL and the current version."""
        path = tmp_path / "new.db"
        path.touch()
        await make_store(path)
        with sqlite3.connect(path) as conn:
            assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
            assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def damage(path: Path) -> None:
    """Overwrite the header of a page deep inside the steps table's b-tree."""
    with sqlite3.connect(path) as conn:
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
    conn.close()
    with path.open("r+b") as file:
        file.seek(page_size * (pages // 2))
        file.write(b"\xee" * 64)


class TestVerify:
    async def test_damaged_page_refused_with_verify(self, tmp_path: Path) -> None:
        """verify=True finds a damaged page that a plain open does not read; file untouched."""
        path = await make_store(tmp_path / "d.db", steps=200, content="x" * 500)
        damage(path)
        await refused(
            path,
            r"^refusing SQLite database '.*d\.db': it is damaged: PRAGMA quick_check found 'Page ",
            verify=True,
        )
        # What verify buys: without it the damage stays unseen until a read reaches it.
        async with await SqliteStore.open(path):
            pass

    async def test_verify_on_a_healthy_file(self, tmp_path: Path) -> None:
        """verify=True opens a healthy file with its contents (and a new one)."""
        path = await make_store(tmp_path / "h.db", steps=50)
        async with await SqliteStore.open(path, verify=True) as store:
            assert len(await store.all("s")) == 50
        async with await SqliteStore.open(tmp_path / "new.db", verify=True) as store:
            assert await store.all("s") == []

    async def test_verify_must_be_bool(self, tmp_path: Path) -> None:
        """verify is checked like every argument."""
        with pytest.raises(TypeError, match=r"^verify must be a bool, got 1$"):
            await SqliteStore.open(tmp_path / "x.db", verify=1)  # type: ignore[arg-type]
        assert not (tmp_path / "x.db").exists()


class TestPathErrors:
    async def test_missing_directory(self, tmp_path: Path) -> None:
        """A missing directory is named; nothing is created."""
        path = tmp_path / "missing" / "x.db"
        with pytest.raises(StoreError, match=r"': directory '.*/missing' does not exist$") as info:
            await SqliteStore.open(path)
        assert str(info.value).startswith(f"cannot open SQLite database {str(path)!r}")
        assert not isinstance(info.value, StoreUnavailableError)
        assert isinstance(info.value.__cause__, sqlite3.Error)
        assert not path.parent.exists()

    async def test_path_is_a_directory(self, tmp_path: Path) -> None:
        """A directory given as the path is named as such."""
        with pytest.raises(StoreError, match=r"^cannot open SQLite .*': it is a directory$"):
            await SqliteStore.open(tmp_path)

    async def test_parent_is_a_file(self, tmp_path: Path) -> None:
        """A file where the directory should be is named."""
        (tmp_path / "plain").write_text("")
        with pytest.raises(StoreError, match=r"': .*/plain' is not a directory$"):
            await SqliteStore.open(tmp_path / "plain" / "x.db")

    async def test_locked_file_is_unavailable(self, tmp_path: Path) -> None:
        """A file another connection holds locked past busy_timeout: StoreUnavailableError."""
        path = make_db(tmp_path / "l.db")
        holder = sqlite3.connect(path, isolation_level=None)
        try:
            holder.execute("BEGIN EXCLUSIVE")
            with pytest.raises(StoreUnavailableError, match=r"^cannot open SQLite .*now: .*locked"):
                await SqliteStore.open(path, busy_timeout=0.05)
        finally:
            holder.close()


# Runs the opens as an unprivileged user: root may read and write anything.
_CHILD = """
import json, os, pwd, sys
import trio
from agentloopsql import SqliteStore
if os.geteuid() == 0:
    nobody = pwd.getpwnam("nobody")
    os.setgroups([])
    os.setgid(nobody.pw_gid)
    os.setuid(nobody.pw_uid)
async def attempt(path):
    try:
        store = await SqliteStore.open(path, busy_timeout=0.5)
    except Exception as exc:
        return [type(exc).__name__, str(exc)]
    await store.aclose()
    return ["opened", ""]
async def main():
    print(json.dumps({path: await attempt(path) for path in sys.argv[1:]}))
trio.run(main)
"""


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A temporary directory every user may enter (pytest's tmp_path is private to root)."""
    base = Path(tempfile.mkdtemp(prefix="agentloop-perm-"))
    base.chmod(0o755)
    yield base
    for directory in base.iterdir():
        directory.chmod(0o755)
    shutil.rmtree(base)


class TestPermissions:
    async def test_permission_errors_name_the_reason(self, shared_dir: Path) -> None:
        """No read or write permission on the file or its directory: each says which."""
        if os.geteuid() == 0:
            try:
                pwd.getpwnam("nobody")
            except KeyError:
                pytest.skip("running as root and there is no user 'nobody' to drop to")
        cases = {
            "rw/unreadable.db": (0o777, 0o000, r"no permission to read the file"),
            "rw/readonly.db": (0o777, 0o444, r"no permission to write the file"),
            "ro/writable.db": (
                0o555,
                0o666,
                r"no permission to write directory '.*/ro', which SQLite needs for the file's "
                r"-wal and -shm files",
            ),
            "ro/new.db": (0o555, None, r"no permission to create the file in directory '.*/ro'"),
            "closed/x.db": (0o000, 0o666, r"no permission to enter directory '.*/closed'"),
        }
        for name, (_, file_mode, _) in cases.items():
            path = shared_dir / name
            path.parent.mkdir(exist_ok=True)
            if file_mode is not None:
                await make_store(path)
                path.chmod(file_mode)
        for name, (dir_mode, _, _) in cases.items():
            (shared_dir / name).parent.chmod(dir_mode)
        paths = [str(shared_dir / name) for name in cases]
        child = await trio.run_process(
            [sys.executable, "-c", _CHILD, *paths],
            capture_stdout=True,
            capture_stderr=True,
            cwd="/",
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            check=False,
        )
        assert child.returncode == 0, child.stderr.decode()
        results = json.loads(child.stdout)
        for name, (_, _, reason) in cases.items():
            kind, message = results[str(shared_dir / name)]
            assert kind == "StoreError", (name, kind, message)
            assert message.startswith(f"cannot open SQLite database {str(shared_dir / name)!r}: ")
            assert re.search(f"{reason}$", message), (name, message)
        assert files_left(shared_dir) == ["readonly.db", "unreadable.db", "writable.db", "x.db"]


def files_left(base: Path) -> list[str]:
    """Every file under ``base`` (its subdirectories made enterable again)."""
    for directory in base.iterdir():
        directory.chmod(0o755)
    return sorted(path.name for path in base.rglob("*") if path.is_file())
