"""The runnable examples of the README and the docs run and print what they say."""

from __future__ import annotations

import pathlib
import subprocess
import sys

from _docs import python_blocks

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _run_readme_example(name: str, page: str = "README.md") -> list[str]:
    """Check examples/<name> is a code block of the page (below its docstring); run it."""
    source = (ROOT / "examples" / name).read_text()
    body = source.split('"""', 2)[2].lstrip("\n")
    assert body in python_blocks(page)
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
    """examples/asyncio_app.py is the asyncio how-to's example, and it prints what it says."""
    assert _run_readme_example("asyncio_app.py", "howto/asyncio.md") == [
        "['Hello!', 'Hello!']",
        "['Hi', 'Hello!']",
    ]
