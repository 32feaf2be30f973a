"""Shared helpers for the audit tests: a realistic synthetic workload of finished call records,
and a writer process the crash tests start and kill. Holds no tests itself.

Run as a script (``python tests/support/audit.py writer HOME FSYNC``) it is a writer
process: it emits records until killed and prints each acknowledged call id on stdout.
"""

from __future__ import annotations

import os
import random
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from tooltrace._ids import new_call_id
from tooltrace.model import Artifact, CallRecord, Stage, Status, Step

TOOLS = ("read_text", "write_text", "run_command", "job_status", "git_status")


def _steps(t0: int, kinds: list[tuple[str, str, str, dict[str, Any] | None]]) -> tuple[Step, ...]:
    out = []
    at = t0
    for i, (name, decider, decision, detail) in enumerate(kinds, start=1):
        el = 20 + (i * 37) % 400
        out.append(Step(i, name, at, el, decider, decision, detail))
        at += el
    return tuple(out)


def make_record(
    rng: random.Random,
    *,
    run_id: str = "run-1",
    kind: str | None = None,
    t0: int | None = None,
    tool: str | None = None,
) -> CallRecord:
    """One finished, redacted call record of a given kind (random kind when None).

    Kinds: ok, offload, params, policy, approval, hook_modify, hook_block, failed, unknown,
    cancelled, admission.
    """
    kind = kind or rng.choice(
        ["ok"] * 10
        + ["offload", "params", "policy", "approval", "hook_modify", "hook_block", "failed"]
        + ["unknown", "cancelled", "admission"]
    )
    tool = tool or rng.choice(TOOLS)
    t0 = t0 if t0 is not None else time.time_ns() // 1000
    cid = new_call_id()
    args: dict[str, Any] = {"path": f"src/mod{rng.randint(0, 99)}.py", "limit": 10}
    head = [
        ("resolve", "registry", "accept", {"source": "builtin"}),
        ("validate", "schema", "accept", None),
    ]
    policy = ("policy", "policy:workspace_read", "allow", {"paths": {"path": "src/x.py"}})
    exec_ok = ("execute", "tool", "ok", None)
    status, stage, started, art, preview, err = Status.OK, None, False, None, "42 lines", None
    hook_mod = False
    summary = f"{tool} ok"
    if kind == "params":
        steps = [head[0], ("validate", "schema", "reject", {"errors": ["limit: not an integer"]})]
        status, stage, summary = Status.REJECTED, Stage.PARAMS, "arguments rejected"
    elif kind == "policy":
        steps = [*head, ("policy", "policy:deny_outside_workspace", "deny", {"rule": "ws"})]
        status, stage, summary = Status.REJECTED, Stage.POLICY, "denied by policy"
    elif kind == "approval":
        steps = [
            *head,
            ("policy", "policy:ask_writes", "ask", None),
            ("approval", "user:alice", "deny", {"reason": "not now"}),
        ]
        status, stage, summary = Status.REJECTED, Stage.APPROVAL, "approval denied"
    elif kind == "admission":
        steps = [*head, policy, ("admission", "runtime", "reject", {"waited_ms": 5000})]
        status, stage, summary = Status.REJECTED, Stage.ADMISSION, "queue full"
    elif kind == "hook_block":
        steps = [*head, policy, ("pre_hook", "hook:no_rm", "block", {"reason": "rm -rf"})]
        status, stage, summary = Status.REJECTED, Stage.HOOK, "blocked by hook"
    else:
        steps = [*head, policy]
        if kind == "hook_modify":
            hook_mod = True
            diff = {"limit": {"old": 10, "new": 5}}
            steps += [
                ("pre_hook", "hook:cap_limit", "modify", {"diff": diff}),
                ("revalidate", "schema", "accept", None),
                policy,
            ]
        steps.append(("admission", "runtime", "admit", {"waited_ms": 0.1}))
        started = True
        if kind == "failed":
            steps.append(("execute", "tool", "error", {"error_type": "FileNotFoundError"}))
            status, err, summary, preview = Status.FAILED, "FileNotFoundError", "failed", None
        elif kind == "unknown":
            steps += [
                ("execute", "tool", "started", None),
                ("deadline", "runtime", "expired", {"timeout_s": 5}),
                ("cancel_requested", "runtime", "requested", None),
            ]
            status, summary, preview = Status.UNKNOWN, "deadline passed; outcome unknown", None
        elif kind == "cancelled":
            steps += [
                ("execute", "tool", "started", None),
                ("cancel_requested", "user:bob", "requested", None),
                ("cancelled", "tool", "confirmed", None),
            ]
            status, summary, preview = Status.CANCELLED, "cancelled", None
        else:
            steps += [exec_ok, ("redact", "runtime", "clean", {"secrets": 0})]
            if kind == "offload":
                sha = f"{rng.getrandbits(256):064x}"
                art = Artifact(f"artifacts/{sha[:2]}/{sha}.txt", 250_000, 250_000, sha)
                steps.append(("offload", "runtime", "offload", {"chars": 250_000}))
                preview = "first lines ..."
            steps.append(("post_hook", "hook:audit_note", "continue", None))
        steps.append(("envelope", "registry", status.value, None))
    st = _steps(t0, steps)
    elapsed = sum(s.elapsed_us for s in st) + rng.randint(0, 50_000)
    return CallRecord(
        call_id=cid,
        run_id=run_id,
        tool=tool,
        source="builtin",
        status=status,
        reject_stage=stage,
        summary=summary,
        error_type=err,
        started_at_us=t0,
        elapsed_us=elapsed,
        execution_started=started,
        args_redacted=args,
        result_preview=preview,
        artifact=art,
        steps=st,
        trace_id=f"{rng.getrandbits(128):032x}",
        span_id=f"{rng.getrandbits(64):016x}",
        hook_modified=hook_mod,
    )


