"""The MCP proxy: put the registry's pipeline in front of any MCP server.

``tooltrace mcp proxy`` is itself an MCP server (stdio, or streamable HTTP on loopback). It
starts the configured upstream servers, registers each of their tools in a ``ToolRegistry``
(source ``mcp:<server>``), and forwards a ``tools/call`` only after the whole pipeline accepted
it. Tool descriptions and schemas are pinned at first sight; a change is flagged and needs
approval. The MCP SDK is imported only when a proxy starts.
"""

from ._config import ProxyConfig, ServerConfig, config_from_dict, load_config
from ._errors import (
    UpstreamError,
    UpstreamExited,
    UpstreamProtocolError,
    UpstreamRPCError,
    UpstreamTimeout,
    UpstreamToolError,
    UpstreamUnavailable,
)
from ._pins import ChangedToolsRule, PinCheck, PinStore, fingerprint
from ._proxy import Collision, McpProxy, ProxyReport, ServerReport, ToolReport, envelope_to_result
from ._server import build_server, run_proxy, serve_http, serve_stdio

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
    "UpstreamError",
    "UpstreamExited",
    "UpstreamProtocolError",
    "UpstreamRPCError",
    "UpstreamTimeout",
    "UpstreamToolError",
    "UpstreamUnavailable",
    "build_server",
    "config_from_dict",
    "envelope_to_result",
    "fingerprint",
    "load_config",
    "run_proxy",
    "serve_http",
    "serve_stdio",
]
