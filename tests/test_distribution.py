"""The built wheel installs under the project's own distribution name and works in a fresh venv."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NAME = "agentloop-seam"
PACKAGES = ("agentloop", "agentloopmem", "agentlooptest", "agentloopsql")


def _normalized(name: str) -> str:
    """The name with case and punctuation ignored, as PyPI compares near-duplicates."""
    return re.sub(r"[-_.]", "", name).lower()


def _project() -> dict[str, object]:
    with (ROOT / "pyproject.toml").open("rb") as file:
        project: dict[str, object] = tomllib.load(file)["project"]
    return project


class TestDistributionName:
    def test_name_is_ours_not_the_unrelated_agentloop(self) -> None:
        """The distribution is agentloop-seam, never a spelling of PyPI's unrelated 'agentloop'."""
        name = _project()["name"]
        assert name == NAME
        assert _normalized(str(name)) != "agentloop"

    def test_extras_never_name_the_unrelated_project(self) -> None:
        """Every self-reference in the extras uses the new name (the old one resolves elsewhere)."""
        extras = _project()["optional-dependencies"]
        assert isinstance(extras, dict)
        for extra, requirements in extras.items():
            for requirement in requirements:
                head = re.split(r"[\[<>=!~ ;]", requirement, maxsplit=1)[0]
                assert _normalized(head) != "agentloop", (extra, requirement)

    def test_docs_install_lines_use_the_new_name(self) -> None:
        """No install line in the README or docs installs 'agentloop' itself."""
        texts = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
        texts += sorted(ROOT.glob("agentloop*/**/*.py"))
        pattern = re.compile(r"pip install [^\n`]*?'?agentloop(?![-\w])")
        for path in texts:
            found = pattern.findall(path.read_text(encoding="utf-8"))
            assert not found, f"{path.relative_to(ROOT)}: {found}"

    def test_readme_says_how_to_remove_the_other_package(self) -> None:
        """Anyone who installed PyPI's 'agentloop' is told to uninstall it first."""
        assert "pip uninstall agentloop" in (ROOT / "README.md").read_text(encoding="utf-8")


# Built from a copy: an in-tree build leaves an egg-info in the checkout, whose pytest11
# entry point would make later runs of this suite assertion-rewrite the packages.
_JUNK = (".git", ".venv*", "build", "*.egg-info", "__pycache__", ".*_cache", "docs")
_ENV = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}


def _run(*command: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        env=_ENV,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project's wheel, built from a copy of this checkout."""
    source = tmp_path_factory.mktemp("source") / "tree"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(*_JUNK))
    out = tmp_path_factory.mktemp("wheel")
    built = _run(
        sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", out, source, cwd=out
    )
    assert built.returncode == 0, built.stderr
    [found] = out.glob("*.whl")
    return found


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv holding only the wheel (with its contract and postgres extras)."""
    env_dir = tmp_path_factory.mktemp("venv")
    venv.EnvBuilder(with_pip=True).create(env_dir)
    done = _run(
        env_dir / "bin" / "python",
        "-m",
        "pip",
        "install",
        "-q",
        f"{wheel}[contract,postgres]",
        cwd=env_dir,
    )
    assert done.returncode == 0, done.stderr
    return env_dir


_LOOP_RUN = """
import sys, trio
from agentloop import Loop, ScriptedModel
from agentloopsql import SqliteStore

async def main():
    async with await SqliteStore.open(sys.argv[1]) as store:
        loop = Loop(model=ScriptedModel(["Hello from the wheel."]), steps=store, sessions=store)
        await loop.run("user-1", "hi")

trio.run(main)
"""

_EVAL = """
import trio
from agentloop import Loop, ScriptedModel

def test_eval(agentloop_steps, agentloop_sessions, agentloop_config):
    loop = Loop(model=ScriptedModel(["Hello from the wheel"]), steps=agentloop_steps,
                sessions=agentloop_sessions, config=agentloop_config)
    assert trio.run(loop.run, "user-1", "hi").text == "Goodbye"
"""


class TestWheel:
    def test_wheel_is_named_for_the_distribution(self, wheel: Path) -> None:
        """The wheel file carries the new name (normalized as wheels are)."""
        assert wheel.name.startswith("agentloop_seam-")

    def test_the_four_packages_import_from_the_venv(self, installed: Path, tmp_path: Path) -> None:
        """In the fresh venv the four packages import from it, under the distribution's name."""
        script = (
            "import importlib, importlib.metadata as md\n"
            f"for name in {PACKAGES!r}:\n"
            "    module = importlib.import_module(name)\n"
            f"    assert module.__file__.startswith({str(installed)!r}), module.__file__\n"
            f"print(md.distribution({NAME!r}).metadata['Name'])\n"
        )
        done = _run(installed / "bin" / "python", "-c", script, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == NAME

    def test_both_commands_run(self, installed: Path, tmp_path: Path) -> None:
        """agentlooptest --help and agentloop --help work from the installed wheel."""
        contract = _run(installed / "bin" / "agentlooptest", "--help", cwd=tmp_path)
        assert contract.returncode == 0, contract.stderr
        assert "certify" in contract.stdout
        command = _run(installed / "bin" / "agentloop", "--help", cwd=tmp_path)
        assert command.returncode == 0, command.stderr
        assert all(verb in command.stdout for verb in ("sessions", "show", "export", "import"))

    def test_show_reads_what_a_loop_run_wrote(self, installed: Path, tmp_path: Path) -> None:
        """A Loop run writes a SQLite file; agentloop show prints its transcript."""
        ran = _run(installed / "bin" / "python", "-c", _LOOP_RUN, "agents.db", cwd=tmp_path)
        assert ran.returncode == 0, ran.stderr
        shown = _run(
            installed / "bin" / "agentloop", "show", "sqlite:///agents.db", "user-1", cwd=tmp_path
        )
        assert shown.returncode == 0, shown.stderr
        assert "Hello from the wheel." in shown.stdout
        assert "hi" in shown.stdout

    def test_the_plugin_is_registered(self, installed: Path, tmp_path: Path) -> None:
        """No -p needed: a failing eval using the fixtures shows its session's transcript."""
        (tmp_path / "test_eval.py").write_text(_EVAL, encoding="utf-8")
        done = _run(
            installed / "bin" / "python", "-m", "pytest", "-p", "no:cacheprovider", cwd=tmp_path
        )
        assert done.returncode == 1, done.stdout + done.stderr
        assert "agentloop transcript: user-1" in done.stdout
        assert "Hello from the wheel" in done.stdout
