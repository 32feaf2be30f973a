"""The old import name of ``support.telemetry`` (tests/test_tracing.py still imports it)."""

from support.telemetry import make_record, steps_for

__all__ = ["make_record", "steps_for"]
