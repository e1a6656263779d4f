"""The durable-stores page's example runs and prints what its comments say."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

from _docs import block


def example() -> str:
    """The first python code block of docs/stores.md (opening a SqliteStore)."""
    return block("stores.md")


def test_durable_example_runs(tmp_path: Path) -> None:
    """Run in a fresh directory: each print matches its comment, and the file is left behind."""
    code = example()
    expected = [
        ast.literal_eval(comment) if comment.startswith("[") else comment
        for comment in re.findall(r"print\(.*\)  # (.*)$", code, re.MULTILINE)
    ]
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    got = [
        ast.literal_eval(line) if line.startswith("[") else line
        for line in done.stdout.splitlines()
    ]
    assert got == expected
    assert (tmp_path / "agents.db").exists()
