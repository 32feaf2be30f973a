"""A side-effecting tool and an always-block hook, importable by CLI subprocesses in tests."""

from __future__ import annotations

import os
from pathlib import Path

from tooltrace import CallContext, HookDecision, HookView, hook, tool


@tool(capability="write", effect="local")
def touch(name: str) -> str:
    """Write the marker file named by TOOLTRACE_TEST_MARKER (the side effect under test)."""
    Path(os.environ["TOOLTRACE_TEST_MARKER"]).write_text(name)
    return "touched"


@hook(required=True)
def deny_all(view: HookView) -> HookDecision:
    """Block every call."""
    return HookDecision.block("maintenance window")


@hook("deny_all", required=True, tools={"touch"})
def deny_touch(view: HookView) -> HookDecision:
    """Block every call of ``touch`` (and only those), with ``deny_all``'s name and reason."""
    return HookDecision.block("maintenance window")


@tool(capability="read", effect="none")
def subagent(ctx: CallContext, name: str) -> dict[str, str | None]:
    """A sub-agent: reaches ``touch`` through a nested call and reports what came back."""
    env = ctx.call("touch", {"name": name})
    return {"status": env.status.value, "stage": env.reject_stage and env.reject_stage.value,
            "summary": env.summary}
