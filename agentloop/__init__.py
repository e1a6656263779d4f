"""agentloop: the persistence seam of an agent step loop.

Value types, the ``StepStore`` / ``SessionStore`` protocols with their optional
capabilities, and the errors stores raise.
"""

from __future__ import annotations

from agentloop._errors import StoreClosedError, StoreError, StoreUnavailableError
from agentloop._protocols import (
    SessionStore,
    StepStore,
    SupportsAclose,
    SupportsAll,
    SupportsDeleteSession,
    SupportsFinal,
    SupportsListSessions,
    SupportsPut,
)
from agentloop._types import (
    CompactionCheckpoint,
    FinalizeSummary,
    RunStatus,
    RunStep,
    Session,
    SessionInfo,
    StepType,
)
from agentloop._validate import validate_json, validate_n, validate_session_id

__all__ = [
    "CompactionCheckpoint",
    "FinalizeSummary",
    "RunStatus",
    "RunStep",
    "Session",
    "SessionInfo",
    "SessionStore",
    "StepStore",
    "StepType",
    "StoreClosedError",
    "StoreError",
    "StoreUnavailableError",
    "SupportsAclose",
    "SupportsAll",
    "SupportsDeleteSession",
    "SupportsFinal",
    "SupportsListSessions",
    "SupportsPut",
    "validate_json",
    "validate_n",
    "validate_session_id",
]
