"""tooltrace: every tool call an AI agent makes, observable and auditable.

``ToolRegistry.call`` is the one execution entry: validation, policy and approval, hooks,
deadlines and concurrency, redaction and offload, then telemetry sinks and the result envelope.
"""

from typing import TYPE_CHECKING

from ._lazy import lazy_exports

# ``tool`` is also the name of a submodule: bind the decorator eagerly so the package attribute
# is the function, whatever imports ``tooltrace.tool`` later (the module is light).
from .tool import Capability as Capability
from .tool import Effect as Effect
from .tool import Execution as Execution
from .tool import FunctionTool as FunctionTool
from .tool import ToolDefinition as ToolDefinition
from .tool import ToolResult as ToolResult
from .tool import tool as tool

if TYPE_CHECKING:
    from ._context import CallContext as CallContext
    from ._current import current_context as current_context
    from ._ids import new_call_id as new_call_id
    from ._listing import GroupLine as GroupLine
    from ._listing import ToolListing as ToolListing
    from ._registry import ToolRegistry as ToolRegistry
    from ._setup import create_registry as create_registry
    from ._tooltable import Resolution as Resolution
    from ._tooltable import Visibility as Visibility
    from .artifacts import ArtifactStore as ArtifactStore
    from .envelope import Artifact as Artifact
    from .envelope import CallRecord as CallRecord
    from .envelope import CallStatus as CallStatus
    from .envelope import Principal as Principal
    from .envelope import Retry as Retry
    from .envelope import Stage as Stage
    from .envelope import Status as Status
    from .envelope import Step as Step
    from .envelope import StepName as StepName
    from .envelope import Timing as Timing
    from .envelope import ToolCall as ToolCall
    from .envelope import ToolResultEnvelope as ToolResultEnvelope
    from .exceptions import AuditUnavailableError as AuditUnavailableError
    from .exceptions import ConfigurationError as ConfigurationError
    from .exceptions import DeadlineExceeded as DeadlineExceeded
    from .exceptions import DuplicateToolError as DuplicateToolError
    from .exceptions import InvalidSchemaError as InvalidSchemaError
    from .exceptions import MalformedCallError as MalformedCallError
    from .exceptions import OutcomeUnknown as OutcomeUnknown
    from .exceptions import RegistrationError as RegistrationError
    from .exceptions import ToolCancelled as ToolCancelled
    from .exceptions import ToolInterrupt as ToolInterrupt
    from .exceptions import TooltraceError as TooltraceError
    from .hooks import FunctionHook as FunctionHook
    from .hooks import Hook as Hook
    from .hooks import HookAction as HookAction
    from .hooks import HookDecision as HookDecision
    from .hooks import HookView as HookView
    from .hooks import hook as hook
    from .paths import PathPolicyError as PathPolicyError
    from .paths import ResolvedPath as ResolvedPath
    from .paths import Workspace as Workspace
    from .policy import ApprovalDecision as ApprovalDecision
    from .policy import ApprovalRequest as ApprovalRequest
    from .policy import DenyCommandPatterns as DenyCommandPatterns
    from .policy import DenyPrivateNetwork as DenyPrivateNetwork
    from .policy import Mode as Mode
    from .policy import Policy as Policy
    from .policy import PolicyDecision as PolicyDecision
    from .policy import PolicyRequest as PolicyRequest
    from .policy import RequireApproval as RequireApproval
    from .policy import Rule as Rule
    from .policy import Verdict as Verdict
    from .redaction import Redactor as Redactor
    from .sinks import LateStep as LateStep

# The one list of public names, with the module each comes from. Those not bound above load on
# first use, so ``import tooltrace`` (and every CLI command, which lives in ``tooltrace.cli``)
# pays only for what it touches. ``__all__`` is built from it; a test checks that the imports
# above (what type checkers see) name exactly the same.
_PUBLIC: dict[str, str] = {
    "Capability": ".tool",
    "Effect": ".tool",
    "Execution": ".tool",
    "FunctionTool": ".tool",
    "ToolDefinition": ".tool",
    "ToolResult": ".tool",
    "tool": ".tool",
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
    "GroupLine": "._listing",
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
    "Principal": ".envelope",
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
    "ToolListing": "._listing",
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


__getattr__, __dir__ = lazy_exports(__name__, _PUBLIC, globals())


__version__ = "0.1.0"

__all__ = sorted([*_PUBLIC, "__version__"])
