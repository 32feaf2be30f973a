"""Errors the proxy's tool handlers raise; each names a low-cardinality ``error_type``.

The registry records ``error_type`` on the span (``error.type``), the metrics and the audit row.
Messages are short and never carry raw upstream output beyond a bounded, redacted excerpt. The
ones raised after the request was sent are also ``OutcomeUnknown``: for a tool with side effects
the call ends ``unknown``, since the upstream may have acted before it failed::

    UpstreamError                 base: something went wrong talking to an upstream server
    ├── UpstreamToolError         the upstream answered ``isError: true``   (tool_error)
    ├── UpstreamRPCError          the upstream answered a JSON-RPC error    (its code)
    ├── UpstreamUnavailable       the upstream is not running (starting or restarting)
    ├── UpstreamExited            the upstream process exited during the call
    ├── UpstreamProtocolError     the upstream wrote something that is not JSON-RPC
    ├── UpstreamTimeout           the upstream did not answer in time (it is restarted)
    └── UpstreamCancelled         the call was cancelled; the upstream was told, unconfirmed
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..exceptions import OutcomeUnknown

__all__ = [
    "UpstreamCancelled",
    "UpstreamError",
    "UpstreamExited",
    "UpstreamProtocolError",
    "UpstreamRPCError",
    "UpstreamTimeout",
    "UpstreamToolError",
    "UpstreamUnavailable",
]


class UpstreamError(Exception):
    """Base of the errors a proxied call can end with."""

    error_type = "upstream_error"


class UpstreamToolError(UpstreamError):
    """The upstream tool ran and reported an error (``isError: true``)."""

    error_type = "tool_error"


class UpstreamRPCError(UpstreamError):
    """The upstream answered a request with a JSON-RPC error.

    ``message`` is the proxy's bounded, redacted account of it (what the audit trail keeps);
    ``error`` is the upstream's error object as it arrived (``code``, ``message`` and ``data``
    when it sent one), which the proxy hands on to its client.
    """

    def __init__(self, code: int, message: str,
                 error: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.error: dict[str, Any] = dict(error) if error is not None else {
            "code": code, "message": message}
        # MCP semantic conventions: a JSON-RPC error's type is its code, as a string.
        self.error_type = str(code)


class UpstreamUnavailable(UpstreamError):
    """The upstream server is not connected (it failed to start or is restarting)."""

    error_type = "upstream_unavailable"


class UpstreamExited(UpstreamError, OutcomeUnknown):
    """The upstream process exited (or closed its stdout) while the call was in flight."""

    error_type = "upstream_exited"


class UpstreamProtocolError(UpstreamError, OutcomeUnknown):
    """The upstream wrote a line that is not a JSON-RPC message."""

    error_type = "upstream_protocol_error"


class UpstreamTimeout(UpstreamError, OutcomeUnknown):
    """The upstream did not answer before the call's deadline and grace period."""

    error_type = "upstream_timeout"


class UpstreamCancelled(UpstreamError, OutcomeUnknown):
    """The call was cancelled and the upstream was sent ``notifications/cancelled``; MCP has no
    answer to a cancelled request, so whether the server stopped cannot be confirmed."""

    error_type = "cancelled"
