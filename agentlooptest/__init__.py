"""agentlooptest: the conformance contract for ``StepStore`` / ``SessionStore`` implementations.

One list of clauses (:data:`CLAUSES`), each a promise the loop relies on,
exposed three ways:

- pytest base classes :class:`StepStoreContract` / :class:`SessionStoreContract`;
- ``report = await certify(harness)``, without pytest;
- the CLI ``agentlooptest certify [module:attr]`` (also ``python -m agentlooptest``).

Needs the ``contract`` extra: ``pip install 'agentloop[contract]'``.
"""

from __future__ import annotations

from agentlooptest._deps import require

require()

import pytest  # noqa: E402 - only once the dependencies are known to be there

# Failures inside clause checks show their values when run under pytest.
pytest.register_assert_rewrite(
    "agentlooptest._steps_order",
    "agentlooptest._steps_values",
    "agentlooptest._steps_ids",
    "agentlooptest._steps_stress",
    "agentlooptest._steps_caps",
    "agentlooptest._sessions_core",
    "agentlooptest._sessions_stress",
    "agentlooptest._sessions_caps",
    "agentlooptest._sessions_life",
    "agentlooptest._stateful",
)

from agentlooptest._builtin import memory_harness  # noqa: E402
from agentlooptest._certify import certify  # noqa: E402
from agentlooptest._clause import CAPABILITIES, Clause, Violation  # noqa: E402
from agentlooptest._harness import Harness  # noqa: E402
from agentlooptest._pytest import SessionStoreContract, StepStoreContract  # noqa: E402
from agentlooptest._registry import CLAUSES  # noqa: E402
from agentlooptest._report import ClauseResult, Report  # noqa: E402
from agentlooptest._run import ClauseFailed  # noqa: E402

__all__ = [
    "CAPABILITIES",
    "CLAUSES",
    "Clause",
    "ClauseFailed",
    "ClauseResult",
    "Harness",
    "Report",
    "SessionStoreContract",
    "StepStoreContract",
    "Violation",
    "certify",
    "memory_harness",
]
