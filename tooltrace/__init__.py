"""tooltrace: every tool call an AI agent makes, observable and auditable.

``ToolRegistry.call`` is the one execution entry: validation, policy and approval, hooks,
deadlines and concurrency, redaction and offload, then telemetry sinks and the result envelope.
"""

from typing import TYPE_CHECKING

# First: it decides whether the call path's modules load compiled or from source.
from . import _build  # noqa: F401
from ._lazy import lazy_exports

# ``tool`` is also the name of a submodule: bind the decorator eagerly so the package attribute
# is the function, whatever imports ``tooltrace.tool`` later (the module is light).
from .tool import Capability, Effect, Execution, FunctionTool, ToolDefinition, ToolResult, tool

if TYPE_CHECKING:
    from ._context import CallContext
    from ._current import current_context
    from ._ids import new_call_id
    from ._registry import ToolRegistry
    from ._setup import create_registry
    from ._tooltable import Resolution, Visibility
    from .artifacts import ArtifactStore
    from .envelope import (
        Artifact,
        CallRecord,
        CallStatus,
        Retry,
        Stage,
        Status,
        Step,
        StepName,
        Timing,
        ToolCall,
        ToolResultEnvelope,
    )
    from .exceptions import (
        AuditUnavailableError,
        ConfigurationError,
        DeadlineExceeded,
        DuplicateToolError,
        InvalidSchemaError,
        MalformedCallError,
        OutcomeUnknown,
        RegistrationError,
        ToolCancelled,
        ToolInterrupt,
        TooltraceError,
    )
    from .hooks import FunctionHook, Hook, HookAction, HookDecision, HookView, hook
    from .paths import PathPolicyError, ResolvedPath, Workspace
    from .policy import (
        ApprovalDecision,
        ApprovalRequest,
        DenyCommandPatterns,
        DenyPrivateNetwork,
        Mode,
        Policy,
        PolicyDecision,
        PolicyRequest,
        RequireApproval,
        Rule,
        Verdict,
    )
    from .redaction import Redactor
    from .sinks import LateStep

# Public names load on first use, so ``import tooltrace`` (and every CLI command, which lives in
# ``tooltrace.cli``) pays only for what it touches.
_LAZY: dict[str, str] = {
    "ApprovalDecision": ".policy",
    "ApprovalRequest": ".policy",
    "Artifact": ".envelope",
    "ArtifactStore": ".artifacts",
    "AuditUnavailableError": ".exceptions",
    "CallContext": "._context",
    "CallRecord": ".envelope",
    "CallStatus": ".envelope",
    "ConfigurationError": ".exceptions",
    "DeadlineExceeded": ".exceptions",
    "DenyCommandPatterns": ".policy",
    "DenyPrivateNetwork": ".policy",
    "DuplicateToolError": ".exceptions",
    "FunctionHook": ".hooks",
    "Hook": ".hooks",
    "HookAction": ".hooks",
    "HookDecision": ".hooks",
    "HookView": ".hooks",
    "InvalidSchemaError": ".exceptions",
    "LateStep": ".sinks",
    "MalformedCallError": ".exceptions",
    "Mode": ".policy",
    "OutcomeUnknown": ".exceptions",
    "PathPolicyError": ".paths",
    "Policy": ".policy",
    "PolicyDecision": ".policy",
    "PolicyRequest": ".policy",
    "Redactor": ".redaction",
    "RegistrationError": ".exceptions",
    "RequireApproval": ".policy",
    "Resolution": "._tooltable",
    "ResolvedPath": ".paths",
    "Retry": ".envelope",
    "Rule": ".policy",
    "Stage": ".envelope",
    "Status": ".envelope",
    "Step": ".envelope",
    "StepName": ".envelope",
    "Timing": ".envelope",
    "ToolCall": ".envelope",
    "ToolCancelled": ".exceptions",
    "ToolInterrupt": ".exceptions",
    "ToolRegistry": "._registry",
    "ToolResultEnvelope": ".envelope",
    "TooltraceError": ".exceptions",
    "Verdict": ".policy",
    "Visibility": "._tooltable",
    "Workspace": ".paths",
    "create_registry": "._setup",
    "current_context": "._current",
    "hook": ".hooks",
    "new_call_id": "._ids",
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())


__version__ = "0.1.0"

__all__ = [
    "ApprovalDecision",
    "ApprovalRequest",
    "Artifact",
    "ArtifactStore",
    "AuditUnavailableError",
    "CallContext",
    "CallRecord",
    "CallStatus",
    "Capability",
    "ConfigurationError",
    "DeadlineExceeded",
    "DenyCommandPatterns",
    "DenyPrivateNetwork",
    "DuplicateToolError",
    "Effect",
    "Execution",
    "FunctionHook",
    "FunctionTool",
    "Hook",
    "HookAction",
    "HookDecision",
    "HookView",
    "InvalidSchemaError",
    "LateStep",
    "MalformedCallError",
    "Mode",
    "OutcomeUnknown",
    "PathPolicyError",
    "Policy",
    "PolicyDecision",
    "PolicyRequest",
    "Redactor",
    "RegistrationError",
    "RequireApproval",
    "Resolution",
    "ResolvedPath",
    "Retry",
    "Rule",
    "Stage",
    "Status",
    "Step",
    "StepName",
    "Timing",
    "ToolCall",
    "ToolCancelled",
    "ToolDefinition",
    "ToolInterrupt",
    "ToolRegistry",
    "ToolResult",
    "ToolResultEnvelope",
    "TooltraceError",
    "Verdict",
    "Visibility",
    "Workspace",
    "__version__",
    "create_registry",
    "current_context",
    "hook",
    "new_call_id",
    "tool",
]
