"""The README's runnable examples run and print what the README says."""

from __future__ import annotations

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_quickstart_matches_readme() -> None:
    """examples/quickstart.py is the README's quick start, and it prints what its comments say."""
    source = (ROOT / "examples" / "quickstart.py").read_text()
    body = source.split('"""', 2)[2].lstrip("\n")
    assert body in (ROOT / "README.md").read_text()
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "quickstart.py")],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert out.splitlines() == ["['hello!', \"what's next?\"]", '{"todo": ["write tests"]}']


def test_asyncio_app_matches_readme() -> None:
    """examples/asyncio_app.py is the README's asyncio example, and it prints what it says."""
    source = (ROOT / "examples" / "asyncio_app.py").read_text()
    body = source.split('"""', 2)[2].lstrip("\n")
    assert body in (ROOT / "README.md").read_text()
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "asyncio_app.py")],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert out.splitlines() == ["['Hello!', 'Hello!']", "['Hi', 'Hello!']"]
