"""Framework adapters: each runs a framework's tool calls through ``ToolRegistry.call``.

One module per framework, each behind its optional extra (``pip install 'tooltrace[<extra>]'``);
importing this package imports no framework.

- ``tooltrace.integrations.claude_agent_sdk``: Claude Agent SDK hooks, ``can_use_tool`` and
  in-process MCP tools (extra ``claude-agent-sdk``).
- ``tooltrace.integrations.llamaindex``: LlamaIndex tools (extra ``llamaindex``).
"""