def workload(n: int, seed: int = 7, runs: int = 3) -> Iterator[CallRecord]:
    """``n`` records over ``runs`` runs, one of every kind first, then random kinds."""
    rng = random.Random(seed)
    kinds = ["ok", "offload", "params", "policy", "approval", "hook_modify", "hook_block"]
    kinds += ["failed", "unknown", "cancelled", "admission"]
    t0 = time.time_ns() // 1000 - n * 1000
    for i in range(n):
        kind = kinds[i] if i < len(kinds) else None
        yield make_record(rng, run_id=f"run-{i % runs}", kind=kind, t0=t0 + i * 1000)


def _writer_main(home: str, fsync: str, seconds: float | None = None) -> None:
    from tooltrace.audit import Ack
    from tooltrace.telemetry import AuditSink

    out = sys.stdout

    def on_ack(ack: Ack) -> None:
        out.write("".join(c + "\n" for c in ack.call_ids))
        out.flush()

    sink = AuditSink(home, fsync=fsync, group_interval_ms=2, on_ack=on_ack)
    rng = random.Random(os.getpid())
    out.write("ready\n")
    out.flush()
    end = None if seconds is None else time.monotonic() + seconds
    # Flat out until killed; at about 2,000 calls/s when timed (a steady agent workload).
    burst, pause = (50, 0.001) if end is None else (10, 0.005)
    while end is None or time.monotonic() < end:
        for _ in range(burst):
            sink.emit(make_record(rng, run_id=f"p{os.getpid()}"))
        time.sleep(pause)
    sink.shutdown()
    out.write(f"done {sink.dropped}\n")
    out.flush()


if __name__ == "__main__" and len(sys.argv) >= 4 and sys.argv[1] == "writer":
    _writer_main(sys.argv[2], sys.argv[3], float(sys.argv[4]) if len(sys.argv) > 4 else None)


# -- a real workload through the registry ------------------------------------------------------

SECRET = "sk-live-4f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c"


