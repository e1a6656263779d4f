"""Print each runtime requirement pinned to its lowest allowed version, one per line.

CI installs these in a second venv and certifies the built-in stores there, so
both ends of every declared range are tested (the newest through the main venv).
"""

import re
import tomllib
from pathlib import Path

project = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())[
    "project"
]
extras = project["optional-dependencies"]
for requirement in [*project["dependencies"], *extras["contract"], *extras["postgres"]]:
    match = re.fullmatch(r"([A-Za-z0-9_.\-]+(?:\[[^\]]+\])?)\s*>=\s*([^,\s]+).*", requirement)
    if match is None:
        raise SystemExit(f"{requirement!r} has no lower bound (>=)")
    print(f"{match.group(1)}=={match.group(2)}")
