"""The ``agentloop`` command, end to end in a subprocess, on SQLite and PostgreSQL."""

from __future__ import annotations

import argparse
import html.parser
import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import trio
from _sql_support import SqlTarget, drop_schema, new_schema_name

from agentloop import (
    Loop,
    ModelReply,
    ScriptedModel,
    Session,
    SupportsLabels,
    ToolCall,
    ToolContext,
    tool,
)
from agentloopsql import PostgresStore, SqliteStore
from agentloopsql._cli import CliError, StoreUrl, parse_duration, parse_store_url

ROOT = Path(__file__).resolve().parent.parent


def agentloop(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``python -m agentloop ARGS`` in ``cwd``, as a user would run it."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "agentloop", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def failed(done: subprocess.CompletedProcess[str]) -> str:
    """The one line a failed command printed; asserts exit 1, no traceback, nothing else."""
    assert done.returncode == 1, done
    assert "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("agentloop: ")
    return lines[0]


@tool
async def remember_name(ctx: ToolContext, name: str) -> str:
    """Remember the user's name."""
    ctx.data["name"] = name
    return f"remembered {name}"


async def _seed(store: SqliteStore | PostgresStore, sessions: int) -> None:
    """``sessions`` sessions a Loop ran: a tool call, its result, a response."""
    for n in range(sessions):
        session_id = f"user-{n}"
        await store.put(Session(session_id, "scripted-1", "You are terse."))
        if isinstance(store, SupportsLabels):
            await store.set_labels(session_id, {"suite": "evals", "n": str(n)})
        model = ScriptedModel(
            [
                ModelReply(
                    tool_calls=[ToolCall(f"call-{n}", "remember_name", '{"name": "Ada"}')],
                    prompt_tokens=11,
                    completion_tokens=3,
                ),
                ModelReply(f"Nice to meet you, Ada <{n}>.", prompt_tokens=5),
            ]
        )
        loop = Loop(model=model, steps=store, sessions=store, tools=[remember_name])
        await loop.run(session_id, "Hi, I'm Ada.")


def seed(url: StoreUrl, cwd: Path, sessions: int = 3) -> None:
    """Write ``sessions`` Loop-run sessions into the store ``url`` names."""

    async def main() -> None:
        if url.kind == "sqlite":
            store: SqliteStore | PostgresStore = await SqliteStore.open(str(cwd / url.target))
        else:
            store = await PostgresStore.open(url.target, schema=url.schema, pool_size=1)
        async with store:
            await _seed(store, sessions)

    trio.run(main)


@pytest.fixture
def pg_url(postgres_dsn: str) -> Iterator[str]:
    """A PostgreSQL store URL on a fresh schema (``?schema=``), dropped afterwards."""
    schema = new_schema_name()
    separator = "&" if "?" in postgres_dsn else "?"
    yield f"{postgres_dsn}{separator}schema={schema}"
    drop_schema(postgres_dsn, schema)


@pytest.fixture
def store_url(sql_target: SqlTarget, request: pytest.FixtureRequest) -> str:
    """A store URL for each SQL store: a relative SQLite path, or a PostgreSQL schema."""
    if sql_target.kind == "sqlite":
        return "sqlite:///data/agent.db"
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture
def seeded(store_url: str, tmp_path: Path) -> str:
    """The store URL, holding three sessions a Loop ran."""
    (tmp_path / "data").mkdir()
    seed(parse_store_url(store_url), tmp_path)
    return store_url


class TestStoreUrls:
    def test_sqlite_three_slashes_relative_four_absolute(self) -> None:
        """sqlite:///rel is a relative path, sqlite:////abs an absolute one."""
        assert parse_store_url("sqlite:///rel/a.db").target == "rel/a.db"
        assert parse_store_url("sqlite:////abs/a.db").target == "/abs/a.db"

    def test_schema_is_removed_from_the_dsn(self) -> None:
        """?schema= picks the schema and never reaches libpq; other parameters stay."""
        url = parse_store_url("postgresql://u@h:5/db?sslmode=disable&schema=app")
        assert (url.kind, url.target, url.schema) == (
            "postgres",
            "postgresql://u@h:5/db?sslmode=disable",
            "app",
        )
        assert parse_store_url("postgresql://u@h/db", "other").schema == "other"
        assert parse_store_url("postgresql://u@h/db?schema=a", "a").schema == "a"

    def test_password_is_hidden_when_shown(self) -> None:
        """The URL a message shows hides the password; the DSN keeps it."""
        url = parse_store_url("postgresql://u:s3cret@h/db")
        assert "s3cret" not in url.shown
        assert "s3cret" in url.target

    @pytest.mark.parametrize(
        ("url", "schema", "message"),
        [
            ("mysql://x/db", None, r"^bad store URL 'mysql://x/db': expected sqlite:///"),
            ("sqlite://a.db", None, r"^bad store URL 'sqlite://a.db'"),
            ("sqlite:///", None, r"^bad store URL 'sqlite:///'"),
            ("sqlite:///a.db?mode=ro", None, r"takes no query"),
            ("sqlite:///a.db", "s", r"^--schema applies to PostgreSQL only"),
            ("postgresql://h/db?schema=a&schema=b", None, r"schema is given 2 times"),
            ("postgresql://h/db?schema=a", "b", r"^the URL says schema='a' but --schema says"),
        ],
    )
    def test_bad_urls_are_named(self, url: str, schema: str | None, message: str) -> None:
        """Each malformed URL is refused with what is wrong."""
        with pytest.raises(CliError, match=message):
            parse_store_url(url, schema)

    def test_durations(self) -> None:
        """30d, 12h, 90s and 1h30m are seconds; other text is refused."""
        assert parse_duration("30d") == (30 * 86400, "30d")
        assert parse_duration("12h")[0] == 12 * 3600
        assert parse_duration("90s")[0] == 90
        assert parse_duration("1h30m")[0] == 5400
        for bad in ("", "30", "3x", "1h 30m", "0s", "-1d"):
            with pytest.raises(argparse.ArgumentTypeError, match=r"^must be"):
                parse_duration(bad)


class TestEntryPoints:
    def test_console_script_is_declared(self) -> None:
        """pyproject declares the agentloop console script, naming the command's main."""
        with (ROOT / "pyproject.toml").open("rb") as file:
            scripts = tomllib.load(file)["project"]["scripts"]
        assert scripts["agentloop"] == "agentloopsql._cli:main"

    def test_python_m_agentloop_help(self, tmp_path: Path) -> None:
        """python -m agentloop --help lists every command and the URL forms."""
        done = agentloop("--help", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        for command in ("sessions", "show", "export", "import", "copy", "prune", "expire"):
            assert command in done.stdout
        assert "sqlite:////absolute/path.db" in done.stdout


class TestFailures:
    def test_bad_url(self, tmp_path: Path) -> None:
        """A bad URL: exit 1, one line naming the forms."""
        line = failed(agentloop("sessions", "mysql://x/db", cwd=tmp_path))
        assert "bad store URL 'mysql://x/db'" in line

    def test_missing_sqlite_file_is_not_created(self, tmp_path: Path) -> None:
        """A reading command on a missing SQLite file fails and creates nothing."""
        line = failed(agentloop("show", "sqlite:///none.db", "s", cwd=tmp_path))
        assert "no SQLite database at 'none.db'" in line
        assert list(tmp_path.iterdir()) == []

    def test_unreachable_postgres(self, tmp_path: Path) -> None:
        """A server nobody listens on: exit 1, one line, the password hidden."""
        url = "postgresql://postgres:hidden@127.0.0.1:1/test?connect_timeout=2"
        line = failed(agentloop("sessions", url, cwd=tmp_path))
        assert "could not connect to PostgreSQL" in line
        assert "hidden" not in line

    def test_unknown_session(self, seeded: str, tmp_path: Path) -> None:
        """show and export of an unknown session: exit 1, one line naming it."""
        assert "no session 'nobody'" in failed(agentloop("show", seeded, "nobody", cwd=tmp_path))
        done = agentloop("export", seeded, "--session", "nobody", cwd=tmp_path)
        assert "no session 'nobody'" in failed(done)

    def test_bad_files(self, seeded: str, tmp_path: Path) -> None:
        """A missing, foreign or truncated file: exit 1, one line, nothing imported."""
        assert "no export file" in failed(agentloop("import", seeded, "no.jsonl", cwd=tmp_path))
        (tmp_path / "foreign.jsonl").write_text('{"hello": 1}\n')
        line = failed(agentloop("import", seeded, "foreign.jsonl", cwd=tmp_path))
        assert "not an agentloop export" in line
        done = agentloop("export", seeded, "-o", "whole.jsonl", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        lines = (tmp_path / "whole.jsonl").read_text().splitlines()
        (tmp_path / "cut.jsonl").write_text("\n".join(lines[:-1]) + "\n")
        failed(agentloop("import", "sqlite:///fresh.db", "cut.jsonl", cwd=tmp_path))
        listed = agentloop("sessions", "sqlite:///fresh.db", "--json", cwd=tmp_path)
        assert json.loads(listed.stdout) == []


class TestReading:
    def test_sessions_table(self, seeded: str, tmp_path: Path) -> None:
        """The table: id, latest status, step count, updated, newest first."""
        done = agentloop("sessions", seeded, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert lines[0].split() == ["ID", "STATUS", "STEPS", "UPDATED", "(UTC)", "LABELS"]
        assert [line.split()[:3] for line in lines[1:]] == [
            [f"user-{n}", "completed", "4"] for n in (2, 1, 0)
        ]

    def test_sessions_json_and_limit(self, seeded: str, tmp_path: Path) -> None:
        """--json is an array of the sessions' info; --limit cuts it and says more exist."""
        done = agentloop("sessions", seeded, "--json", "--limit", "2", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        infos = json.loads(done.stdout)
        assert [info["id"] for info in infos] == ["user-2", "user-1"]
        assert infos[0]["status"] == "completed"
        assert infos[0]["step_count"] == 4
        assert "raise --limit for more" in done.stderr

    def test_show_prints_the_transcript(self, seeded: str, tmp_path: Path) -> None:
        """show: settings, every step with the tool call, its result and the response."""
        done = agentloop("show", seeded, "user-1", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        out = done.stdout
        assert out.startswith("session user-1\n")
        assert "model         scripted-1" in out
        assert "    You are terse." in out
        assert '[1] #1 tool_call   remember_name({"name": "Ada"}) [call call-1]' in out
        assert "| remembered Ada" in out
        assert "| Nice to meet you, Ada <1>." in out
        assert "latest run: completed, 4 steps, 16 prompt + 3 completion tokens" in out

    def test_show_html_writes_one_page(self, seeded: str, tmp_path: Path) -> None:
        """show --html writes a self-contained page holding the escaped transcript."""
        done = agentloop("show", seeded, "user-1", "--html", "t.html", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert done.stdout == ""
        page = (tmp_path / "t.html").read_text(encoding="utf-8")
        assert "Nice to meet you, Ada &lt;1&gt;." in page
        assert "default-src 'none'" in page


def _export(url: str, cwd: Path, name: str) -> list[object]:
    done = agentloop("export", url, "-o", name, cwd=cwd)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in (cwd / name).read_text(encoding="utf-8").splitlines()]


class TestMoving:
    def test_export_to_stdout_and_one_session(self, seeded: str, tmp_path: Path) -> None:
        """export writes JSON Lines to stdout; --session picks sessions."""
        done = agentloop("export", seeded, "--session", "user-0", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        records = [json.loads(line) for line in done.stdout.splitlines()]
        assert records[0] == {"format": "agentloop-sessions", "version": 1}
        assert records[1]["session"]["id"] == "user-0"
        assert records[-1] == {"end": {"sessions": 1, "steps": 4}}
        assert "exported 1 session(s), 4 step(s)" in done.stderr

    def test_import_refuses_existing_then_replaces(self, seeded: str, tmp_path: Path) -> None:
        """import into a store holding the sessions refuses (naming --replace) until asked."""
        first = _export(seeded, tmp_path, "a.jsonl")
        line = failed(agentloop("import", seeded, "a.jsonl", cwd=tmp_path))
        assert "exist already" in line
        assert "--replace" in line
        done = agentloop("import", seeded, "a.jsonl", "--replace", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert "replaced: user-0, user-1, user-2" in done.stderr
        again = _export(seeded, tmp_path, "b.jsonl")
        assert [r for r in again if "step" in r] == [r for r in first if "step" in r]

    def test_copy_without_a_terminal_draws_no_bar(self, seeded: str, tmp_path: Path) -> None:
        """copy moves every session; stderr (not a terminal) gets only the summary."""
        done = agentloop("copy", seeded, "sqlite:////" + str(tmp_path / "copy.db"), cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert done.stderr.splitlines()[0] == "copied 3 session(s), 12 step(s)"
        assert "\r" not in done.stderr
        source = _export(seeded, tmp_path, "a.jsonl")
        copied = _export("sqlite:///copy.db", tmp_path, "b.jsonl")
        assert [r for r in copied if "step" in r] == [r for r in source if "step" in r]
        assert failed(agentloop("copy", seeded, "sqlite:///copy.db", cwd=tmp_path))


def test_export_import_export_is_identical_across_sqlite_and_postgres(
    pg_url: str, tmp_path: Path
) -> None:
    """SQLite -> export -> PostgreSQL -> export -> SQLite -> export: the same records."""
    seed(parse_store_url("sqlite:///a.db"), tmp_path)
    first = _export("sqlite:///a.db", tmp_path, "1.jsonl")
    assert agentloop("import", pg_url, "1.jsonl", cwd=tmp_path).returncode == 0
    second = _export(pg_url, tmp_path, "2.jsonl")
    assert agentloop("import", "sqlite:///b.db", "2.jsonl", cwd=tmp_path).returncode == 0
    third = _export("sqlite:///b.db", tmp_path, "3.jsonl")
    assert len(first) == 1 + 3 * 5 + 1
    assert first == second == third


def test_copy_draws_a_bar_on_a_terminal(tmp_path: Path) -> None:
    """copy with stderr on a terminal draws a progress bar there (and only there)."""
    import pty

    seed(parse_store_url("sqlite:///a.db"), tmp_path, sessions=2)
    leader, follower = pty.openpty()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "agentloop", "copy", "sqlite:///a.db", "sqlite:///b.db"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=follower,
        timeout=120,
        check=False,
    )
    os.close(follower)
    shown = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:
            break
        if not chunk:
            break
        shown += chunk
    os.close(leader)
    assert done.returncode == 0
    assert done.stdout == b""
    assert b"\r[###############---------------] 1/2 sessions, 4 steps" in shown
    assert b"2/2 sessions, 8 steps" in shown


def _chromium() -> str:
    """Debian's headless Chromium (``.ci/run`` installs it); skips outside CI when missing."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail("chromium is not installed but CI=true: .ci/run installs it")
    pytest.skip("the HTML transcript check needs chromium (apt-get install chromium)")


def test_html_transcript_in_headless_chromium(tmp_path: Path) -> None:
    """The page show --html writes, opened in headless Chromium, holds the whole transcript
    in its DOM (markup in stored text stays text) and renders to a screenshot."""
    browser = _chromium()
    seed(parse_store_url("sqlite:///a.db"), tmp_path, sessions=1)
    done = agentloop("show", "sqlite:///a.db", "user-0", "--html", "t.html", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    flags = [
        *(browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"),
        f"--user-data-dir={tmp_path / 'profile'}",
    ]
    page = (tmp_path / "t.html").as_uri()
    dom = subprocess.run(
        [*flags, "--dump-dom", page], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    parser = _Dom()
    parser.feed(dom)
    assert parser.by_id["session-id"] == "user-0"
    steps = [parser.by_id[f"step-{n}"] for n in range(4)]
    assert "user" in steps[0]
    assert "Hi, I'm Ada." in steps[0]
    assert 'remember_name({"name": "Ada"}) [call call-0]' in steps[1]
    assert "remembered Ada" in steps[2]
    assert "Nice to meet you, Ada <0>." in steps[3]
    assert "step-4" not in parser.by_id
    assert "latest run: completed, 4 steps" in parser.by_id["run-summary"]
    assert parser.tags.isdisjoint({"script", "img", "link", "iframe"})
    shot = tmp_path / "shot.png"
    subprocess.run(
        [*flags, "--window-size=1100,900", f"--screenshot={shot}", page],
        capture_output=True,
        timeout=120,
        check=True,
    )
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


class _Dom(html.parser.HTMLParser):
    """The text under each element that has an id, and every tag seen."""

    def __init__(self) -> None:
        super().__init__()
        self.by_id: dict[str, str] = {}
        self.tags: set[str] = set()
        self._open: list[tuple[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        if tag in ("meta", "br", "hr", "img", "link", "input"):
            return
        element_id = dict(attrs).get("id")
        self._open.append((tag, element_id))
        if element_id is not None:
            self.by_id[element_id] = ""

    def handle_endtag(self, tag: str) -> None:
        while self._open:
            if self._open.pop()[0] == tag:
                break

    def handle_data(self, data: str) -> None:
        for _, element_id in self._open:
            if element_id is not None:
                self.by_id[element_id] += data


def agentlooptest(*args: str, cwd: Path, dsn: str | None) -> subprocess.CompletedProcess[str]:
    """``python -m agentlooptest ARGS``, with ``AGENTLOOP_PG_DSN`` set to ``dsn`` or unset."""
    env = {k: v for k, v in os.environ.items() if k != "AGENTLOOP_PG_DSN"}
    env["PYTHONPATH"] = str(ROOT)
    if dsn is not None:
        env["AGENTLOOP_PG_DSN"] = dsn
    return subprocess.run(
        [sys.executable, "-m", "agentlooptest", "certify", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


class TestCertifyOutput:
    def test_names_the_skipped_postgres_store(self, tmp_path: Path) -> None:
        """Without AGENTLOOP_PG_DSN, certify says it left PostgreSQL out, and why."""
        done = agentlooptest("-k", "step.order.oldest-first", cwd=tmp_path, dsn=None)
        assert done.returncode == 0, done.stdout + done.stderr
        assert (
            "skipped postgres: AGENTLOOP_PG_DSN is not set (set it to a PostgreSQL DSN"
            in done.stdout
        )

    def test_skips_nothing_with_a_dsn(self, postgres_dsn: str, tmp_path: Path) -> None:
        """With AGENTLOOP_PG_DSN, PostgreSQL is certified and nothing is said skipped."""
        done = agentlooptest("-k", "step.order.oldest-first", cwd=tmp_path, dsn=postgres_dsn)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "agentlooptest certify postgres" in done.stdout
        assert "skipped postgres" not in done.stdout

    def test_asyncio_postgres_cancellations_print_no_pool_warnings(
        self, postgres_dsn: str, tmp_path: Path
    ) -> None:
        """The cancellation clauses on PostgreSQL under asyncio (statements cancelled on the
        server, their connections closed) print nothing but certify's own progress line."""
        done = agentlooptest(
            "agentloopsql.testing:postgres",
            *("--backend", "asyncio", "-k", "*.cancel.*"),
            cwd=tmp_path,
            dsn=postgres_dsn,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert done.stderr.splitlines() == [
            "certifying agentloopsql.testing:postgres under asyncio ..."
        ]


def test_pool_still_warns_about_a_connection_lost_by_accident(
    postgres_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Only connections the store closed on purpose lose the pool's warning; another
    closed connection given back is still reported."""
    import psycopg_pool

    from agentloopsql._pg_exec import PgExecutor, Reconnects

    with psycopg_pool.ConnectionPool(postgres_dsn, min_size=2, max_size=2, open=True) as pool:
        PgExecutor(pool, None, None, Reconnects(0.1))  # type: ignore[arg-type]  # installs the filter; runs nothing
        pool.wait()
        lost, closed = pool.getconn(), pool.getconn()
        with caplog.at_level("WARNING", logger="psycopg.pool"):
            lost.close()
            pool.putconn(lost)
            _deliberately_close(closed)
            pool.putconn(closed)
    warned = [r.getMessage() for r in caplog.records if r.name == "psycopg.pool"]
    assert len(warned) == 1
    assert warned[0].startswith("discarding closed connection")
    assert hex(id(lost))[2:] in warned[0].lower()


def _deliberately_close(conn: object) -> None:
    """What the executor does to a connection whose statement it cancelled."""
    from agentloopsql import _pg_exec

    _pg_exec._DISCARDS.close(conn)  # type: ignore[arg-type]


class _PlainStore:
    """A store with the two protocols and list_sessions only: no prune, no expire."""

    def __init__(self) -> None:
        import agentloopmem

        self.inner = agentloopmem.MemoryStore()

    async def append(self, step: object) -> None:
        await self.inner.append(step)  # type: ignore[arg-type]

    async def last_n(self, session_id: str, n: int) -> list[object]:
        return list(await self.inner.last_n(session_id, n))

    async def get(self, session_id: str) -> Session:
        return await self.inner.get(session_id)

    async def exists(self, session_id: str) -> bool:
        return await self.inner.exists(session_id)

    async def update_data(self, session_id: str, snapshot: str | None) -> None:
        await self.inner.update_data(session_id, snapshot)

    async def finalize(self, session_id: str, summary: object) -> None:
        await self.inner.finalize(session_id, summary)  # type: ignore[arg-type]

    async def list_sessions(self, *, limit: int = 100) -> list[object]:
        return list(await self.inner.list_sessions(limit=limit))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["prune", "sqlite:///x.db", "--keep-last", "5"],
            "cannot prune steps (it has no prune_steps)",
        ),
        (["expire", "sqlite:///x.db", "--idle-for", "30d"], "cannot expire sessions (it has no"),
        (["sessions", "sqlite:///x.db", "--label", "k=v"], "cannot filter sessions by label"),
    ],
)
def test_a_store_lacking_a_capability_is_named(
    argv: list[str],
    message: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """prune, expire and a label filter on a store without the capability: exit 1, one line."""
    from contextlib import asynccontextmanager

    from agentloopsql import _cli

    @asynccontextmanager
    async def plain(url: StoreUrl, *, create: bool = False) -> AsyncIterator[object]:
        yield _PlainStore()

    monkeypatch.setattr(_cli, "opened", plain)
    with pytest.raises(SystemExit) as exited:
        _cli.main(argv)
    assert exited.value.code == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("agentloop: ")
    assert message in err


def test_schema_option_is_the_url_parameter(pg_url: str, tmp_path: Path) -> None:
    """--schema NAME reads the same store as ?schema=NAME; libpq never sees the parameter."""
    seed(parse_store_url(pg_url), tmp_path, sessions=1)
    dsn, _, schema = pg_url.rpartition("schema=")
    by_query = agentloop("sessions", pg_url, "--json", cwd=tmp_path)
    by_option = agentloop("sessions", dsn.rstrip("?&"), "--schema", schema, "--json", cwd=tmp_path)
    assert by_query.returncode == by_option.returncode == 0, by_query.stderr + by_option.stderr
    assert [i["id"] for i in json.loads(by_option.stdout)] == ["user-0"]
    assert by_option.stdout == by_query.stdout


class TestRetention:
    def test_prune_keeps_the_newest_steps(self, seeded: str, tmp_path: Path) -> None:
        """prune --keep-last 2 leaves each session its two newest steps, in order."""
        done = agentloop("prune", seeded, "--keep-last", "2", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert "pruned 6 step(s) from 3 of 3 session(s), keeping the last 2 of each" in done.stderr
        shown = agentloop("show", seeded, "user-1", cwd=tmp_path).stdout
        assert "steps (2)" in shown
        assert "[0] #2 tool_result remember_name [call call-1]" in shown
        assert "[1] #3 response" in shown
        done = agentloop("prune", seeded, "--keep-last", "1", "--session", "user-0", cwd=tmp_path)
        assert "pruned 1 step(s) from 1 of 1 session(s)" in done.stderr
        line = failed(
            agentloop("prune", seeded, "--keep-last", "1", "--session", "x", cwd=tmp_path)
        )
        assert "no session 'x'" in line

    def test_expire_deletes_only_idle_sessions(self, seeded: str, tmp_path: Path) -> None:
        """expire deletes the sessions idle for longer than asked, prints their ids."""
        done = agentloop("expire", seeded, "--idle-for", "30d", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert done.stdout == ""
        assert "expired 0 session(s) idle for over 30d" in done.stderr
        time.sleep(1.5)  # the sessions' last writes are now over a second old
        done = agentloop("expire", seeded, "--idle-for", "1s", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert sorted(done.stdout.split()) == ["user-0", "user-1", "user-2"]
        listed = agentloop("sessions", seeded, "--json", cwd=tmp_path)
        assert json.loads(listed.stdout) == []

    def test_sessions_filtered_by_label(self, seeded: str, tmp_path: Path) -> None:
        """--label keeps the sessions carrying every pair given; the table shows labels."""
        done = agentloop(
            "sessions", seeded, "--label", "n=1", "--label", "suite=evals", cwd=tmp_path
        )
        assert done.returncode == 0, done.stderr
        rows = done.stdout.splitlines()[1:]
        assert [row.split() for row in rows] == [
            ["user-1", "completed", "4", *rows[0].split()[3:5], "n=1,suite=evals"]
        ]
