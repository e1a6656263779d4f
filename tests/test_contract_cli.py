"""The CLI front door: table, level, verdict, exit status, reports and one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from xml.etree import ElementTree

import pytest

from agentlooptest import CLAUSES
from agentlooptest._cli import builtin_targets, main

_BROKEN_TARGET = textwrap.dedent(
    '''
    """A newest-first step store, to certify from the command line."""
    import trio
    import agentloopmem
    from agentlooptest import Harness


    class NewestFirst(agentloopmem.StepStore):
        async def last_n(self, session_id, n):
            return (await super().last_n(session_id, n))[::-1]


    async def new():
        return NewestFirst()


    harness = Harness(new_step_store=new)


    def make():
        return harness
    '''
)


@pytest.fixture
def broken_target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A module on sys.path whose `harness` certifies a newest-first step store."""
    (tmp_path / "cli_broken_store.py").write_text(_BROKEN_TARGET, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    return "cli_broken_store"


def test_builtin_targets_follow_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No target means agentloopmem and SQLite, plus PostgreSQL when AGENTLOOP_PG_DSN is set."""
    monkeypatch.delenv("AGENTLOOP_PG_DSN", raising=False)
    assert list(builtin_targets()) == ["agentloopmem", "agentloopmem-combined", "sqlite"]
    monkeypatch.setenv("AGENTLOOP_PG_DSN", "postgresql://somewhere/db")
    assert builtin_targets()["postgres"] == "agentloopsql.testing:postgres"


def test_builtin_stores_certified(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No command and no target certifies agentloopmem and SQLite: every clause, exit 0."""
    monkeypatch.delenv("AGENTLOOP_PG_DSN", raising=False)
    assert main([]) == 0
    out = capsys.readouterr().out
    assert "agentlooptest certify agentloopmem\n" in out
    assert "agentlooptest certify agentloopmem-combined\n" in out
    assert "agentlooptest certify sqlite\n" in out
    assert out.count("\nCERTIFIED (") == 3
    for c in CLAUSES:
        assert c.id in out
    assert "conformance level: step: base + all, append_many, delete_session, aclose" in out
    assert "\nCERTIFIED (" in out
    assert "FAIL" not in out


def test_options_without_command_mean_certify(capsys: pytest.CaptureFixture[str]) -> None:
    """`agentlooptest -k X` runs `certify`, and a partial run never claims certification."""
    assert main(["-k", "step.order"]) == 0
    last = capsys.readouterr().out.rstrip().splitlines()[-1]
    assert last.startswith("PASSED the clauses matching 'step.order' (a partial run)")


def test_pattern_selects_clauses(capsys: pytest.CaptureFixture[str]) -> None:
    """-k keeps only the clauses whose id contains the pattern (or matches a glob)."""
    assert main(["certify", "-k", "step.order"]) == 0
    rows = [line.split()[0] for line in capsys.readouterr().out.splitlines() if "  pass" in line]
    assert rows
    assert all(r.startswith("step.order.") for r in rows)
    assert main(["certify", "-k", "session.*.latest*"]) == 0
    out = capsys.readouterr().out
    assert "session.data.latest-wins" in out
    assert "session.final.latest" in out
    assert "step.order" not in out


def test_unknown_pattern_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    """A -k that selects nothing is a usage error, not a vacuous pass."""
    assert main(["certify", "-k", "no-such-clause"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_failure_exits_1_with_reason(
    broken_target: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A broken store: FAIL in the table, the message in full, NOT CERTIFIED, exit 1."""
    assert main(["certify", f"{broken_target}:harness", "-k", "step.order"]) == 1
    out = capsys.readouterr().out
    assert "step.order.oldest-first" in out
    assert "FAIL" in out
    assert "why:      the loop replays last_n straight into the model's context" in out
    assert "conformance level: step: not conformant" in out
    assert out.rstrip().splitlines()[-1].startswith("NOT CERTIFIED")


def test_callable_target(broken_target: str, capsys: pytest.CaptureFixture[str]) -> None:
    """module:attr may name a zero-argument callable returning the Harness."""
    assert main(["certify", f"{broken_target}:make", "-k", "step.window.newest-n"]) == 1
    assert "step.window.newest-n" in capsys.readouterr().out


@pytest.mark.parametrize(
    "target",
    [
        "no_colon",
        "no_such_module_xyz:harness",
        "agentlooptest:nothing_here",
        "agentlooptest:CLAUSES",
    ],
)
def test_bad_target_is_one_line(target: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A target that is not a Harness gets one line on stderr and exit 2, no traceback."""
    assert main(["certify", target]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("agentlooptest: ")
    assert captured.err.count("\n") == 1
    assert "Traceback" not in captured.err


def test_json_and_junit_reports(
    tmp_path: Path, broken_target: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """--json and --junit-xml write the same results the table shows."""
    out_json, out_xml = tmp_path / "r.json", tmp_path / "r.xml"
    code = main(
        [
            "certify",
            f"{broken_target}:harness",
            "-k",
            "step.[ou]*",
            "--json",
            str(out_json),
            "--junit-xml",
            str(out_xml),
        ]
    )
    assert code == 1
    doc = json.loads(out_json.read_text(encoding="utf-8"))
    assert doc["ok"] is False
    [target] = doc["targets"]
    outcomes = {r["id"]: r["outcome"] for r in target["results"]}
    assert outcomes["step.order.oldest-first"] == "failed"
    assert outcomes["step.unknown-session-empty"] == "passed"
    suites = ElementTree.parse(out_xml).getroot()
    [suite] = list(suites)
    assert suite.get("failures") == str(sum(o == "failed" for o in outcomes.values()))
    failed = [c.get("name") for c in suite if c.find("failure") is not None]
    assert "step.order.oldest-first" in failed
    capsys.readouterr()


def test_verbose_prints_each_clause(capsys: pytest.CaptureFixture[str]) -> None:
    """--verbose prints one line per clause as it finishes."""
    assert main(["certify", "-k", "step.window", "--verbose"]) == 0
    err = capsys.readouterr().err
    assert "pass    step.window.newest-n" in err


def test_python_dash_m(tmp_path: Path) -> None:
    """`python -m agentlooptest` runs the same CLI in a fresh process."""
    run = subprocess.run(
        [sys.executable, "-m", "agentlooptest", "certify", "-k", "session.get"],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "session.get.unknown-creates-nothing" in run.stdout
    assert "certifying agentloopmem" in run.stderr


def test_clauses_listing(capsys: pytest.CaptureFixture[str]) -> None:
    """`agentlooptest clauses` lists every clause id once."""
    assert main(["clauses"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == [c.id for c in CLAUSES]


@pytest.mark.parametrize("value", ["-1", "0", "nan", "inf", "soon"])
def test_clause_timeout_must_be_finite_and_positive(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bad --clause-timeout is a usage error (exit 2) naming the option, not a store failure."""
    with pytest.raises(SystemExit) as exited:
        main(["certify", "-k", "step.order.oldest-first", "--clause-timeout", value])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "argument --clause-timeout: must be a" in err
    assert "certify" not in capsys.readouterr().out


@pytest.mark.parametrize("option", ["--json", "--junit-xml"])
@pytest.mark.parametrize("where", ["missing-dir/report", "."])
def test_unwritable_report_path_fails_up_front(
    option: str, where: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A report path that cannot be written: one line, exit 2, before any clause runs."""
    assert main(["certify", "-k", "step.order.oldest-first", option, str(tmp_path / where)]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith(f"agentlooptest: cannot write {option} ")
    assert captured.err.count("\n") == 1
    assert captured.out == ""
    assert list(tmp_path.iterdir()) == []


def test_report_path_check_leaves_no_file_behind(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Checking a new report path up front does not leave an empty file when the run fails."""
    out = tmp_path / "r.json"
    assert main(["certify", "no_such_module_xyz:h", "--json", str(out)]) == 2
    assert not out.exists()
    capsys.readouterr()


def test_junit_xml_with_control_characters_parses() -> None:
    """Messages quoting NUL, escape and lone-surrogate characters still give well-formed XML."""
    from agentlooptest import ClauseResult, Report

    message = "[step.x] title\n  got:      'nul:\x00 esc:\x1b bell:\x07 half:\ud800'"
    report = Report(
        results=(
            ClauseResult("step.x", "title", "step", None, "failed", message),
            ClauseResult("step.y", "t", "step", None, "skipped", "why\x0c"),
        ),
        level="step: not conformant",
        duration=0.1,
    )
    root = ElementTree.fromstring(report.to_junit_xml("store\x00name"))
    failure = root.find("testsuite/testcase/failure")
    assert failure is not None
    assert failure.text is not None
    assert "nul:\\x00 esc:\\x1b bell:\\x07 half:\\ud800" in failure.text


_EXITS = "raise SystemExit(3)\n"
_MULTILINE = 'raise ValueError("first line\\nsecond line\\n\\nthird")\n'


@pytest.mark.parametrize(
    ("source", "shown"),
    [
        (_EXITS, "SystemExit: 3"),
        (_MULTILINE, "ValueError: first line / second line / third"),
    ],
)
def test_target_import_failures_are_one_line(
    source: str,
    shown: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A target module raising SystemExit or a multi-line error on import: one line, exit 2."""
    (tmp_path / "cli_bad_import.py").write_text(source, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["certify", "cli_bad_import:harness"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("agentlooptest: cannot import 'cli_bad_import'")
    assert err.rstrip("\n").endswith(shown)
    assert err.count("\n") == 1


def test_json_is_one_shape_with_report_to_dict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--json: a version, and per target exactly Report.to_dict() plus its target name."""
    import trio

    from agentlooptest import certify, memory_harness

    out = tmp_path / "r.json"
    assert (
        main(["certify", "agentlooptest:memory_harness", "-k", "step.window", "--json", str(out)])
        == 0
    )
    doc = json.loads(out.read_text(encoding="utf-8"))
    assert doc["version"] == 1
    [entry] = doc["targets"]
    assert entry.pop("target") == "agentlooptest:memory_harness"
    report = trio.run(lambda: certify(memory_harness(), pattern="step.window")).to_dict()
    assert set(entry) == set(report)
    assert entry["version"] == report["version"] == 1
    assert [r["id"] for r in entry["results"]] == [r["id"] for r in report["results"]]
    assert set(entry["results"][0]) == {
        "id",
        "title",
        "protocol",
        "capability",
        "outcome",
        "message",
        "duration",
        "expected_failure",
    }
    capsys.readouterr()
