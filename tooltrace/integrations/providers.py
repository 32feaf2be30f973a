"""A hand-written agent loop on the OpenAI, Anthropic or Gemini APIs (or an MCP client).

The formats live in the core (``tooltrace.providers``, also reached as ``registry.tool_specs``,
``registry.call_from`` / ``acall_from`` and ``envelope.result_message``); this module keeps the
adapter-style import path ``tooltrace.integrations.providers``.
"""

from ..providers import (
    Format,
    ProviderCall,
    ProviderCallError,
    acall_from,
    call_from,
    read_call,
    result_message,
    result_turn,
    tool_specs,
)

__all__ = [
    "Format",
    "ProviderCall",
    "ProviderCallError",
    "acall_from",
    "call_from",
    "read_call",
    "result_message",
    "result_turn",
    "tool_specs",
]
