"""LoggingSink: JSON and console lines written off the call path, configured by args or env."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from support.telemetry import make_record

from tooltrace import ToolCall, ToolRegistry, tool
from tooltrace.model import Stage, Status
from tooltrace.telemetry import Sink
from tooltrace.telemetry.logging import TOOLTRACE_LOG_FORMAT, TOOLTRACE_LOG_LEVEL, LoggingSink


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No logging settings leak in from the environment."""
    monkeypatch.delenv(TOOLTRACE_LOG_LEVEL, raising=False)
    monkeypatch.delenv(TOOLTRACE_LOG_FORMAT, raising=False)


def _lines(buf: io.BytesIO | io.StringIO) -> list[dict[str, Any]]:
    raw = buf.getvalue()
    text = raw.decode() if isinstance(raw, bytes) else raw
    return [json.loads(line) for line in text.splitlines()]


@pytest.mark.parametrize("stream_type", [io.BytesIO, io.StringIO])
def test_json_lines_carry_the_call_fields(stream_type: type) -> None:
    buf = stream_type()
    sink = LoggingSink(buf)
    assert isinstance(sink, Sink) and sink.format == "json"
    rec = make_record("read_text", elapsed_us=1234, trace_id="a" * 32, span_id="b" * 16,
                      trace_sampled=True)
    failed = make_record("write_text", Status.FAILED, error_type="OSError")
    sink.emit(rec)
    sink.emit(failed)
    assert sink.flush(5.0)
    ok_line, bad_line = _lines(buf)
    assert ok_line["event"] == "tool_call" and ok_line["level"] == "info"
    for key, value in {
        "call_id": rec.call_id, "run_id": "run-1", "tool": "read_text", "status": "ok",
        "stage": None, "elapsed_ms": 1.234, "trace_id": "a" * 32, "span_id": "b" * 16,
        "summary": "read_text ok",
    }.items():
        assert ok_line[key] == value, key
    assert ok_line["timestamp"].endswith("Z")
    assert bad_line["level"] == "error" and bad_line["error_type"] == "OSError"
    sink.shutdown(1.0)


def test_warn_and_block_steps_get_lines_of_their_own() -> None:
    buf = io.BytesIO()
    sink = LoggingSink(buf)
    warned = make_record("read_text", warn=True)
    blocked = make_record("write_text", Status.REJECTED, reject_stage=Stage.HOOK, steps=(
        *make_record().steps[:2],
        make_record(warn=True).steps[2]._replace(decision="block",
                                                 detail={"reason": "outside scope"}),
    ))
    sink.emit(warned)
    sink.emit(blocked)
    sink.shutdown(5.0)
    lines = _lines(buf)
    assert [(x["event"], x["tool"]) for x in lines] == [
        ("tool_call", "read_text"), ("tool_step", "read_text"),
        ("tool_call", "write_text"), ("tool_step", "write_text"),
    ]
    warn_line, block_line = lines[1], lines[3]
    assert warn_line["decision"] == "warn" and warn_line["decider"] == "hook:guard"
    assert warn_line["level"] == "warning" and warn_line["call_id"] == warned.call_id
    assert block_line["decision"] == "block" and block_line["step"] == "pre_hook"
    assert block_line["detail"] == {"reason": "outside scope"}
    assert lines[2]["status"] == "rejected" and lines[2]["stage"] == "hook"
    assert lines[2]["level"] == "warning"


def test_console_format_and_level_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TOOLTRACE_LOG_FORMAT, "console")
    monkeypatch.setenv(TOOLTRACE_LOG_LEVEL, "warning")
    buf = io.StringIO()
    sink = LoggingSink(buf)
    assert sink.format == "console"
    rec = make_record("write_text", Status.REJECTED, reject_stage=Stage.POLICY)
    sink.emit(make_record("read_text"))  # info: below the level
    sink.emit(rec)
    sink.shutdown(5.0)
    out = buf.getvalue().splitlines()
    assert len(out) == 1
    line = out[0]
    assert "tool_call" in line and "[warning" in line
    assert f"call_id={rec.call_id}" in line and "status=rejected" in line
    assert "stage=policy" in line and "tool=write_text" in line
    with pytest.raises(json.JSONDecodeError):
        json.loads(line)


