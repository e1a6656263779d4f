"""The README's eval-suite example is extracted and run, so it cannot rot."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"
HEADING = "## Run an agent in an eval suite"


def example() -> str:
    """The first python code block of the README section."""
    text = README.read_text(encoding="utf-8")
    section = text.split(HEADING, 1)[1].split("\n## ", 1)[0]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match is not None, "the section has no python code block"
    return match.group(1)


def test_readme_eval_example_passes(tmp_path: Path) -> None:
    """The README example, saved as a test file, passes under pytest with warnings as errors."""
    path = tmp_path / "test_readme_example.py"
    path.write_text(example(), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-W", "error", "-p", "no:cacheprovider", str(path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout
