"""Tool pinning: each upstream tool's description and schemas are hashed at first sight.

A later change (a "rug pull": the server now describes or shapes the tool differently than when
it was first trusted) is flagged, logged, and by default needs approval before the tool runs:
``ChangedToolsRule`` answers ``ask`` for changed tools, so the registry's approver decides.
``PinStore.accept`` re-pins a tool to what the server says now.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import orjson

from .._files import replace_whole
from ..policy import PolicyDecision, PolicyRequest, Verdict

__all__ = ["ChangedToolsRule", "PinCheck", "PinStore", "fingerprint"]

PIN_FILE = "mcp-pins.json"
PinState = Literal["new", "pinned", "changed"]


def fingerprint(tool: Mapping[str, Any]) -> str:
    """sha256 over the parts of a tool a model reads or a call is shaped by.

    ``tool`` is the wire form (camelCase keys): name, title, description, inputSchema,
    outputSchema and annotations; anything else (icons, _meta) is left out.
    """
    keep = {k: tool.get(k) for k in
            ("name", "title", "description", "inputSchema", "outputSchema", "annotations")}
    blob = orjson.dumps(keep, option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(blob).hexdigest()


@dataclass(frozen=True, slots=True)
class PinCheck:
    """One tool compared with its pin: ``new`` (pinned now), ``pinned`` (same) or ``changed``."""

    server: str
    tool: str
    state: PinState
    sha256: str
    pinned_sha256: str | None
    pinned_at: float | None


class PinStore:
    """Pins in ``<home>/mcp-pins.json``: ``{"servers": {label: {tool: {sha256, pinned_at}}}}``.

    Writes are atomic (temporary file + rename); a missing or unreadable file means no pins.
    """

    def __init__(self, home: str | os.PathLike[str]) -> None:
        self.path = Path(home) / PIN_FILE
        self._lock = threading.Lock()
        self._data: dict[str, dict[str, dict[str, Any]]] = self._read()

    def _read(self) -> dict[str, dict[str, dict[str, Any]]]:
        try:
            raw = orjson.loads(self.path.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            return {}
        servers = raw.get("servers") if isinstance(raw, dict) else None
        if not isinstance(servers, dict):
            return {}
        return {k: dict(v) for k, v in servers.items() if isinstance(v, dict)}

    def _write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        blob = orjson.dumps({"version": 1, "servers": self._data},
                            option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2)
        replace_whole(self.path, blob, mode=0o600)

    def check(self, server: str, tools: Iterable[Mapping[str, Any]], *,
              pin_new: bool = True) -> list[PinCheck]:
        """Compare a server's tool listing with the pins; pin tools seen for the first time."""
        out: list[PinCheck] = []
        dirty = False
        with self._lock:
            pins = self._data.setdefault(server, {})
            for t in tools:
                name = str(t.get("name"))
                sha = fingerprint(t)
                pin = pins.get(name)
                if pin is None:
                    out.append(PinCheck(server, name, "new", sha, None, None))
                    if pin_new:
                        pins[name] = {"sha256": sha, "pinned_at": time.time()}
                        dirty = True
                elif pin.get("sha256") == sha:
                    out.append(PinCheck(server, name, "pinned", sha, sha, pin.get("pinned_at")))
                else:
                    out.append(PinCheck(server, name, "changed", sha, pin.get("sha256"),
                                        pin.get("pinned_at")))
            if dirty:
                self._write()
        return out

    def accept(self, server: str, tools: Iterable[Mapping[str, Any]],
               names: Iterable[str] | None = None) -> list[str]:
        """Re-pin tools (all of the listing, or only ``names``) to what the server says now."""
        wanted = set(names) if names is not None else None
        done: list[str] = []
        with self._lock:
            pins = self._data.setdefault(server, {})
            for t in tools:
                name = str(t.get("name"))
                if wanted is not None and name not in wanted:
                    continue
                sha = fingerprint(t)
                if pins.get(name, {}).get("sha256") != sha:
                    pins[name] = {"sha256": sha, "pinned_at": time.time()}
                    done.append(name)
            if done:
                self._write()
        return done

    def pinned(self, server: str) -> dict[str, str]:
        """``{tool: sha256}`` pinned for a server."""
        with self._lock:
            return {k: str(v.get("sha256")) for k, v in self._data.get(server, {}).items()}


class ChangedToolsRule:
    """Policy rule ``mcp_pin_changed``: ``ask`` (or ``deny``) for tools whose pin changed.

    The proxy adds and removes exposed tool names as upstream listings are checked (at start
    and after every restart of an upstream server).
    """

    name = "mcp_pin_changed"

    def __init__(self, verdict: Verdict = Verdict.ASK) -> None:
        self.verdict = verdict
        self._changed: frozenset[str] = frozenset()
        self._lock = threading.Lock()

    @property
    def changed(self) -> frozenset[str]:
        """Exposed names of the tools currently flagged as changed."""
        return self._changed

    def flag(self, names: Iterable[str]) -> None:
        """Flag these exposed tool names as changed."""
        with self._lock:
            self._changed = self._changed | frozenset(names)

    def clear(self, names: Iterable[str]) -> None:
        """Stop flagging these names (they were re-pinned)."""
        with self._lock:
            self._changed = self._changed - frozenset(names)

    def __call__(self, request: PolicyRequest) -> PolicyDecision | None:
        name = request.tool.name
        if name not in self._changed:
            return None
        return PolicyDecision(
            self.verdict, self.name,
            f"{name} changed its description or schema since it was pinned; review it and "
            "run 'tooltrace mcp accept' to re-pin",
        )
