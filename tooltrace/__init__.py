"""tooltrace: every tool call an AI agent makes, observable and auditable.

``ToolRegistry.call`` is the one execution entry: validation, policy and approval, hooks,
deadlines and concurrency, redaction and offload, then telemetry sinks and the result envelope.
"""

from typing import TYPE_CHECKING

from ._lazy import lazy_exports

# ``tool`` is also the name of a submodule: bind the decorator eagerly so the package attribute
# is the function, whatever imports ``tooltrace.tool`` later (the module is light).
from .model import Capability as Capability
from .model import Effect as Effect
from .model import Execution as Execution
from .model import FunctionTool as FunctionTool
from .model import ToolDefinition as ToolDefinition
from .model import ToolResult as ToolResult
from .model import tool as tool

if TYPE_CHECKING:
    from ._ids import new_call_id as new_call_id
    from ._setup import create_registry as create_registry
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
    from .model import Artifact as Artifact
    from .model import CallRecord as CallRecord
    from .model import CallStatus as CallStatus
    from .model import GroupLine as GroupLine
    from .model import Principal as Principal
    from .model import Resolution as Resolution
    from .model import Retry as Retry
    from .model import Stage as Stage
    from .model import Status as Status
    from .model import Step as Step
    from .model import StepName as StepName
    from .model import Timing as Timing
    from .model import ToolCall as ToolCall
    from .model import ToolListing as ToolListing
    from .model import ToolResultEnvelope as ToolResultEnvelope
    from .model import Visibility as Visibility
    from .policy import ApprovalDecision as ApprovalDecision
    from .policy import ApprovalRequest as ApprovalRequest
    from .policy import DenyCommandPatterns as DenyCommandPatterns
    from .policy import DenyPrivateNetwork as DenyPrivateNetwork
    from .policy import Mode as Mode
    from .policy import PathPolicyError as PathPolicyError
    from .policy import Policy as Policy
    from .policy import PolicyDecision as PolicyDecision
    from .policy import PolicyRequest as PolicyRequest
    from .policy import RequireApproval as RequireApproval
    from .policy import ResolvedPath as ResolvedPath
    from .policy import Rule as Rule
    from .policy import Verdict as Verdict
    from .policy import Workspace as Workspace
    from .redaction import ArtifactStore as ArtifactStore
    from .redaction import Redactor as Redactor
    from .registry import ToolRegistry as ToolRegistry
    from .runtime import CallContext as CallContext
    from .runtime import current_context as current_context
    from .sinks import LateStep as LateStep

# The one list of public names, with the module each comes from. Those not bound above load on
# first use, so ``import tooltrace`` (and every CLI command, which lives in ``tooltrace.cli``)
# pays only for what it touches. ``__all__`` is built from it; a test checks that the imports
# above (what type checkers see) name exactly the same.
_PUBLIC: dict[str, str] = {
    "Capability": ".model",
    "Effect": ".model",
    "Execution": ".model",
    "FunctionTool": ".model",
    "ToolDefinition": ".model",
    "ToolResult": ".model",
    "tool": ".model",
    "ApprovalDecision": ".policy",
    "ApprovalRequest": ".policy",
    "Artifact": ".model",
    "ArtifactStore": ".redaction",
    "AuditUnavailableError": ".exceptions",
    "CallContext": ".runtime",
    "CallRecord": ".model",
    "CallStatus": ".model",
    "ConfigurationError": ".exceptions",
    "DeadlineExceeded": ".exceptions",
    "DenyCommandPatterns": ".policy",
    "DenyPrivateNetwork": ".policy",
    "DuplicateToolError": ".exceptions",
    "FunctionHook": ".hooks",
    "GroupLine": ".model",
    "Hook": ".hooks",
    "HookAction": ".hooks",
    "HookDecision": ".hooks",
    "HookView": ".hooks",
    "InvalidSchemaError": ".exceptions",
    "LateStep": ".sinks",
    "MalformedCallError": ".exceptions",
    "Mode": ".policy",
    "OutcomeUnknown": ".exceptions",
    "PathPolicyError": ".policy",
    "Policy": ".policy",
    "PolicyDecision": ".policy",
    "PolicyRequest": ".policy",
    "Principal": ".model",
    "Redactor": ".redaction",
    "RegistrationError": ".exceptions",
    "RequireApproval": ".policy",
    "Resolution": ".model",
    "ResolvedPath": ".policy",
    "Retry": ".model",
    "Rule": ".policy",
    "Stage": ".model",
    "Status": ".model",
    "Step": ".model",
    "StepName": ".model",
    "Timing": ".model",
    "ToolCall": ".model",
    "ToolCancelled": ".exceptions",
    "ToolInterrupt": ".exceptions",
    "ToolListing": ".model",
    "ToolRegistry": ".registry",
    "ToolResultEnvelope": ".model",
    "TooltraceError": ".exceptions",
    "Verdict": ".policy",
    "Visibility": ".model",
    "Workspace": ".policy",
    "create_registry": "._setup",
    "current_context": ".runtime",
    "hook": ".hooks",
    "new_call_id": "._ids",
}


__getattr__, __dir__ = lazy_exports(__name__, _PUBLIC, globals())


__version__ = "0.1.0"

__all__ = sorted([*_PUBLIC, "__version__"])
