"""The old import name of ``support.otlp`` (tests/test_tracing.py still imports it)."""

from support.otlp import (
    OtlpGrpcReceiver,
    OtlpHttpReceiver,
    ReceivedEvent,
    ReceivedSpan,
    closed_port,
    decode_request,
    free_port,
)

__all__ = [
    "OtlpGrpcReceiver",
    "OtlpHttpReceiver",
    "ReceivedEvent",
    "ReceivedSpan",
    "closed_port",
    "decode_request",
    "free_port",
]
