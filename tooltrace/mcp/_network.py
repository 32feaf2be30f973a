"""The private-network rule as the proxy applies it: ``DenyPrivateNetwork``, with a per-server
allow list (``allow_private``), and checking a ``resources/read`` only for ``http(s)`` URIs."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import msgspec

from ..policy import DenyPrivateNetwork, PolicyDecision, PolicyRequest, Rule
from ._config import ServerConfig

__all__ = ["Allow", "PrivateNetworkRule", "allow_lists"]

#: A server's allowed host names, and its allowed networks.
Allow = tuple[frozenset[str], tuple[Any, ...]]


@dataclass(frozen=True, slots=True)
class PrivateNetworkRule:
    """``DenyPrivateNetwork`` for the proxy's calls.

    A ``resources/read`` names a resource of the upstream, not a place the proxy goes: only an
    ``http(s)`` URI is checked there (a ``file://`` URI's path is checked by the path policy).
    A server's ``allow_private`` hosts and networks are let through for its own tools.
    """

    readers: set[str]
    allowed: Mapping[str, Allow]
    inner: Rule = field(default_factory=DenyPrivateNetwork)
    """The rule applied after the allowed URLs are dropped: the built-in one, or a policy
    file's ``[builtin.private_network]`` (tuned, or in observe mode)."""
    name: str = "private_network"

    def __call__(self, request: PolicyRequest) -> PolicyDecision | None:
        if request.tool.name in self.readers:
            uri = str(request.arguments.get("uri", ""))
            if not uri.lower().startswith(("http://", "https://")):
                return None
        allow = self.allowed.get(request.tool.source)
        if allow is not None:
            args = _drop_allowed(request.arguments, allow)
            if args is not request.arguments:
                request = msgspec.structs.replace(request, arguments=args)
        return self.inner(request)


_URL = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")


def _allowed_host(host: str, allow: Allow) -> bool:
    names, networks = allow
    host = host.strip("[]").rstrip(".").lower()
    if host in names:
        return True
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        return False
    return any(addr in net for net in networks)


def _drop_allowed(value: Any, allow: Allow) -> Any:
    """``value`` without the URLs whose host the server may reach (the same object when none)."""
    if isinstance(value, str):
        if "://" not in value:
            return value

        def keep(m: re.Match[str]) -> str:
            try:
                host = urlsplit(m.group(0)).hostname or ""
            except ValueError:
                return m.group(0)
            return "" if _allowed_host(host, allow) else m.group(0)

        out = _URL.sub(keep, value)
        return value if out == value else out
    if isinstance(value, Mapping):
        items = {k: _drop_allowed(v, allow) for k, v in value.items()}
        return value if all(items[k] is v for k, v in value.items()) else items
    if isinstance(value, list | tuple):
        got = [_drop_allowed(v, allow) for v in value]
        return value if all(a is b for a, b in zip(got, value, strict=True)) else got
    return value


def allow_lists(servers: Iterable[ServerConfig]) -> dict[str, Allow]:
    """Each server's ``allow_private`` entries by tool source (``mcp:<label>``)."""
    out: dict[str, Allow] = {}
    for sc in servers:
        if sc.allow_private:
            names = frozenset(e.lower() for e in sc.allow_private if "/" not in e)
            nets = tuple(ipaddress.ip_network(e, strict=False) for e in sc.allow_private
                         if "/" in e)
            out[f"mcp:{sc.label}"] = (names, nets)
    return out
