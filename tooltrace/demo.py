"""A realistic agent workload through the built-in tools, on the embedded defaults.

It builds a scratch workspace under the home, wires every sink (metrics, logs, audit; spans when
``OTEL_*`` asks for them) and plays the calls an agent session makes, including the ones that
go wrong: parameter errors, policy denials (a path escape, a symlink escape, a denied command), an
approval, a hook that blocks and one that modifies, a deadline hit, an offloaded big output, a
cancellation and an ``unknown`` outcome. With ``calls`` above the scripted set, a randomised mix
of the same kinds follows.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import _settings
from ._setup import create_registry
from .hooks import HookDecision, HookView, hook
from .model import CallRecord, Status, ToolCall, ToolResultEnvelope, tool
from .policy import (
    ApprovalDecision,
    ApprovalRequest,
    DenyCommandPatterns,
    DenyPrivateNetwork,
    Policy,
    RequireApproval,
    Verdict,
)
from .policy.file import Match, PatternRule
from .registry import ToolRegistry
from .runtime import CallContext

__all__ = ["DemoResult", "run_demo"]

FAKE_KEY = "AKIA" + "Z7QF3EXAMPLE4DMO"  # a fake credential: the demo shows it redacted


@dataclass
class DemoResult:
    """What a demo run did: every envelope, and the call ids worth an autopsy."""

    home: Path
    workspace: Path
    envelopes: list[ToolResultEnvelope] = field(default_factory=list)
    highlights: dict[str, str] = field(default_factory=dict)
    metrics_port: int | None = None
    resolved: dict[str, str] = field(default_factory=dict)
    """The final outcome of each call that returned ``unknown`` and was resolved later."""
    sandboxes: set[str] = field(default_factory=set)
    """The sandboxes the demo's commands ran in (``landlock-abi7``, ``bwrap``, ``off``)."""

    def outcome(self, env: ToolResultEnvelope) -> str:
        """A call's final outcome: what it returned, or what an ``unknown`` resolved to."""
        return self.resolved.get(env.call_id, env.status.value)

    def by_status(self) -> Counter[str]:
        """Calls per status (what each call returned)."""
        return Counter(e.status.value for e in self.envelopes)

    def by_outcome(self) -> Counter[str]:
        """Calls per final outcome (after later resolutions)."""
        return Counter(self.outcome(e) for e in self.envelopes)

    def by_tool(self) -> dict[str, Counter[str]]:
        """Calls per tool and status."""
        out: dict[str, Counter[str]] = {}
        for e in self.envelopes:
            out.setdefault(e.tool, Counter())[e.status.value] += 1
        return out


@tool("scan_index", capability="read", effect="none", timeout_s=30.0, source="project")
def _scan_index(ctx: CallContext, shards: int = 50) -> str:
    """Scan index shards (slow; stops when asked)."""
    _SCANS_STARTED.add(ctx.call_id)
    for i in range(shards):
        if ctx.wait(0.05):
            ctx.check()
        ctx.set_detail("shards_done", i + 1)
        ctx.progress(i + 1, shards, f"shard {i + 1} of {shards}")
    return f"scanned {shards} shards"


_SCANS_STARTED: set[str] = set()


@tool(
    "deploy_service",
    capability="execute",
    effect="external",
    timeout_s=0.3,
    source="project",
    cancellable=False,
)
def _deploy_service(service: str, seconds: float = 2.5) -> str:
    """Deploy a service (cannot be interrupted once started)."""
    time.sleep(seconds)
    return f"deployed {service}"


#: The demo's own project tools (``tooltrace policy test --tools tooltrace.demo:DEMO_TOOLS``).
DEMO_TOOLS = (_scan_index, _deploy_service)


def _approver(req: ApprovalRequest) -> ApprovalDecision:
    path = str(req.arguments.get("path", ""))
    if path.startswith("reports/"):
        return ApprovalDecision(True, who="oncall-bot", reason="reports are fine to write")
    return ApprovalDecision(False, who="oncall-bot", reason="only reports/ may be written")


@hook("no-env-dumps", required=True, tools=frozenset({"run_command"}))
def _no_env_dumps(view: HookView) -> HookDecision | None:
    argv = view.arguments.get("argv") or []
    if argv and str(argv[0]) in ("env", "printenv"):
        return HookDecision.block("dumping the environment is not allowed")
    return None


