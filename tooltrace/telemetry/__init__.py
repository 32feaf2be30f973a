"""Telemetry sinks: tracing, metrics, logging and audit, fed from finished call records."""

from ._sink import DurableSink, OpenSpan, Sink, SpanOpener
from ._worker import BatchWorker

__all__ = ["BatchWorker", "DurableSink", "OpenSpan", "Sink", "SpanOpener"]
