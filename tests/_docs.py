"""Code blocks of the README and the docs pages, for the tests that run them."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"

_BLOCK = re.compile(r"^```python\n(.*?)^```$", re.DOTALL | re.MULTILINE)


def page(name: str) -> str:
    """The text of ``README.md`` or of a docs page (``"howto/workers.md"``)."""
    path = ROOT / name if name == "README.md" else DOCS / name
    return path.read_text(encoding="utf-8")


def python_blocks(name: str) -> list[str]:
    """Every python code block of the page, in order."""
    return _BLOCK.findall(page(name))


def block(name: str, heading: str | None = None) -> str:
    """The first python code block of the page, or of its section under ``heading``.

    ``heading`` is a whole heading line (``"## Session leases in memory"``); the
    section runs to the next heading of the same or a higher level.
    """
    text = page(name)
    if heading is not None:
        assert heading + "\n" in text, f"{name} has no heading {heading!r}"
        level = heading.split(" ", 1)[0]
        text = text.split(heading + "\n", 1)[1]
        text = re.split(rf"^#{{1,{len(level)}}} ", text, maxsplit=1, flags=re.MULTILINE)[0]
    found = _BLOCK.findall(text)
    assert found, f"{name} {heading or ''} has no python code block"
    return found[0]


def printed(code: str) -> list[str]:
    """What the example's comments say its ``print`` calls print, in order."""
    return re.findall(r"print\(.*\)  # (.*)$", code, re.MULTILINE)
