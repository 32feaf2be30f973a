"""The MCP proxy: put the registry's pipeline in front of any MCP server.

``tooltrace mcp proxy`` is itself an MCP server (stdio, or streamable HTTP on loopback). It
starts the configured upstream servers, registers each of their tools in a ``ToolRegistry``
(source ``mcp:<server>``), and forwards a ``tools/call`` only after the whole pipeline accepted
it. Tool descriptions and schemas are pinned at first sight; a change is flagged and needs
approval. The MCP SDK is imported only when a proxy starts.

Hooks, rules, approvers and tools are named as in the proxy's configuration: ``module:attr`` or
an entry point (``load_object``, ``resolve_hooks``); ``tooltrace call --tools/--hook`` takes the
same names.
"""

from ._config import (
    ProxyConfig,
    ServerConfig,
    config_from_dict,
    load_config,
    load_object,
    resolve_hooks,
)
from ._errors import (
    UpstreamCancelled,
    UpstreamError,
    UpstreamExited,
    UpstreamProtocolError,
    UpstreamRPCError,
    UpstreamTimeout,
    UpstreamToolError,
    UpstreamUnavailable,
)
from ._pins import ChangedToolsRule, PinCheck, PinStore, fingerprint
from ._proxy import McpProxy
from ._reports import Collision, ProxyReport, ServerReport, ToolReport
from ._results import envelope_to_result
from ._server import build_server, check_loopback, run_proxy, serve_http, serve_stdio

__all__ = [
    "ChangedToolsRule",
    "Collision",
    "McpProxy",
    "PinCheck",
    "PinStore",
    "ProxyConfig",
    "ProxyReport",
    "ServerConfig",
    "ServerReport",
    "ToolReport",
    "UpstreamCancelled",
    "UpstreamError",
    "UpstreamExited",
    "UpstreamProtocolError",
    "UpstreamRPCError",
    "UpstreamTimeout",
    "UpstreamToolError",
    "UpstreamUnavailable",
    "build_server",
    "check_loopback",
    "config_from_dict",
    "envelope_to_result",
    "fingerprint",
    "load_config",
    "load_object",
    "resolve_hooks",
    "run_proxy",
    "serve_http",
    "serve_stdio",
]