def _utf8_stream(binary: bool) -> io.BytesIO | io.TextIOWrapper:
    # A text stream that encodes as a file or a terminal does (StringIO takes any str).
    return io.BytesIO() if binary else io.TextIOWrapper(io.BytesIO(), encoding="utf-8")


def _written(buf: io.BytesIO | io.TextIOWrapper) -> list[str]:
    if isinstance(buf, io.TextIOWrapper):
        buf.flush()
        buf = buf.buffer  # type: ignore[assignment]
    return buf.getvalue().decode("utf-8").splitlines()  # type: ignore[union-attr]


@pytest.mark.parametrize("fmt", ["json", "console"])
@pytest.mark.parametrize("binary", [False, True])
def test_text_that_is_not_unicode_costs_no_line(fmt: str, binary: bool) -> None:
    # A lone surrogate (a file name os.fsdecode could not decode, a JSON escape) in a record:
    # the JSON encoder refused the line, a console line failed the write of its whole batch.
    buf = _utf8_stream(binary)
    sink = LoggingSink(buf, fmt=fmt)
    sink.emit(make_record("read_text"))
    sink.emit(make_record("caf\udce9", Status.FAILED, error_type="OSError"))
    sink.emit(make_record("stat"))
    sink.shutdown(5.0)
    lines = _written(buf)
    assert sink.export_failures == 0
    assert len(lines) == 3
    assert "tool=stat" in lines[2] if fmt == "console" else json.loads(lines[2])["tool"] == "stat"
    if fmt == "json":
        assert json.loads(lines[1])["tool"] == "caf\ufffd"
    else:  # the console renderer quotes a value with a space as its repr, not a word
        assert "summary='caf\\udce9 failed'" in lines[1] and "tool=caf\ufffd " in lines[1]


def test_records_without_a_line_at_the_level_are_not_queued() -> None:
    """Under ``error`` an ok call has no line to write, so the sink does not queue it (no work
    on its worker either); a failed call is written, and under ``warning`` a call whose steps
    include a warn decision is queued for its step line though its status line is info."""
    buf = io.BytesIO()
    sink = LoggingSink(buf, fmt="json", level="error")
    sink.emit(make_record("read_text"))
    sink.emit(make_record("write_text", Status.REJECTED))
    sink.emit_late(make_record("read_text"))  # late steps are info lines
    assert sink.depth == 0
    failed = make_record("fetch", Status.FAILED, error_type="TimeoutError")
    sink.emit(failed)
    assert sink.depth == 1
    sink.shutdown(5.0)
    assert [(x["call_id"], x["level"]) for x in _lines(buf)] == [(failed.call_id, "error")]
    buf = io.BytesIO()
    sink = LoggingSink(buf, fmt="json", level="warning")
    sink.emit(make_record("read_text"))
    sink.emit(make_record("read_text", warn=True))
    assert sink.depth == 1
    sink.shutdown(5.0)
    assert [(x["event"], x["level"]) for x in _lines(buf)] == [("tool_step", "warning")]


def test_arguments_beat_the_environment_and_bad_values_are_typed_errors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(TOOLTRACE_LOG_FORMAT, "console")
    monkeypatch.setenv(TOOLTRACE_LOG_LEVEL, "error")
    buf = io.BytesIO()
    sink = LoggingSink(buf, fmt="json", level="debug")
    sink.emit(make_record())
    sink.shutdown(2.0)
    assert _lines(buf)[0]["status"] == "ok"
    with pytest.raises(ValueError, match="log format"):
        LoggingSink(io.BytesIO(), fmt="xml")
    with pytest.raises(ValueError, match="log level"):
        LoggingSink(io.BytesIO(), level="chatty")


