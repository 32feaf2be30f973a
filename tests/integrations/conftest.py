"""Fixtures of the framework adapters' tests: a real OpenTelemetry SDK pipeline, the marker file
of the bypass tests. ``workspace``, ``sink`` and ``registry`` come from ``tests/conftest.py``;
a missing framework is reported by ``support.components.require_module`` (skip locally, fail
under ``CI=true``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from support.trail import CountingTrail, SeenCallIds

from tooltrace import FunctionTool, Policy, ToolRegistry
from tooltrace.telemetry import TracingSink
from tooltrace.testing import RecordingSink


@dataclass
class Otel:
    """An SDK TracerProvider exporting to memory, and the tooltrace sink feeding it."""

    provider: TracerProvider
    exporter: InMemorySpanExporter
    sink: TracingSink

    def spans(self) -> tuple[ReadableSpan, ...]:
        """Every finished span (tooltrace's are exported by its worker: flush first)."""
        self.sink.flush(5.0)
        return self.exporter.get_finished_spans()

    def tool_spans(self) -> list[ReadableSpan]:
        """tooltrace's ``execute_tool`` spans."""
        return [s for s in self.spans() if s.name.startswith("execute_tool")]


@pytest.fixture
def otel() -> Iterator[Otel]:
    """A real SDK TracerProvider + in-memory exporter, and a TracingSink on it."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    sink = TracingSink(provider, interval_s=0.05)
    yield Otel(provider, exporter, sink)
    sink.shutdown(2.0)
    provider.shutdown()


@pytest.fixture
def marker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The file ``support.bypass.touch`` tool writes (its side effect)."""
    m = tmp_path / "side-effect.txt"
    monkeypatch.setenv("TOOLTRACE_TEST_MARKER", str(m))
    return m


@pytest.fixture
def make_registry(
    workspace: Path, tmp_path: Path, sink: RecordingSink
) -> Iterator[Callable[..., ToolRegistry]]:
    """Build registries over ``workspace`` (recording into ``sink`` unless ``sinks=`` says
    otherwise) with the given tools registered; all are shut down after the test."""
    made: list[ToolRegistry] = []

    def make(*tools: FunctionTool, **kwargs: Any) -> ToolRegistry:
        kwargs.setdefault("sinks", [sink])
        kwargs.setdefault("cancel_grace_s", 0.3)
        reg = ToolRegistry(workspace=workspace, home=tmp_path / "home", **kwargs)
        for t in tools:
            reg.register(t)
        made.append(reg)
        return reg

    yield make
    for reg in made:
        reg.shutdown(2.0)


@dataclass
class Watch:
    """What a registry's calls were named: every call id policy was asked about (``seen``),
    and how often the trail was searched for one (``trail``)."""

    seen: SeenCallIds
    trail: CountingTrail
    sink: RecordingSink

    def registry_kwargs(self) -> dict[str, Any]:
        """``make_registry`` keyword arguments: the rule as the policy, the trail beside
        ``sink``."""
        return {"policy": Policy([self.seen]), "sinks": [self.sink, self.trail]}


@pytest.fixture
def watch(tmp_path: Path, sink: RecordingSink) -> Watch:
    """A ``Watch`` over a fresh trail under ``<tmp>/trail``."""
    return Watch(SeenCallIds(), CountingTrail(home=tmp_path / "trail"), sink)