@hook("normalise-paths", tools=frozenset({"read_text", "write_text"}))
def _normalise_paths(view: HookView) -> HookDecision | None:
    path = view.arguments.get("path")
    if isinstance(path, str) and path.startswith("./"):
        return HookDecision.modify(
            arguments={**view.arguments, "path": path[2:]}, reason="strip a leading ./"
        )
    return None


class _SandboxesSeen:
    """A sink that notes the sandbox each command's execute step recorded."""

    name = "demo-sandboxes"

    def __init__(self, into: set[str]) -> None:
        self.into = into

    def emit(self, record: CallRecord) -> None:
        for step in record.steps:
            label = step.detail.get("sandbox") if step.step == "execute" and step.detail else None
            if isinstance(label, str):
                self.into.add(label)

    def flush(self, timeout_s: float = 5.0) -> bool:
        return True

    def shutdown(self, timeout_s: float = 5.0) -> None:
        return None


def _prepare_workspace(scratch: Path) -> tuple[Path, Path]:
    """A fresh demo workspace and a directory beside it with a secret, under ``scratch``."""
    ws = scratch / "workspace"
    outside = scratch / "outside"
    shutil.rmtree(scratch, ignore_errors=True)
    (ws / "notes").mkdir(parents=True)
    (ws / "reports").mkdir()
    (ws / "logs").mkdir()
    outside.mkdir(parents=True)
    (outside / "secret.txt").write_text("db password: correct-horse-battery-staple\n")
    (ws / "notes" / "readme.txt").write_text(
        "Service runbook.\nThe staging key is " + FAKE_KEY + " (rotate monthly).\n"
    )
    (ws / "notes" / "todo.txt").write_text("- check p95\n- rotate keys\n")
    lines = [
        f"2026-12-01T10:{i % 60:02d}:00Z INFO request {i} served in {i % 97} ms"
        for i in range(4000)
    ]
    (ws / "logs" / "app.txt").write_text("\n".join(lines) + "\n")
    (ws / "shortcut.txt").symlink_to(outside / "secret.txt")
    return ws, outside


def _scripted(big_output: list[str]) -> list[tuple[str, ToolCall, Callable[[], None] | None]]:
    """(label, call, action to run while the call is in flight) for one round of the story."""
    return [
        ("read", ToolCall("read_text", {"path": "notes/readme.txt"}), None),
        ("params", ToolCall("read_text", {"path": 42}), None),
        ("path-escape", ToolCall("read_text", {"path": "../outside/secret.txt"}), None),
        ("symlink-escape", ToolCall("read_text", {"path": "shortcut.txt"}), None),
        ("denied-command", ToolCall("run_command", {"argv": ["rm", "-rf", "/"]}), None),
        (
            "approved-write",
            ToolCall("write_text", {"path": "reports/summary.txt", "text": "p95 is fine\n"}),
            None,
        ),
        ("denied-write", ToolCall("write_text", {"path": "notes/todo.txt", "text": "x\n"}), None),
        ("hook-block", ToolCall("run_command", {"argv": ["printenv"]}), None),
        ("hook-modify", ToolCall("read_text", {"path": "./notes/todo.txt"}), None),
        ("command", ToolCall("run_command", {"argv": ["echo", "tests passed"]}), None),
        ("deadline", ToolCall("run_command", {"argv": ["sleep", "5"]}, timeout_s=0.3), None),
        ("offload", ToolCall("run_command", {"argv": big_output}), None),
        ("big-file", ToolCall("read_text", {"path": "logs/app.txt"}), None),
        ("index", ToolCall("scan_index", {"shards": 16}), None),
        ("cancel", ToolCall("scan_index", {"shards": 60}), "cancel"),  # type: ignore[list-item]
        ("unknown", ToolCall("deploy_service", {"service": "billing"}), None),
        ("secret-arg", ToolCall("run_command", {"argv": ["echo", f"key={FAKE_KEY}"]}), None),
    ]


def _demo_policy() -> Policy:
    """The demo's own policy (a policy file given to ``run_demo`` replaces it)."""
    return Policy(
        [
            DenyCommandPatterns(),
            DenyPrivateNetwork(),
            RequireApproval(tools=frozenset({"write_text"}), name="writes_need_approval"),
            # A rule being rolled out: observed, not enforced (policy step: observe_deny).
            PatternRule("no_inline_python", Verdict.DENY,
                        Match(tools=frozenset({"run_command"})),
                        "inline python is under review", observe=True,
                        args=(("argv", re.compile(r"^python")),)),
        ]
    )


