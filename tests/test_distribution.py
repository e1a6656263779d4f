"""The built wheel installs under the project's own distribution name and works in a fresh venv."""

from __future__ import annotations

import re
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


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project's wheel, built from this checkout."""
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(ROOT)],
        check=True,
        timeout=300,
    )
    [built] = out.glob("*.whl")
    return built


class TestWheel:
    def test_wheel_is_named_for_the_distribution(self, wheel: Path) -> None:
        """The wheel file carries the new name (normalized as wheels are)."""
        assert wheel.name.startswith("agentloop_seam-")

    def test_fresh_venv_imports_the_four_packages_and_runs_the_cli(
        self, wheel: Path, tmp_path: Path
    ) -> None:
        """pip install of the wheel in an empty venv: the four packages import from it, CLI runs."""
        env_dir = tmp_path / "venv"
        venv.EnvBuilder(with_pip=True).create(env_dir)
        python = env_dir / "bin" / "python"
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", f"{wheel}[contract,postgres]"],
            check=True,
            timeout=600,
        )
        script = (
            "import importlib, importlib.metadata as md\n"
            f"for name in {PACKAGES!r}:\n"
            "    module = importlib.import_module(name)\n"
            f"    assert module.__file__.startswith({str(env_dir)!r}), module.__file__\n"
            f"print(md.distribution({NAME!r}).metadata['Name'])\n"
        )
        done = subprocess.run(
            [str(python), "-c", script],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == NAME
        cli = subprocess.run(
            [str(env_dir / "bin" / "agentlooptest"), "--help"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert cli.returncode == 0, cli.stderr
        assert "certify" in cli.stdout
