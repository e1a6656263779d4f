"""``python -m agentlooptest``: the same as the ``agentlooptest`` command."""

from __future__ import annotations

import sys

from agentlooptest._cli import main

sys.exit(main())
