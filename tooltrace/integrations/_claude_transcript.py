"""Tool uses Claude Code refused before any hook ran, read from its session transcripts.

The CLI checks a tool use's name and input against its own schemas before it asks any hook:
an unknown name, or input its schema rejects, is answered with an error at once, so neither
``PreToolUse`` nor ``can_use_tool`` sees it. The session's transcript (JSON lines, one message
each) still holds the ``tool_use`` and its ``tool_result``, an error wrapped in
``<tool_use_error>``; ``Transcripts`` finds the results of uses no hook saw.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
from pathlib import Path
from typing import Any

__all__ = ["Refused", "Transcripts"]

# How the CLI wraps an error it raised itself (unknown tool, input its schema refused).
_REFUSED = re.compile(r"\A\s*<tool_use_error>(.*?)(?:</tool_use_error>)?\s*\Z", re.S)
# A transcript line longer than this is skipped, not parsed (a pasted file, an image).
_MAX_LINE = 4 * 1024 * 1024
# The CLI's reason as kept on the record (attributes are cut to 256 characters anyway).
_MAX_REASON = 256


@dataclasses.dataclass(frozen=True, slots=True)
class Refused:
    """One tool use the CLI refused before any hook: its id, name, input and the CLI's reason."""

    use_id: str
    name: str
    tool_input: Any
    reason: str


class Transcripts:
    """The transcripts of one session, read from where the last read stopped.

    ``seen`` holds the tool-use ids a hook or the in-process server saw; a refused use is
    reported once and then counted as seen.
    """

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self._read_to: dict[str, int] = {}
        self._uses: dict[str, tuple[str, Any]] = {}  # tool_use blocks awaiting their result

    def paths(self) -> list[str]:
        """The transcripts read so far (read them again once the session has ended)."""
        return list(self._read_to)

    async def refused(self, path: str | Path) -> list[Refused]:
        """The refused uses in the lines of ``path`` not read yet (a line still being written
        is left for the next read; a missing transcript holds none)."""
        key = str(path)
        start = self._read_to.setdefault(key, 0)
        data = await asyncio.to_thread(_tail, Path(path), start)
        end = data.rfind(b"\n") + 1
        self._read_to[key] = start + end
        out = []
        for line in data[:end].splitlines():
            for block in _blocks(line):
                found = self._block(block)
                if found is not None:
                    out.append(found)
        return out

    def _block(self, block: dict[str, Any]) -> Refused | None:
        if block.get("type") == "tool_use":
            use, name = block.get("id"), block.get("name")
            if isinstance(use, str) and isinstance(name, str):
                self._uses[use] = (name, block.get("input"))
            return None
        use = block.get("tool_use_id")
        if block.get("type") != "tool_result" or not isinstance(use, str):
            return None
        asked = self._uses.pop(use, None)
        if asked is None or block.get("is_error") is not True or use in self.seen:
            return None
        content = block.get("content")
        if isinstance(content, list):
            content = "\n".join(str(c.get("text", "")) for c in content if isinstance(c, dict))
        m = _REFUSED.match(content) if isinstance(content, str) else None
        if m is None:
            return None  # the tool's own error, reported to a hook the adapter did not have
        self.seen.add(use)
        return Refused(use, asked[0], asked[1], m.group(1).strip()[:_MAX_REASON])


def _tail(path: Path, start: int) -> bytes:
    try:
        with path.open("rb") as f:
            f.seek(start)
            return f.read()
    except OSError:
        return b""  # no transcript (the session is not persisted): nothing to read


def _blocks(line: bytes) -> list[dict[str, Any]]:
    """The content blocks of one transcript line's message (none for any other line)."""
    if len(line) > _MAX_LINE:
        return []
    try:
        entry = json.loads(line)
    except ValueError:
        return []
    message = entry.get("message") if isinstance(entry, dict) else None
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list):
        return []
    return [b for b in content if isinstance(b, dict)]
