"""The clause modules, one per clause family, and the one tuple that lists them.

**The rule.** A clause id is ``<protocol>.<family>[.<name>]``; its check lives
in ``_clauses/<protocol>_<family>.py`` (``-`` becomes ``_``). So
``step.order.oldest-first`` is in ``step_order.py``, ``session.concurrency.*``
is all in ``session_concurrency.py``, and a one-part id such as
``step.durable`` is its own family, ``step_durable.py``. A family both
protocols have (``durable``, ``cancel``, ``ids``, ...) is two modules, one per
protocol: each protocol's checks drive a different store.
``tests/test_contract_layout.py`` holds every clause to this rule.

**Adding a family**: write ``_clauses/<protocol>_<family>.py`` with its
``@clause`` checks and add its name to :data:`FAMILIES` where it should run.
That one entry imports it, orders its clauses and has pytest rewrite its
asserts.

Modules whose names start with ``_`` are helpers, not families:
``_shared`` holds what several families use, ``_machines`` the hypothesis state
machines of the ``*.model-based`` clauses.
"""

from __future__ import annotations

FAMILIES: tuple[str, ...] = (
    "step_order",
    "step_window",
    "step_roundtrip",
    "step_ids",
    "step_n",
    "step_unknown_session_empty",
    "step_isolation",
    "step_no_alias",
    "step_bad_input",
    "step_fresh_store",
    "step_concurrency",
    "step_cancel",
    "step_closed",
    "step_all",
    "step_delete",
    "step_durable",
    "step_append_many",
    "step_model_based",
    "session_get",
    "session_write",
    "session_data",
    "session_finalize",
    "session_isolation",
    "session_ids",
    "session_bad_input",
    "session_fresh_store",
    "session_concurrency",
    "session_cancel",
    "session_closed",
    "session_put",
    "session_final",
    "session_list",
    "session_delete",
    "session_durable",
    "session_get_many",
    "session_revision",
    "session_combined",
    "session_lease",
    "session_lease_calls",
    "session_fenced",
    "session_model_based",
)
"""Every clause module, in the order their clauses run and are listed.

Step families first, then session families; within each, the base protocol
before the optional capabilities, and the model-based clause last.
"""
