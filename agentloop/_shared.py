"""The one private module of ``agentloop`` its sibling packages may import.

``agentloopmem``, ``agentloopsql`` and ``agentlooptest`` use public
``agentloop`` names plus these helpers, and nothing else of ``agentloop``'s
private modules, so that every rule below has one home for every store:

- argument checks that stores make exactly as the value types do
  (:func:`preview` for messages, :func:`check_steps`, :func:`check_session_ids`,
  :func:`check_idle_for`,
  :func:`check_revision`, :func:`check_seconds`, :func:`validate_owner`,
  :data:`INT32_MAX`);
- :func:`trusted_builder`, to build a value from fields checked already;
- how a store judges a presented lease against its latest grant
  (:func:`check_granted`, :func:`check_fence`, :func:`check_renewable`);
- the store-call checkpoint convention under trio and asyncio
  (:func:`call_starts`, :func:`call_ends`, :func:`on_trio`).
"""

from agentloop._backend import call_ends, call_starts, on_trio
from agentloop._lease import check_fence, check_granted, check_renewable
from agentloop._types import check_steps
from agentloop._validate import (
    INT32_MAX,
    check_idle_for,
    check_revision,
    check_seconds,
    check_session_ids,
    preview,
    trusted_builder,
    validate_owner,
)

__all__ = [
    "INT32_MAX",
    "call_ends",
    "call_starts",
    "check_fence",
    "check_granted",
    "check_idle_for",
    "check_renewable",
    "check_revision",
    "check_seconds",
    "check_session_ids",
    "check_steps",
    "on_trio",
    "preview",
    "trusted_builder",
    "validate_owner",
]
