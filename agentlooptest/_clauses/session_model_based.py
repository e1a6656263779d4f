"""``session.model-based``: random programs of session-store calls match a model.

The state machine lives in :mod:`agentlooptest._clauses._machines`, imported
only when the clause runs: hypothesis is a heavy import, and its trio plugin
loads pytest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentlooptest._clause import clause

if TYPE_CHECKING:
    from agentlooptest._harness import Harness


@clause(
    "session.model-based",
    "random get / exists / update_data / finalize / put / final / list programs match a model",
    why=(
        "working memory and run status are whatever these calls return over a session's "
        "life; any divergence from the model is state the next run gets wrong"
    ),
)
async def _session_model(h: Harness) -> None:
    from agentlooptest._clauses import _machines, _program  # late: see the module docstring

    await _program.run_machine_thread(_machines.run_machine, _machines.SessionMachine, h)
