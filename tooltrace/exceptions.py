"""The exception tree, grouped by what the caller should do next.

A rejected, failed, cancelled or unknown call is *not* an exception: ``ToolRegistry.call``
returns an envelope saying so. Exceptions are for mistakes in how tooltrace itself is used, for
tools that want to say something specific, and for sinks that cannot keep a promise::

    TooltraceError
    ├── RegistrationError          fix the tool definition, then register again
    │   ├── InvalidSchemaError     the arguments schema is not valid JSON Schema
    │   └── DuplicateToolError     the same name twice from one source
    ├── MalformedCallError         the tool call itself could not be parsed (fix the caller)
    ├── PathPolicyError            a path was refused by the workspace policy (tooltrace.policy)
    ├── ConfigurationError         a setting or environment variable has a bad value
    │   └── SandboxUnavailableError  no command sandbox can run here (install one, or turn
    │                                the sandbox off knowingly)
    ├── AuditUnavailableError      strict audit could not make a record durable (call refused)
    ├── ToolInterrupt              raised inside a tool to confirm it stopped
    │   ├── ToolCancelled          ... because the call was cancelled
    │   └── DeadlineExceeded       ... because the deadline passed
    └── OutcomeUnknown             raised inside a tool: the action was dispatched, and whether it
                                   took effect cannot be known (a connection lost mid-call)
"""

from __future__ import annotations

__all__ = [
    "AuditUnavailableError",
    "ConfigurationError",
    "DeadlineExceeded",
    "DuplicateToolError",
    "InvalidSchemaError",
    "MalformedCallError",
    "OutcomeUnknown",
    "RegistrationError",
    "SandboxUnavailableError",
    "ToolCancelled",
    "ToolInterrupt",
    "TooltraceError",
]


class TooltraceError(Exception):
    """Base of every error tooltrace raises."""


class RegistrationError(TooltraceError, ValueError):
    """A tool definition failed a check; nothing was registered."""


class InvalidSchemaError(RegistrationError):
    """The arguments schema does not validate against its JSON Schema metaschema."""


class DuplicateToolError(RegistrationError):
    """The same tool name was registered twice from the same source."""


class MalformedCallError(TooltraceError, ValueError):
    """A tool call could not be parsed: not JSON, wrong shape, too big or too deep.

    ``reason`` is a short closed-set code (``json``, ``shape``, ``too_large``, ``too_deep``,
    ``encoding``, ``unknown_field``, ``name``); the message never echoes argument values.
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class ConfigurationError(TooltraceError, ValueError):
    """A setting (argument or environment variable) has a value tooltrace cannot use."""


class SandboxUnavailableError(ConfigurationError):
    """No command sandbox the setting allows can run here, so the command must not run.

    The message names the fix: install bubblewrap, run on a kernel with Landlock, or set the
    sandbox to ``off`` explicitly (``CommandConfig(sandbox="off")`` or ``[commands]`` in the
    policy file).
    """


class AuditUnavailableError(TooltraceError):
    """Strict audit mode could not make a record durable, so the call must not run."""


class ToolInterrupt(TooltraceError):
    """Raised by a tool (usually via ``CallContext.check()``) to confirm it stopped early."""


class ToolCancelled(ToolInterrupt):
    """The tool stopped because its call was cancelled."""


class DeadlineExceeded(ToolInterrupt):
    """The tool stopped because its deadline passed."""


class OutcomeUnknown(TooltraceError):
    """Raised by a tool whose action was dispatched but whose end cannot be confirmed.

    For a tool with side effects the call ends ``unknown`` (not ``failed``): a post-mortem must
    not read "failed" as "did not happen". ``error_type`` names the cause (low cardinality).
    """

    error_type = "outcome_unknown"
