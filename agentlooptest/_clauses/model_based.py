"""``step.model-based``, ``session.model-based``: random programs of store calls match a model.

Each runs one hypothesis state machine (``_machines.py``) against a fresh
store per program. That module is imported only when a clause runs:
hypothesis is a heavy import, and its trio plugin loads pytest. The lease
machine's clause, ``session.lease.model-based``, is a ``session.lease`` clause:
it lives in ``lease.py``.
"""

from __future__ import annotations

from agentlooptest._clause import clause
from agentlooptest._harness import Harness


@clause(
    "step.model-based",
    "random append / last_n / all / delete_session programs match a model",
    why=(
        "the loop's history is whatever these calls return over a session's life; any "
        "divergence from the model is history the model is shown wrongly"
    ),
)
async def _step_model(h: Harness) -> None:
    from agentlooptest._clauses._machines import StepMachine, run_machine  # late: see above

    await run_machine(StepMachine, h)


@clause(
    "session.model-based",
    "random get / exists / update_data / finalize / put / final / list programs match a model",
    why=(
        "working memory and run status are whatever these calls return over a session's "
        "life; any divergence from the model is state the next run gets wrong"
    ),
)
async def _session_model(h: Harness) -> None:
    from agentlooptest._clauses._machines import SessionMachine, run_machine  # late: see above

    await run_machine(SessionMachine, h)
