"""Small MCP servers and hooks the MCP proxy tests run as real upstreams."""
