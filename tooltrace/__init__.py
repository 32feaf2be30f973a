"""tooltrace: every tool call an AI agent makes, observable and auditable.

``ToolRegistry.call`` is the one execution entry: validation, policy and approval, hooks,
deadlines and concurrency, redaction and offload, then telemetry sinks and the result envelope.
"""

from ._setup import create_registry
from .envelope import (
    Artifact,
    CallRecord,
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
from .redaction import ArtifactStore, Redactor
from .registry import CallStatus, LateStep, Resolution, ToolRegistry, Visibility
from .runtime import CallContext, current_context
from .tool import Capability, Effect, Execution, FunctionTool, ToolDefinition, ToolResult, tool

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
    "tool",
]
