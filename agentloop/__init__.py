"""agentloop: the persistence seam of an agent step loop.

Value types, the ``StepStore`` / ``SessionStore`` protocols with their optional
capabilities, the errors stores raise, and the step loop (``Loop``) with its
model and tool seams.
"""

from __future__ import annotations

from agentloop._config import LoopConfig, RunResult
from agentloop._errors import (
    LeaseLostError,
    RevisionConflictError,
    SessionBusyError,
    StoreClosedError,
    StoreError,
    StoreUnavailableError,
)
from agentloop._events import (
    Compacted,
    Event,
    EventCollector,
    Finalized,
    LoopWarning,
    RunStarted,
    StepAppended,
)
from agentloop._lease import Lease, SupportsLease
from agentloop._loop import Loop
from agentloop._model import (
    Compaction,
    Compactor,
    Message,
    Model,
    ModelReply,
    ModelRequest,
    ScriptedModel,
    ToolCall,
    ToolSpec,
)
from agentloop._protocols import (
    SessionStore,
    StepStore,
    SupportsAclose,
    SupportsAll,
    SupportsAppendMany,
    SupportsDeleteSession,
    SupportsFinal,
    SupportsGetMany,
    SupportsListSessions,
    SupportsPut,
    SupportsRevisions,
    append_all,
    get_all,
)
from agentloop._tools import Tool, ToolContext, tool
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
    "Compacted",
    "Compaction",
    "CompactionCheckpoint",
    "Compactor",
    "Event",
    "EventCollector",
    "FinalizeSummary",
    "Finalized",
    "Lease",
    "LeaseLostError",
    "Loop",
    "LoopConfig",
    "LoopWarning",
    "Message",
    "Model",
    "ModelReply",
    "ModelRequest",
    "RevisionConflictError",
    "RunResult",
    "RunStarted",
    "RunStatus",
    "RunStep",
    "ScriptedModel",
    "Session",
    "SessionBusyError",
    "SessionInfo",
    "SessionStore",
    "StepAppended",
    "StepStore",
    "StepType",
    "StoreClosedError",
    "StoreError",
    "StoreUnavailableError",
    "SupportsAclose",
    "SupportsAll",
    "SupportsAppendMany",
    "SupportsDeleteSession",
    "SupportsFinal",
    "SupportsGetMany",
    "SupportsLease",
    "SupportsListSessions",
    "SupportsPut",
    "SupportsRevisions",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolSpec",
    "append_all",
    "get_all",
    "tool",
    "validate_json",
    "validate_n",
    "validate_session_id",
]
