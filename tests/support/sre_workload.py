"""A demo workload for the SRE kit's tests: real tool calls through a real ``ToolRegistry``.

Every metric the dashboards and rules read comes from tooltrace's own ``MetricsSink``, served
over HTTP on 127.0.0.1 for a real Prometheus to scrape. The tools are chosen so that every
pipeline outcome happens:

- ``lookup``  fast reads (its own concurrency cap of 2, so calls also wait for admission);
  ``lookup`` with a wrong argument type is a parameter reject
- ``render``  returns text longer than the inline limit, so its result is offloaded
- ``deploy``  denied by a policy rule for ``target="prod"``, needs approval otherwise (and no
  approver is configured, so approval is denied)
- ``fetch``   blocked by a pre-hook for URLs containing ``blocked``
- ``explode`` raises (failed)
- ``commit``  a side-effecting tool that outlives its deadline and ignores cancellation
  (unknown)
- a name nobody registered (resolve reject, ``tool="_unregistered"``)
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tooltrace import (
    Capability,
    Effect,
    FunctionHook,
    HookDecision,
    HookView,
    Policy,
    RequireApproval,
    ToolCall,
    ToolRegistry,
    tool,
)
from tooltrace.policy import PolicyDecision, PolicyRequest, Verdict
from tooltrace.policy.file import Match, PatternRule
from tooltrace.telemetry import MetricsSink, TracingSink, serve_metrics

__all__ = ["MIXES", "Workload", "running_workload"]

INLINE_LIMIT = 512


@dataclass(frozen=True, slots=True)
class _DenyProd:
    """Policy rule: nothing deploys to production from an agent."""

    name: str = "deny_prod"

    def __call__(self, request: PolicyRequest) -> PolicyDecision | None:
        if request.tool.name == "deploy" and request.arguments.get("target") == "prod":
            return PolicyDecision(Verdict.DENY, self.name, "deploying to prod is not allowed")
        return None


def _block_urls(view: HookView) -> HookDecision | None:
    if "blocked" in str(view.arguments.get("url", "")):
        return HookDecision.block("URL is on the block list")
    return None


@tool(capability=Capability.READ, effect=Effect.NONE, timeout_s=5.0, max_concurrency=2)
def lookup(key: str) -> str:
    """Look a key up (a few milliseconds)."""
    time.sleep(random.uniform(0.001, 0.02))
    return f"value of {key}"


@tool(capability=Capability.READ, effect=Effect.NONE, timeout_s=5.0)
def render(size: int) -> str:
    """Render a report of ``size`` characters."""
    return "r" * size


@tool(capability=Capability.EXECUTE, effect=Effect.EXTERNAL, timeout_s=5.0)
def deploy(target: str) -> str:
    """Deploy to a target."""
    return f"deployed to {target}"


@tool(capability=Capability.NETWORK, effect=Effect.NONE, timeout_s=5.0)
def fetch(url: str) -> str:
    """Fetch a URL (pretend)."""
    return f"<html>{len(url)}</html>"


@tool(capability=Capability.READ, effect=Effect.NONE, timeout_s=5.0)
def explode(reason: str) -> str:
    """Always fails."""
    raise RuntimeError("the tool broke")


@tool(
    capability=Capability.WRITE,
    effect=Effect.LOCAL,
    timeout_s=0.05,
    cancellable=False,
)
def commit(message: str) -> str:
    """Writes something and takes longer than its deadline allows."""
    time.sleep(0.4)
    return "committed"


# name -> one call of that kind
MIXES: dict[str, Callable[[int], ToolCall]] = {
    "ok": lambda i: ToolCall("lookup", {"key": f"k{i % 7}"}),
    "params": lambda i: ToolCall("lookup", {"key": i}),
    "offload": lambda i: ToolCall("render", {"size": INLINE_LIMIT * 4}),
    "inline": lambda i: ToolCall("render", {"size": 16}),
    "policy": lambda i: ToolCall("deploy", {"target": "prod"}),
    "approval": lambda i: ToolCall("deploy", {"target": "staging"}),
    "hook": lambda i: ToolCall("fetch", {"url": "https://blocked.example/x"}),
    "fetch_ok": lambda i: ToolCall("fetch", {"url": "https://ok.example/x"}),
    "failed": lambda i: ToolCall("explode", {"reason": "x"}),
    "resolve": lambda i: ToolCall("no_such_tool", {}),
}


class Workload:
    """A registry with the metrics, tracing (in-memory export) and audit sinks, served for
    scraping on 127.0.0.1, plus helpers that drive calls through it."""

    def __init__(self, home: Path) -> None:
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        home.mkdir(parents=True, exist_ok=True)
        (home / "ws").mkdir(exist_ok=True)
        self.spans = InMemorySpanExporter()
        self.tracing = TracingSink(exporter=self.spans)
        self.metrics = MetricsSink()
        sinks: list[Any] = [self.metrics, self.tracing]
        audit = _audit_sink(home / "tt")
        if audit is not None:
            sinks.append(audit)
        # Typed loosely: frozen dataclasses expose ``name`` read-only, the protocols settable.
        rules: list[Any] = [
            _DenyProd(), RequireApproval(tools=frozenset({"deploy"})),
            # A rule being rolled out: every render is observed (observe_ask), none stopped.
            PatternRule("review_renders", Verdict.ASK, Match(tools=frozenset({"render"})),
                        observe=True),
        ]
        hooks: list[Any] = [FunctionHook(_block_urls, "url_blocklist", tools=frozenset({"fetch"}))]
        self.registry = ToolRegistry(
            workspace=home / "ws",
            home=home / "tt",
            sinks=sinks,
            tracer=self.tracing,
            policy=Policy(rules),
            hooks=hooks,
            max_concurrency=16,
            cancel_grace_s=0.05,
            max_inline_chars=INLINE_LIMIT,
        )
        for t in (lookup, render, deploy, fetch, explode, commit):
            self.registry.register(t)
        self.server = serve_metrics(0, "127.0.0.1", self.metrics)
        self.target = f"127.0.0.1:{self.server.port}"
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def call(self, kind: str, i: int = 0) -> Any:
        """Run one call of ``kind`` (a key of ``MIXES``, or ``unknown``)."""
        if kind == "unknown":
            env = self.registry.call(ToolCall("commit", {"message": f"m{i}"}))
        else:
            env = self.registry.call(MIXES[kind](i))
        with self._lock:
            self.counts[kind] = self.counts.get(kind, 0) + 1
        return env

    def burst(self, kinds: dict[str, int], parallel: int = 4) -> None:
        """Run ``n`` calls of each kind, ``parallel`` at a time (so admission queues form)."""
        todo = [k for k, n in kinds.items() for _ in range(n)]
        random.Random(7).shuffle(todo)
        chunks = [todo[i::parallel] for i in range(parallel)]
        threads = [
            threading.Thread(target=lambda c=c: [self.call(k, j) for j, k in enumerate(c)])
            for c in chunks
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)

    def run_in_background(self, kinds: dict[str, int], period_s: float = 0.2) -> None:
        """Keep running ``kinds`` every ``period_s`` until ``stop()``."""

        def loop() -> None:
            while not self._stop.is_set():
                self.burst(kinds)
                self._stop.wait(period_s)

        t = threading.Thread(target=loop, name="sre-workload", daemon=True)
        self._threads.append(t)
        t.start()

    def stop(self) -> None:
        """Stop background driving, the metrics endpoint and the registry."""
        self._stop.set()
        for t in self._threads:
            t.join(30)
        self._threads.clear()
        self.server.close()
        self.registry.shutdown(5.0)

    def trace_ids(self) -> set[str]:
        """Trace ids of every span the tracing sink has exported so far."""
        self.tracing.flush(5.0)
        return {format(s.context.trace_id, "032x") for s in self.spans.get_finished_spans()}


def _audit_sink(home: Path) -> Any:
    # The audit sink's queue depth is the audit backlog the dashboards and alerts watch.
    try:
        from tooltrace.telemetry import AuditSink
    except ImportError as exc:  # a component check: fails under CI=true, never left out silently
        from support.components import extra, missing

        missing(f"the audit sink cannot be imported ({exc}); install it with: {extra('all')}")
    return AuditSink(home)


@contextmanager
def running_workload(home: Path) -> Iterator[Workload]:
    """A ``Workload`` that is stopped on exit."""
    w = Workload(home)
    try:
        yield w
    finally:
        w.stop()
