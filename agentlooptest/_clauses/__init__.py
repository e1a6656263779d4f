"""The clause modules, one per capability, and the one table that orders them: ``FAMILIES``.

**Where a clause lives.** A clause id is ``<protocol>.<family>[.<name>]``; its
family (the id's first two parts) decides its module, and :data:`FAMILIES`
maps every family to it, in the order the clauses run. The rule behind the
table:

- an optional capability's families live in the module named after the
  capability: ``step.all.*`` in ``step_all.py``, ``session.put.*`` in
  ``put.py``, ``session.final.*`` in ``final.py``, ``session.list.*`` in
  ``list_sessions.py``, ``session.revision.*`` in ``revisions.py``,
  ``session.combined.*`` in ``combined.py``; ``session.lease.*``,
  ``session.lease-clock.*``, ``session.lease-calls.*`` and ``session.fenced.*`` in
  ``lease.py``;
  ``step.append-many.*`` and ``session.get-many.*`` (the batches) in
  ``batches.py``; the session lifecycle's in ``paging.py`` (``session.paging.*``),
  ``labels.py``, ``expire.py``, ``fork.py``, ``transfer.py`` (``session.transfer.*``,
  capability ``restore_session``) and ``prune.py`` (``step.prune.*`` and the other
  ranged step read, ``step.steps-after.*``);
- what both protocols have lives in one module for both: ``*.closed``
  (``aclose``) in ``closed.py``, ``*.delete.*`` (``delete_session``) in
  ``delete_session.py``, ``*.durable`` (``reopen``) in ``durable.py``,
  ``*.model-based`` in ``model_based.py`` (``session.lease.model-based`` is
  a ``session.lease`` clause, so it is in ``lease.py``);
- the base protocol: ``*.concurrency.*`` and ``*.cancel.*`` (calls in flight)
  in ``concurrency.py``; every other ``step.*`` family in ``steps.py``, every
  other ``session.*`` family in ``sessions.py``.

A clause with a capability inside a base family stays with its family
(``step.cancel.delete`` is in ``concurrency.py``, ``step.append-many.durable``
in ``batches.py``). Each module's docstring lists its families;
``agentlooptest clauses --where`` prints every clause's ``file:line``, and
``tests/test_contract_layout.py`` holds every clause to the table.

**Adding a clause**: declare it with ``@clause`` in its family's module. A new
family is one entry in :data:`FAMILIES`, where it should run; a new
capability's module is also imported here. That is all: the table orders the
clauses and pytest rewrites the asserts of the whole package.

``_machines.py`` is not a clause module: the hypothesis state machines of
the ``*.model-based`` clauses, imported when they run.
"""

from __future__ import annotations

from types import ModuleType

from agentlooptest._clause import Clause, registered
from agentlooptest._clauses import (
    batches,
    closed,
    combined,
    concurrency,
    delete_session,
    durable,
    expire,
    final,
    fork,
    labels,
    lease,
    list_sessions,
    model_based,
    paging,
    prune,
    put,
    revisions,
    sessions,
    step_all,
    steps,
    transfer,
)

FAMILIES: dict[str, ModuleType] = {
    "step.order": steps,
    "step.window": steps,
    "step.roundtrip": steps,
    "step.ids": steps,
    "step.n": steps,
    "step.unknown-session-empty": steps,
    "step.isolation": steps,
    "step.no-alias": steps,
    "step.bad-input": steps,
    "step.fresh-store": steps,
    "step.concurrency": concurrency,
    "step.cancel": concurrency,
    "step.closed": closed,
    "step.all": step_all,
    "step.delete": delete_session,
    "step.durable": durable,
    "step.append-many": batches,
    "step.prune": prune,
    "step.steps-after": prune,
    "step.model-based": model_based,
    "session.get": sessions,
    "session.write": sessions,
    "session.data": sessions,
    "session.finalize": sessions,
    "session.isolation": sessions,
    "session.ids": sessions,
    "session.bad-input": sessions,
    "session.fresh-store": sessions,
    "session.concurrency": concurrency,
    "session.cancel": concurrency,
    "session.closed": closed,
    "session.put": put,
    "session.final": final,
    "session.list": list_sessions,
    "session.delete": delete_session,
    "session.durable": durable,
    "session.get-many": batches,
    "session.revision": revisions,
    "session.combined": combined,
    "session.lease": lease,
    "session.lease-clock": lease,
    "session.lease-calls": lease,
    "session.fenced": lease,
    "session.paging": paging,
    "session.labels": labels,
    "session.expire": expire,
    "session.fork": fork,
    "session.transfer": transfer,
    "session.model-based": model_based,
}
"""Every clause family, in the order the families run, and the module that holds it.

Step families first, then session families; within each, the base protocol
before the optional capabilities, and the model-based clause last.
"""


def family(clause_id: str) -> str:
    """A clause id's first two parts: ``step.order`` for ``step.order.oldest-first``."""
    return ".".join(clause_id.split(".")[:2])


_RANK = {name: rank for rank, name in enumerate(FAMILIES)}

CLAUSES: tuple[Clause, ...] = tuple(sorted(registered(), key=lambda c: _RANK[family(c.id)]))
"""Every clause, family by family in :data:`FAMILIES` order, each family's clauses in the
order its module declares them."""
