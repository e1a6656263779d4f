"""Sphinx configuration: Markdown pages (MyST) and a reference built from the docstrings.

Build with ``sphinx-build -W -b html docs OUT`` after ``pip install -e '.[docs]'``.
"""

from __future__ import annotations

import sys
import typing
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

project = "agentloop"
author = "the agentloop maintainers"
copyright = "the agentloop maintainers"

extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.napoleon"]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build", "README.md"]
root_doc = "index"

myst_heading_anchors = 4
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"members": True}
napoleon_google_docstring = True
napoleon_numpy_docstring = False
# The same short names (StepStore, SessionStore) are both a protocol in agentloop
# and a class in agentloopmem; a signature naming one is ambiguous to Sphinx.
suppress_warnings = ["ref.python"]


def _protocol_signature(
    app: object, what: str, name: str, obj: object, options: object, signature: str, ret: str
) -> tuple[str, str] | None:
    # A protocol is never constructed: its inherited (*args, **kwargs) says nothing.
    if what == "class" and isinstance(obj, type) and typing.Protocol in obj.__mro__[1:]:
        return "", ret
    return None


def setup(app: object) -> None:
    """Register the hook that shows protocols without a signature."""
    app.connect("autodoc-process-signature", _protocol_signature)  # type: ignore[attr-defined]


html_theme = "alabaster"
html_title = "agentloop"
