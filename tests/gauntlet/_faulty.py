"""A process running calls with every sink on while everything around it fails.

Run as ``python _faulty.py HOME WORKSPACE OTLP_PORT CALLS STRICT``: the OTLP endpoint refuses
connections for the whole run, hooks raise and hang, and after a few calls the process's file
size limit (``RLIMIT_FSIZE``) is set just above what the audit trail holds, so the audit
directory is "full". Prints one JSON object: every call's outcome, whether its tool ran (and, in
strict mode, whether the tool found its intent on disk), and every sink's counters.
"""

from __future__ import annotations

import io
import json
import os
import resource
import signal
import sys
import time
from pathlib import Path
from typing import Any


def main(home: str, ws: str, port: int, n_calls: int, strict: bool) -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from tooltrace import (
        CallContext,
        Capability,
        Effect,
        HookView,
        ToolCall,
        ToolDefinition,
        create_registry,
        hook,
    )
    from tooltrace.telemetry.tracing import TracingSink

    @hook("opt_raises", tools={"opt_raise"})
    def opt_raises(view: HookView) -> None:
        raise RuntimeError("optional hook broke")

    @hook("req_raises", tools={"req_raise"}, required=True)
    def req_raises(view: HookView) -> None:
        raise RuntimeError("required hook broke")

    @hook("opt_hangs", tools={"opt_hang"}, timeout_s=0.05)
    def opt_hangs(view: HookView) -> None:
        time.sleep(0.3)

    @hook("req_hangs", tools={"req_hang"}, required=True, timeout_s=0.05)
    def req_hangs(view: HookView) -> None:
        time.sleep(0.3)

    tracing = TracingSink(endpoint=f"http://127.0.0.1:{port}/v1/traces",
                          protocol="http/protobuf", export_timeout_s=0.2, max_queue=64,
                          max_batch=16, interval_s=0.01)
    metrics = CollectorRegistry()
    log = io.BytesIO()
    reg = create_registry(
        ws, home=home, tracing=False, metrics_registry=metrics, log_stream=log,
        extra_sinks=(tracing,), audit_options={"strict": strict, "group_interval_ms": 5},
        hooks=[opt_raises, req_raises, opt_hangs, req_hangs],
    )
    ran: dict[str, bool] = {}
    segdir = Path(home) / "audit" / "segments"

    def act(ctx: CallContext) -> str:
        # Strict mode promises the intent is on disk before the tool runs: look for it.
        found = any(ctx.call_id.encode() in p.read_bytes() for p in segdir.glob("*.jsonl"))
        ran[ctx.call_id] = found
        return "done " + "x" * (20_000 if len(ran) % 7 == 0 else 10)  # some are offloaded

    tools = ("plain", "opt_raise", "req_raise", "opt_hang", "req_hang")
    for name in tools:
        reg.register(ToolDefinition(name=name, description=f"{name}: an audited side effect",
                                    parameters={"type": "object", "properties": {}},
                                    capability=Capability.WRITE, effect=Effect.LOCAL), act)

    calls: list[dict[str, Any]] = []

    def call(name: str) -> None:
        t0 = time.perf_counter()
        env = reg.call(ToolCall(name, {}))
        calls.append({"tool": name, "status": env.status.value,
                      "stage": env.reject_stage and env.reject_stage.value,
                      "call_id": env.call_id, "ms": (time.perf_counter() - t0) * 1000})

    for name in tools:  # the key, the first segment and artifacts directory exist now
        call(name)
    reg.flush(5.0)
    used = sum(p.stat().st_size for p in segdir.glob("*.jsonl"))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of death
    resource.setrlimit(resource.RLIMIT_FSIZE, (used + 30_000, resource.RLIM_INFINITY))
    for i in range(n_calls):
        call(tools[i % len(tools)])
    from tooltrace.telemetry import AuditSink

    audit = next(s for s in reg.sinks if isinstance(s, AuditSink))
    exposition = generate_latest(metrics).decode()
    reg.shutdown(timeout_s=15.0)
    lines = [ln for ln in log.getvalue().splitlines() if b'"event":"tool_call"' in ln]
    print(json.dumps({
        "calls": calls,
        "ran": ran,
        "tracing": {"exported": tracing.exported, "failures": tracing.export_failures,
                    "dropped": tracing.dropped, "depth": tracing.depth},
        "audit": {"acked": audit.acked_records, "dropped": audit.dropped,
                  "depth": audit.depth},
        "log_lines": len(lines),
        "exposition": exposition,
        "sink_errors": reg.sink_errors,
    }))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1")
    os._exit(0)  # do not wait for hung hook threads
