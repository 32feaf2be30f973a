"""Hooks the MCP proxy tests load by ``module:attribute`` from a proxy configuration."""

from __future__ import annotations

from tooltrace import HookDecision, HookView, hook


@hook(required=True)
def block_all(view: HookView) -> HookDecision:
    """Block every call: nothing may reach an upstream server."""
    return HookDecision.block("nothing runs through this proxy")


@hook(tools={"git_log"})
def one_commit(view: HookView) -> HookDecision | None:
    """Narrow ``git_log`` to a single commit."""
    if view.arguments.get("max_count", 10) != 1:
        return HookDecision.modify(arguments={**view.arguments, "max_count": 1},
                                   reason="at most one commit per log call")
    return None


@hook()
def chatty(view: HookView) -> HookDecision | None:
    """Print to stdout (a stray print must not reach the protocol's wire) and let the call go."""
    print(f"chatty hook saw {view.tool}", flush=True)
    return None
