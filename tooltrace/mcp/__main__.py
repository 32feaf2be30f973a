"""``python -m tooltrace.mcp ...``: the same commands as ``tooltrace mcp ...``."""

from ..cli.mcp import mcp

if __name__ == "__main__":
    mcp(prog_name="tooltrace mcp")
