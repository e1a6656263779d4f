"""The README's runnable examples run and print what the README says."""

from __future__ import annotations

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _run_readme_example(name: str) -> list[str]:
    """Check examples/<name> is in the README (below its docstring); run it; its output lines."""
    source = (ROOT / "examples" / name).read_text()
    body = source.split('"""', 2)[2].lstrip("\n")
    assert body in (ROOT / "README.md").read_text()
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / name)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return out.splitlines()


def test_quickstart_matches_readme() -> None:
    """examples/quickstart.py is the README's quick start, and it prints what its comments say."""
    assert _run_readme_example("quickstart.py") == [
        "['hello!', \"what's next?\"]",
        '{"todo": ["write tests"]}',
    ]


def test_asyncio_app_matches_readme() -> None:
    """examples/asyncio_app.py is the README's asyncio example, and it prints what it says."""
    assert _run_readme_example("asyncio_app.py") == ["['Hello!', 'Hello!']", "['Hi', 'Hello!']"]