def test_default_stream_is_stderr(tmp_path: Path) -> None:
    code = textwrap.dedent(
        """
        from support.telemetry import make_record
        from tooltrace.telemetry.logging import LoggingSink
        sink = LoggingSink()
        sink.emit(make_record("read_text"))
        sink.shutdown(5.0)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent)}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    (line,) = [json.loads(x) for x in proc.stderr.splitlines() if x.startswith("{")]
    assert line["tool"] == "read_text"


class _BlockedStream(io.RawIOBase):
    """A stream whose writes hang until released, then fail."""

    def __init__(self) -> None:
        self.release = threading.Event()
        #: Writes that have stopped hanging (released, or given up after 10 s).
        self.unblocked = 0

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        self.release.wait(10)
        self.unblocked += 1
        raise OSError("disk on fire")


def test_a_stuck_or_broken_stream_never_blocks_or_raises_into_calls() -> None:
    stream = _BlockedStream()
    sink = LoggingSink(stream, max_queue=10, max_batch=1, interval_s=0.01)  # type: ignore[arg-type]
    for _ in range(1000):
        sink.emit(make_record())
    # The writer is stuck, the emitter is not: no emit waited for room, they were dropped.
    assert sink.dropped >= 1000 - 10 - 1
    assert sink.flush(0.3) is False
    # The flush gave up on its own timeout, not on the writer: that write still hangs.
    assert stream.unblocked == 0
    stream.release.set()
    assert sink.flush(5.0)
    assert sink.export_failures >= 1
    sink.shutdown(1.0)


def test_registry_calls_are_logged_with_trace_ids_and_late_steps(tmp_path: Path) -> None:
    from tooltrace.telemetry.tracing import TracingSink

    buf = io.BytesIO()
    logs = LoggingSink(buf)
    tracer = TracingSink(enabled=True, endpoint="http://127.0.0.1:1/v1/traces")
    (tmp_path / "ws").mkdir()
    reg = ToolRegistry(workspace=tmp_path / "ws", home=tmp_path / "home", sinks=[logs],
                       tracer=tracer, cancel_grace_s=0.2)

    @tool()
    def greet(name: str) -> str:
        """Say hello."""
        return f"hello {name}"

    done, release = threading.Event(), threading.Event()

    @tool(effect="local", cancellable=False, timeout_s=0.2)
    def stuck() -> str:
        """Finishes after its call has returned, however late the registry wakes."""
        release.wait(30)
        done.set()
        return "late"

    reg.register(greet)
    reg.register(stuck)
    env = reg.call(ToolCall("greet", {"name": "ada"}, run_id="r-42"))
    lost = reg.call(ToolCall("stuck", {}))
    release.set()
    assert lost.status is Status.UNKNOWN
    assert done.wait(5)
    # The runtime reports the late resolution once the abandoned tool really ends.
    deadline = time.monotonic() + 10
    while b"tool_late_step" not in buf.getvalue() and time.monotonic() < deadline:
        logs.flush(1.0)
        time.sleep(0.02)
    reg.shutdown(timeout_s=5.0)
    tracer.shutdown(0.2)
    lines = _lines(buf)
    greet_line = next(x for x in lines if x.get("tool") == "greet")
    assert greet_line["call_id"] == env.call_id and greet_line["run_id"] == "r-42"
    assert greet_line["trace_id"] == env.record.trace_id and len(greet_line["trace_id"]) == 32
    assert greet_line["span_id"] == env.record.span_id
    stuck_line = next(x for x in lines if x.get("event") == "tool_call" and x["tool"] == "stuck")
    assert stuck_line["status"] == "unknown" and stuck_line["level"] == "error"
    late = [x for x in lines if x["event"] == "tool_late_step"]
    assert late and late[0]["call_id"] == lost.call_id


def test_iso_timestamps_are_exact_and_match_datetime() -> None:
    """Log timestamps are formatted from a per-second cache; every one must equal the exact
    datetime rendering (integer arithmetic, so no float rounding), across seconds, year and
    leap-day boundaries, and after the cache was filled by another second."""
    import random
    from datetime import UTC, datetime, timedelta

    from tooltrace.telemetry.logging import _iso

    epoch = datetime(1970, 1, 1, tzinfo=UTC)

    def exact(us: int) -> str:
        return (epoch + timedelta(microseconds=us)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    rng = random.Random(7)
    samples = [0, 1, 999_999, 1_000_000, 951_782_399_999_999, 951_782_400_000_000]
    samples += [rng.randrange(0, 4_102_444_800_000_000) for _ in range(20_000)]
    base = 1_764_695_000_000_000
    samples += [base + rng.randrange(0, 3_000_000) for _ in range(2_000)]  # cache hits
    for us in samples:
        assert _iso(us) == exact(us), us
