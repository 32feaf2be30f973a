"""``tooltrace.telemetry.audit``, the trail's former home, still offers every name it offered."""

from __future__ import annotations

import importlib
import subprocess
import sys

import tooltrace.audit
import tooltrace.telemetry
import tooltrace.telemetry.audit as alias

FORMER = {
    "TOOLTRACE_AUDIT_FSYNC", "TOOLTRACE_AUDIT_KEY", "TOOLTRACE_AUDIT_STRICT", "Ack",
    "AmbiguousCallId", "AuditSink", "AuditStore", "Autopsy", "CallDetail", "CallNotFound",
    "CompactionResult", "DuplicateCallId", "Finding", "FsyncPolicy", "Recovered", "VerifyReport",
    "compact", "explain", "open_store", "recover_dead_segments", "verify", "verify_audit",
}


def test_the_former_imports_still_work() -> None:
    from tooltrace.telemetry.audit import AuditSink, open_store, verify

    assert AuditSink is tooltrace.telemetry.AuditSink
    assert open_store is tooltrace.audit.open_store
    assert verify is tooltrace.audit.verify


def test_every_former_name_is_the_one_of_its_new_home() -> None:
    assert set(alias.__all__) == FORMER
    sink = importlib.import_module("tooltrace.telemetry._auditsink")
    for name in FORMER:
        home = tooltrace.audit if name in tooltrace.audit.__all__ else sink
        assert getattr(alias, name) is getattr(home, name), name


def test_the_alias_loads_nothing_until_a_name_is_used() -> None:
    code = (
        "import sys, tooltrace.telemetry.audit\n"
        "print(','.join(m for m in sys.modules if m.startswith(('tooltrace.audit.',"
        " 'tooltrace.telemetry._auditsink', 'duckdb'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
