"""``python -m agentloop``: the ``agentloop`` command.

The command opens the SQL stores, so it lives in ``agentloopsql`` (``agentloop``
itself depends on no sibling package). This module only hands over to it; no
module imports this one, so the edge makes no cycle. ``docs/architecture.md``
and ``tests/test_house_rules.py`` name it as one of the two places where
``agentloop`` reaches a sibling.
"""

from __future__ import annotations

from agentloopsql._cli import main

if __name__ == "__main__":
    main()