def run_real_workload(home: Any, workspace: Any, *, strict: bool = False) -> dict[str, str]:
    """Drive one of every kind of call through a real ``ToolRegistry`` with an ``AuditSink``.

    Returns kind -> call id. Kinds: ok, params, policy, approved, approval, hook_modify,
    hook_block, offload, failed, unknown (later resolved), secret.
    """
    from pathlib import Path

    from support.runtime import wait_for
    from tooltrace import (
        ApprovalDecision,
        ApprovalRequest,
        HookDecision,
        HookView,
        Policy,
        RequireApproval,
        ToolCall,
        hook,
        tool,
    )
    from tooltrace.builtins import default_registry
    from tooltrace.telemetry import AuditSink

    ws = Path(workspace)
    (ws / "notes").mkdir(parents=True, exist_ok=True)
    (ws / "notes" / "a.txt").write_text("alpha\n")

    def approver(req: ApprovalRequest) -> ApprovalDecision:
        ok = req.arguments.get("env") == "staging"
        return ApprovalDecision(ok, who="alice", reason="staging only")

    @hook("cap_limit", tools={"search"})
    def cap_limit(view: HookView) -> HookDecision:
        if int(view.arguments.get("limit", 0)) > 10:
            return HookDecision.modify(arguments={**view.arguments, "limit": 10},
                                       reason="limit capped at 10")
        return HookDecision.proceed()

    @hook("no_forbidden", tools={"search"})
    def no_forbidden(view: HookView) -> HookDecision:
        if view.arguments.get("query") == "forbidden":
            return HookDecision.block("this query is not allowed")
        return HookDecision.proceed()

    sink = AuditSink(home, strict=strict)
    reg = default_registry(
        workspace=ws, home=home, sinks=[sink], approver=approver, cancel_grace_s=0.05,
        policy=Policy([RequireApproval(tools=frozenset({"deploy"}))]), hooks=[cap_limit,
                                                                              no_forbidden],
    )

    @tool(capability="read")
    def search(query: str, limit: int = 5) -> str:
        """Search."""
        return f"{limit} hits for {query}"

    @tool(capability="execute", effect="external")
    def deploy(env: str, token: str = "") -> str:
        """Deploy."""
        return f"deployed to {env}"

    @tool(capability="read")
    def dump(size: int) -> str:
        """Return a lot of text."""
        return "line of output\n" * size

    @tool(capability="read")
    def explode() -> str:
        """Always fails."""
        raise FileNotFoundError("no such thing")

    release = threading.Event()

    @tool(capability="write", effect="local", timeout_s=0.15, cancellable=False)
    def slow_write(path: str) -> str:
        """Ends only once its call has returned (abandoned at its deadline); cannot be stopped."""
        release.wait(30)
        return "written"

    for t in (search, deploy, dump, explode, slow_write):
        reg.register(t)
    out: dict[str, str] = {}
    run = "run-real"

    def call(kind: str, name: str, args: dict[str, Any]) -> None:
        out[kind] = reg.call(ToolCall(name, args, run_id=run)).call_id

    call("ok", "read_text", {"path": "notes/a.txt"})
    call("params", "read_text", {"path": 42})
    call("policy", "read_text", {"path": "../outside.txt"})
    call("approved", "deploy", {"env": "staging"})
    call("approval", "deploy", {"env": "prod"})
    call("hook_modify", "search", {"query": "q", "limit": 50})
    call("hook_block", "search", {"query": "forbidden"})
    call("offload", "dump", {"size": 5000})
    call("failed", "explode", {})
    call("secret", "deploy", {"env": "staging", "token": SECRET})
    call("unknown", "slow_write", {"path": "notes/b.txt"})
    release.set()  # the abandoned call finishes now and its late ``resolved`` step is emitted
    wait_for(lambda: reg.status(out["unknown"]).resolved, 10.0, "the late resolution")
    reg.shutdown(timeout_s=5.0)
    return out


def start_writer(home: Any, fsync: str = "grouped", seconds: float | None = None) -> Any:
    """Start a writer process (see the module docstring); return the ``Popen``."""
    import subprocess

    cmd = [sys.executable, __file__, "writer", str(home), fsync]
    if seconds is not None:
        cmd.append(str(seconds))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, env=env)


def acked_ids(output: bytes) -> set[str]:
    """Call ids a writer printed as acknowledged (a line cut by a kill is not one)."""
    lines = output.split(b"\n")[:-1]  # whatever follows the last newline is incomplete
    return {x.decode() for x in lines if len(x) == 36}


def fork_writer(home: Any, ack_file: Any, fsync: str = "grouped") -> int:
    """Fork a writer process (fast: no interpreter start-up); it appends each acknowledged
    call id to ``ack_file`` and writes until killed. Returns its pid once it is writing."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        try:
            os.close(r)
            from tooltrace.audit import Ack
            from tooltrace.telemetry import AuditSink

            fd = os.open(ack_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

            def on_ack(ack: Ack) -> None:
                os.write(fd, "".join(c + "\n" for c in ack.call_ids).encode())

            sink = AuditSink(home, fsync=fsync, group_interval_ms=2, on_ack=on_ack)
            rng = random.Random(os.getpid())
            os.write(w, b"r")
            os.close(w)
            while True:
                for _ in range(10):
                    sink.emit(make_record(rng, run_id=f"p{os.getpid()}"))
                time.sleep(0.001)
        finally:
            os._exit(3)
    os.close(w)
    assert os.read(r, 1) == b"r"
    os.close(r)
    return pid


def collect(proc: Any, timeout_s: float = 60.0) -> bytes:
    """Everything a writer process printed, once it has exited.

    Reads through the same buffered pipe ``readline`` used (``communicate`` with a timeout
    would bypass that buffer and lose what it already holds).
    """
    out: bytes = proc.stdout.read()
    proc.wait(timeout_s)
    return out
