"""The proxy's policy when a policy file is in play: the proxy's own rules, then the file's.

The file's built-in rules take the place of the proxy's defaults of the same name; its
``private_network`` rule is applied inside the proxy's (which lets each server's
``allow_private`` hosts through and checks a ``resources/read`` only for ``http(s)`` URIs).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from .. import _settings
from ..policy import Policy, Rule

if TYPE_CHECKING:
    from ..registry import ToolRegistry

__all__ = ["proxy_policy"]


#: What completes a registry built with the proxy's policy (given the registry).
Attach = Callable[["ToolRegistry"], None]


def proxy_policy(own: Sequence[Rule], policy_file: str | None,
                 expand: Callable[[str], Iterable[str]] | None = None) -> tuple[Policy, Attach]:
    """The proxy's rules, then a policy file's (``policy.file``, ``--policy``,
    ``TOOLTRACE_POLICY`` or ``./tooltrace.toml``) with its modes; and what to do to the
    registry once it is built: the file's read-only roots join its workspace, Cedar policies
    see arguments as its redactor leaves them, and a sink frees the file's calls-at-once
    limits. The upstream tools are not known yet, so the file may name any tool; ``expand``
    turns a wildcard in a ``tools`` list (``mcp.*.<kind>``) into the names it stands for. An
    invalid file raises ``PolicyFileError``."""
    path = _settings.policy_path(policy_file)
    if path is None:
        return Policy(own), lambda reg: None
    from ..policy.file import load_policy

    pf = load_policy(path, tools=None, expand=expand)
    rules = pf.compiled.policy.rules
    policy = Policy(_merged(own, rules), modes=pf.compiled.policy.modes.values())

    def attach(reg: ToolRegistry) -> None:
        pf.apply(reg)
        reg.policy = policy

    return policy, attach


def _merged(own: Sequence[Rule], rules: Sequence[Rule]) -> list[Rule]:
    """The proxy's rules, then the file's; a built-in rule the file sets replaces the proxy's
    default of that name (``private_network`` goes inside the proxy's own)."""
    from ._network import PrivateNetworkRule

    by_name = {r.name: r for r in rules if r.name in _BUILTINS}
    out: list[Rule] = []
    for r in own:
        if isinstance(r, PrivateNetworkRule) and "private_network" in by_name:
            out.append(dataclasses.replace(r, inner=by_name["private_network"]))
        elif r.name not in by_name:
            out.append(r)
    return out + [r for r in rules if r.name != "private_network" or r.name not in by_name]


#: The built-in rules a policy file can switch or tune.
_BUILTINS = frozenset({"denied_command", "private_network"})