def run_demo(
    *,
    home: str | os.PathLike[str] | None = None,
    calls: int = 0,
    metrics_port: int | None = None,
    seed: int = 7,
    progress: Callable[[int, int], None] | None = None,
    registry_options: dict[str, Any] | None = None,
    linger_s: float = 0.0,
    policy_file: str | os.PathLike[str] | None = None,
    approver: Callable[[ApprovalRequest], ApprovalDecision] | None = None,
) -> DemoResult:
    """Run the demo workload; return what happened. ``calls`` (if larger than the scripted set)
    adds randomised calls of the same kinds; ``linger_s`` keeps the metrics endpoint up that long
    after the last call. A policy file replaces the demo's own policy: ``policy_file``, else
    ``TOOLTRACE_POLICY``, else ``./tooltrace.toml`` when it exists (it may name the demo's
    ``scan_index`` and ``deploy_service``: they are registered before it is checked).
    ``approver`` answers the demo's approvals instead of its scripted bot (``tooltrace demo
    --serve`` passes the home's approval queue, answered in the console)."""
    home_path = _settings.resolve_home(home).absolute()
    home_path.mkdir(parents=True, exist_ok=True)
    # The scratch workspace lies beside the home, never in it: no tool may reach the home.
    ws, _outside = _prepare_workspace(home_path.with_name(home_path.name + "-demo"))
    log_path = home_path / "logs" / "demo.jsonl"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_stream = log_path.open("a", encoding="utf-8")
    path = _settings.policy_path(policy_file)
    chosen: dict[str, Any] = {"policy": _demo_policy()} if path is None else {"policy_file": path}
    result = DemoResult(home_path, ws)
    reg = create_registry(
        ws,
        home=home_path,
        log_stream=log_stream,
        extra_sinks=(_SandboxesSeen(result.sandboxes),),
        **chosen,
        hooks=[_no_env_dumps, _normalise_paths],
        approver=approver or _approver,
        # Long enough for a killed command to confirm it stopped on a busy machine (the deadline
        # call ends failed, not unknown); shorter than deploy_service runs past its deadline
        # (0.3 + 1.0 s against 2.5 s), so that call still ends unknown and resolves later.
        cancel_grace_s=1.0,
        tools=DEMO_TOOLS,
        **(registry_options or {}),
    )
    server = None
    try:
        if metrics_port is not None:
            server = _serve(reg, metrics_port)
            result.metrics_port = getattr(server, "port", metrics_port)
        # "python3" from PATH, not sys.executable: arguments are shown as given, host paths too.
        big = [
            "python3",
            "-c",
            "print('\\n'.join(f'build step {i}: ok' for i in range(3000)))",
        ]
        script = _scripted(big)
        total = max(calls, len(script))
        rng = random.Random(seed)
        for i in range(total):
            label, call, action = script[i] if i < len(script) else rng.choice(script)
            env = _run_one(reg, call, action)
            result.envelopes.append(env)
            if i < len(script):
                result.highlights.setdefault(label, env.call_id)
            if progress is not None:
                progress(i + 1, total)
        if server is not None and linger_s > 0:
            reg.flush(timeout_s=5.0)
            time.sleep(linger_s)
    finally:
        reg.shutdown(timeout_s=10.0)
        if server is not None:
            server.close()
        log_stream.close()
    for env in result.envelopes:
        st = reg.status(env.call_id) if env.status is Status.UNKNOWN else None
        if st is not None and st.resolved is not None:
            result.resolved[env.call_id] = st.resolved.value
    return result


def _run_one(reg: ToolRegistry, call: ToolCall, action: Any) -> ToolResultEnvelope:
    if action != "cancel":
        return reg.call(call)
    # Cancel the call from another thread once it is running, as an agent loop would.
    call = ToolCall(call.name, call.arguments, call_id=_fresh_id(), mode=call.mode)

    def cancel_soon() -> None:
        # Wait until the scan is really running, then cancel it: a cancel that lands earlier
        # would (correctly) refuse the call before it starts, which is another story.
        for _ in range(500):
            time.sleep(0.01)
            if call.call_id in _SCANS_STARTED:
                reg.cancel_call(call.call_id or "", wait=False)
                return

    t = threading.Thread(target=cancel_soon, daemon=True)
    t.start()
    env = reg.call(call)
    t.join(timeout=3)
    return env


def _fresh_id() -> str:
    from ._ids import new_call_id

    return new_call_id()


def _serve(reg: ToolRegistry, port: int) -> Any:
    from .telemetry.metrics import MetricsSink, serve_metrics

    sink = next(s for s in reg.sinks if isinstance(s, MetricsSink))
    return serve_metrics(port, registry=sink)
