"""agentloop: the persistence seam of an agent step loop.

Value types, the ``StepStore`` / ``SessionStore`` protocols with their optional
capabilities, the errors stores raise, the step loop (``Loop``) with its
model and tool seams, moving sessions between stores (export, import, copy), and
a session's transcript as a person reads it (text or one HTML page).
"""

from __future__ import annotations

from agentloop._backend import run_whole
from agentloop._config import LoopConfig, RunResult
from agentloop._errors import (
    LeaseLostError,
    RevisionConflictError,
    SessionBusyError,
    SessionExistsError,
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
    SupportsExpire,
    SupportsFinal,
    SupportsFork,
    SupportsGetMany,
    SupportsLabels,
    SupportsListSessions,
    SupportsPaging,
    SupportsPrune,
    SupportsPut,
    SupportsRestore,
    SupportsRevisions,
    SupportsStepsAfter,
    append_all,
    get_all,
)
from agentloop._tools import Tool, ToolContext, tool
from agentloop._transcript import Transcript, transcript, transcript_html
from agentloop._transfer import (
    TransferReport,
    copy_sessions,
    export_lines,
    export_sessions,
    import_sessions,
)
from agentloop._types import (
    CompactionCheckpoint,
    FinalizeSummary,
    RunStatus,
    RunStep,
    Session,
    SessionInfo,
    SessionPage,
    StepType,
)
from agentloop._validate import validate_json, validate_labels, validate_n, validate_session_id

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
    "SessionExistsError",
    "SessionInfo",
    "SessionPage",
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
    "SupportsExpire",
    "SupportsFinal",
    "SupportsFork",
    "SupportsGetMany",
    "SupportsLabels",
    "SupportsLease",
    "SupportsListSessions",
    "SupportsPaging",
    "SupportsPrune",
    "SupportsPut",
    "SupportsRestore",
    "SupportsRevisions",
    "SupportsStepsAfter",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolSpec",
    "Transcript",
    "TransferReport",
    "append_all",
    "copy_sessions",
    "export_lines",
    "export_sessions",
    "get_all",
    "import_sessions",
    "run_whole",
    "tool",
    "transcript",
    "transcript_html",
    "validate_json",
    "validate_labels",
    "validate_n",
    "validate_session_id",
]
