"""``tooltrace export --format ocsf`` over a real trail: every event validates against the OCSF
schema (ocsf-lib, offline), calls map to API Activity and approvals to User Access Management,
no secret leaves (not even one that reached a summary unredacted), ``--since`` filters by time
and by call id, ``--follow`` ships what is written after it started exactly once (across a
compaction and new writers) and stops cleanly on SIGTERM or at ``--max-events``, and the OTLP
path delivers to a real loopback receiver that decodes ``ExportLogsServiceRequest``."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from support.ocsf_events import validate
from support.otlp import free_port
from support.runtime import wait_for

from tooltrace import (
    ApprovalDecision,
    ApprovalRequest,
    Policy,
    PolicyDecision,
    Principal,
    RequireApproval,
    Status,
    ToolCall,
    ToolResultEnvelope,
    create_registry,
    tool,
)
from tooltrace.audit import OCSF_VERSION, compact, ocsf_batches
from tooltrace.cli import main
from tooltrace.model import CallRecord
from tooltrace.policy import Verdict
from tooltrace.telemetry import AuditSink, TracingSink

TOOLTRACE = Path(sys.executable).parent / "tooltrace"
SECRET = "sk-ant-api03-" + "Zq8Xv3Lm5Np7Rt9Wy2Bc4Df6Gh8Jk0Mn2Pq4St6Uv8Wx0Yz"
GH_TOKEN = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
ANN = Principal(user="ann", agent="helper", tenant="acme", roles=("dev", "oncall"))


@tool(capability="network", effect="external")
def deploy(service: str) -> str:
    """Pretend to deploy a service."""
    return f"deployed {service}"


@tool(capability="write", effect="local")
def drop_table(name: str) -> str:
    """Pretend to drop a table."""
    return f"dropped {name}"


@tool(capability="execute", effect="local")
def boom(x: str) -> str:
    """Fail."""
    raise RuntimeError("kaput")


class NoDrops:
    """Refuses every drop_table call."""

    name = "no_drops"

    def __call__(self, request: Any) -> PolicyDecision | None:
        if request.tool.name == "drop_table":
            return PolicyDecision(Verdict.DENY, self.name, "tables are not dropped")
        return None


def approver(req: ApprovalRequest) -> ApprovalDecision:
    if req.arguments.get("service") == "db":
        return ApprovalDecision(False, who="bob", reason="not at night")
    return ApprovalDecision(True, who="alice@example.com", ttl=timedelta(hours=1),
                            reason=f"release window; key {SECRET}")


def registry(ws: Path, home: Path, **kw: Any) -> Any:
    reg = create_registry(ws, home=home, tracing=False, metrics=False, logging=False,
                          approver=approver,
                          policy=Policy([RequireApproval(tools=frozenset({"deploy"})), NoDrops()]),
                          **kw)
    for t in (deploy, drop_table, boom):
        reg.register(t)
    return reg


@pytest.fixture(scope="module")
def trail(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A home with a compacted first session (traced, principal ann) and a second session's
    sealed segment not compacted."""
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    base = tmp_path_factory.mktemp("export")
    ws, home = base / "ws", base / "home"
    ws.mkdir()
    (ws / "notes.txt").write_text("hello\n")
    reg = registry(ws, home, extra_sinks=(TracingSink(exporter=InMemorySpanExporter()),))

    def call(name: str, args: dict[str, Any]) -> ToolResultEnvelope:
        env: ToolResultEnvelope = reg.call(ToolCall(name, args, principal=ANN))
        return env

    first = {
        "read": call("read_text", {"path": "notes.txt"}),
        "write": call("write_text", {"path": "out.txt", "text": f"key {SECRET}\n"}),
        "approved": call("deploy", {"service": "api"}),
        "refused": call("deploy", {"service": "db"}),
        "policy": call("drop_table", {"name": "users"}),
        "failed": call("boom", {"x": "y"}),
        "params": call("boom", {"y": 1}),
    }
    reg.shutdown()
    assert [e.status for e in first.values()] == [
        Status.OK, Status.OK, Status.OK, Status.REJECTED, Status.REJECTED, Status.FAILED,
        Status.REJECTED]
    assert compact(home).calls == len(first)
    reg = registry(ws, home)
    second = {"read2": reg.call(ToolCall("read_text", {"path": "notes.txt"})),
              "failed2": reg.call(ToolCall("boom", {"x": "z"}))}
    reg.shutdown()
    approvals = {k: next(s.detail for s in first[k].record.steps if s.step == "approval")
                 for k in ("approved", "refused")}
    return {"home": home, "ws": ws, "calls": {**first, **second}, "approvals": approvals}


def run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "TOOLTRACE_HOME"}
    return subprocess.run([str(TOOLTRACE), "export", *args], capture_output=True, text=True,
                          env=env, timeout=timeout)


def events_of(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def exported(trail: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    res = run("--format", "ocsf", "--home", str(trail["home"]))
    assert res.returncode == 0, res.stderr
    return res.stdout, events_of(res.stdout)


def by_uid(events: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out = {e["metadata"]["uid"]: e for e in events}
    assert len(out) == len(events), "an event was exported twice"
    return out


def test_every_event_validates_against_the_ocsf_schema(
        trail: dict[str, Any], exported: tuple[str, list[dict[str, Any]]]) -> None:
    _text, events = exported
    assert len(events) == len(trail["calls"]) + len(trail["approvals"])
    for e in events:
        assert e["metadata"]["version"] == OCSF_VERSION
        assert validate(e) == [], (e["metadata"]["uid"], validate(e))
    uids = by_uid(events)
    assert {e.call_id for e in trail["calls"].values()} | {
        a["approval_id"] for a in trail["approvals"].values()} == set(uids)
    assert {e["class_uid"] for e in events} == {6003, 3005}


def test_the_validator_finds_what_is_wrong(exported: tuple[str, list[dict[str, Any]]]) -> None:
    _text, events = exported
    e = json.loads(json.dumps(events[0]))
    e["activity_id"], e["status"], e["foo"] = 7, "Fine", 1
    del e["metadata"]["product"]
    problems = "\n".join(validate(e))
    for what in ("activity_id: 7", "foo: not an attribute", "metadata.product: required",
                 "type_uid"):
        assert what in problems


def test_calls_are_api_activity(trail: dict[str, Any],
                                exported: tuple[str, list[dict[str, Any]]]) -> None:
    _text, events = exported
    ev = by_uid(events)
    calls = trail["calls"]

    def of(key: str) -> dict[str, Any]:
        return ev[calls[key].call_id]

    read, rec = of("read"), calls["read"].record
    assert (read["class_uid"], read["activity_id"], read["activity_name"]) == (6003, 2, "Read")
    assert (read["status_id"], read["status"], read["status_code"]) == (1, "Success", "ok")
    assert read["api"]["operation"] == "read_text"
    assert read["api"]["request"]["uid"] == rec.call_id
    assert read["api"]["service"] == {"name": "builtin"}
    assert read["time"] == rec.started_at_us // 1000 == read["start_time"]
    assert read["duration"] == read["end_time"] - read["start_time"] >= 0
    assert read["actor"]["session"]["uid"] == rec.run_id == read["metadata"]["correlation_uid"]
    assert read["actor"]["user"]["name"] == "ann" and read["actor"]["app_name"] == "helper"
    assert read["actor"]["user"]["groups"] == [{"name": "dev"}, {"name": "oncall"}]
    assert read["metadata"]["tenant_uid"] == "acme"
    assert read["metadata"]["product"] == {"name": "tooltrace", "vendor_name": "tooltrace",
                                           "version": read["metadata"]["product"]["version"]}
    assert read["trace"]["uid"] == rec.trace_id and read["trace"]["span"]["uid"] == rec.span_id
    assert "trace" in read["metadata"]["profiles"]
    assert {"name": "actor.user.name", "type_id": 4, "type": "User Name",
            "value": "ann"} in read["observables"]
    assert (read["action"], read["disposition"], read["severity_id"]) == ("Allowed", "Allowed", 1)
    assert of("write")["activity_name"] == "Update"
    dep = of("approved")
    assert (dep["activity_id"], dep["activity_name"], dep["type_name"]) == (
        99, "Network", "API Activity: Other")
    assert dep["policy"] == {"name": "require_approval"} and dep["status_id"] == 1
    refused = of("refused")
    assert (refused["status_id"], refused["status_code"], refused["status_detail"]) == (
        2, "rejected", "approval")
    assert (refused["action"], refused["disposition"], refused["severity"]) == (
        "Denied", "Blocked", "Medium")
    dropped = of("policy")
    assert dropped["policy"] == {"name": "no_drops"} and dropped["disposition"] == "Blocked"
    assert dropped["unmapped"]["execution_started"] is False
    failed = of("failed")
    assert (failed["activity_name"], failed["status_code"], failed["action"]) == (
        "Execute", "failed", "Allowed")
    assert failed["api"]["response"]["error"] == "RuntimeError"
    params = of("params")
    assert (params["disposition"], params["severity"], params["status_detail"]) == (
        "Rejected", "Low", "params")
    # The second session named nobody: its calls' actor is their run.
    plain = of("read2")
    assert "user" not in plain["actor"] and plain["actor"]["session"]["uid"] == (
        calls["read2"].record.run_id)
    assert "trace" not in plain and plain["metadata"]["profiles"] == ["security_control"]


def test_approvals_are_user_access_management(
        trail: dict[str, Any], exported: tuple[str, list[dict[str, Any]]]) -> None:
    _text, events = exported
    ev = by_uid(events)
    yes, no = trail["approvals"]["approved"], trail["approvals"]["refused"]
    ok, ko = ev[yes["approval_id"]], ev[no["approval_id"]]
    for e in (ok, ko):
        assert (e["class_uid"], e["activity_id"], e["type_uid"]) == (3005, 1, 300501)
        assert e["privileges"] == ["call:deploy"] and e["resource"]["name"] == "deploy"
        assert e["user"]["name"] == "ann" and e["metadata"]["tenant_uid"] == "acme"
        assert e["metadata"]["log_name"] == "approvals"
    assert (ok["status"], ok["action"], ok["disposition"]) == ("Success", "Allowed", "Approved")
    assert ok["actor"]["user"]["name"] == "alice@example.com"
    assert ok["resource"]["data"]["args_sha256"] == yes["args_sha256"]
    assert ok["resource"]["data"]["arguments"] == {"service": "api"}
    assert ok["unmapped"]["expires_at"] == yes["expires_at_us"] // 1000
    assert ok["unmapped"]["call_id"] == trail["calls"]["approved"].call_id
    assert (ko["status"], ko["action"], ko["disposition"]) == ("Failure", "Denied", "Rejected")
    assert ko["actor"]["user"]["name"] == "bob" and ko["status_detail"] == "not at night"
    assert ko["unmapped"]["expires_at"] is None


def test_a_secret_never_leaves(trail: dict[str, Any], tmp_path: Path,
                               exported: tuple[str, list[dict[str, Any]]]) -> None:
    text, events = exported
    assert SECRET not in text and "sk-ant" not in text
    write = by_uid(events)[trail["calls"]["write"].call_id]
    assert "[REDACTED" in write["api"]["request"]["data"]["text"]
    assert "[REDACTED" in by_uid(events)[trail["approvals"]["approved"]["approval_id"]][
        "status_detail"]
    # A record that reached the trail with a secret in its summary (written past the
    # registry, which would have redacted it) still leaves redacted.
    home = tmp_path / "raw"
    sink = AuditSink(home)
    rec = trail["calls"]["failed"].record
    sink.emit(CallRecord(**{**{f: getattr(rec, f) for f in rec.__struct_fields__},
                            "summary": f"boom failed with {GH_TOKEN}",
                            "args_redacted": {"x": GH_TOKEN}}))
    sink.shutdown()
    assert GH_TOKEN in "".join(p.read_text() for p in (home / "audit").rglob("*.jsonl"))
    out = CliRunner().invoke(main, ["export", "--home", str(home)])
    assert out.exit_code == 0, out.output
    (e,) = events_of(out.output)
    assert GH_TOKEN not in out.output and "[REDACTED" in e["message"]
    assert validate(e) == []


def test_since_filters_by_time_and_by_call_id(trail: dict[str, Any]) -> None:
    home, calls = str(trail["home"]), trail["calls"]

    def uids(*args: str, code: int = 0) -> list[str]:
        res = CliRunner().invoke(main, ["export", "--home", home, *args])
        assert res.exit_code == code, res.output
        return [e["metadata"]["uid"] for e in events_of(res.output)] if code == 0 else []

    assert len(uids("--since", "1h")) == len(calls) + 2
    assert uids("--since", "2099-01-01T00:00:00Z") == []
    later = [calls["read2"].call_id, calls["failed2"].call_id]
    assert uids("--since", calls["read2"].call_id) == later
    # A prefix no other call shares (ids made in the same millisecond share 13 characters).
    ids = [c.call_id for c in calls.values()]
    cid = calls["read2"].call_id
    n = next(n for n in range(13, len(cid)) if sum(i.startswith(cid[:n]) for i in ids) == 1)
    assert uids("--since", cid[:n]) == later
    # By time: the calls started at or after the refused deploy, and the refusal itself.
    at = datetime.fromtimestamp(calls["refused"].record.started_at_us / 1e6, UTC)
    got = {e["metadata"]["uid"] for b in ocsf_batches(trail["home"], since=at) for e in b}
    want = {calls[k].call_id for k in ("refused", "policy", "failed", "params", "read2",
                                       "failed2")} | {trail["approvals"]["refused"]["approval_id"]}
    assert got == want
    res = CliRunner().invoke(main, ["export", "--home", home, "--since", "ffffffff-ffff"])
    assert res.exit_code == 1 and "no call" in res.output
    res = CliRunner().invoke(main, ["export", "--home", home, "--since", "soon!"])
    assert res.exit_code == 2


def test_usage_and_missing_trail(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["export", "--home", str(tmp_path / "none")])
    assert res.exit_code == 1 and "no audit trail" in res.output
    res = CliRunner().invoke(main, ["export", "--home", str(tmp_path), "-o", "x.jsonl",
                                    "--otlp-endpoint", "http://127.0.0.1:1/v1/logs"])
    assert res.exit_code == 2
    res = CliRunner().invoke(main, ["export", "--format", "cef", "--home", str(tmp_path)])
    assert res.exit_code == 2


def _lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    text = path.read_text()
    return [json.loads(x) for x in text[: text.rfind("\n") + 1].splitlines() if x]


@pytest.fixture
def copy(trail: dict[str, Any], tmp_path: Path) -> Path:
    home = tmp_path / "home"
    shutil.copytree(trail["home"], home)
    return home


def _follower(*args: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != "TOOLTRACE_HOME"}
    return subprocess.Popen([str(TOOLTRACE), "export", "--follow", "--interval", "0.05", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def test_follow_ships_every_new_record_once_and_stops_on_sigterm(
        trail: dict[str, Any], copy: Path, tmp_path: Path) -> None:
    out = tmp_path / "events.jsonl"
    before = len(trail["calls"]) + len(trail["approvals"])
    proc = _follower("--home", str(copy), "-o", str(out))
    try:
        wait_for(lambda: len(_lines(out)) == before, 60, "the events already there")
        new: list[str] = []
        reg = registry(trail["ws"], copy)
        for _ in range(5):
            new.append(reg.call(ToolCall("read_text", {"path": "notes.txt"})).call_id)
        env = reg.call(ToolCall("deploy", {"service": "web"}))
        new.append(env.call_id)
        new.append(next(s.detail for s in env.record.steps if s.step == "approval")[
            "approval_id"])
        reg.shutdown()
        wait_for(lambda: len(_lines(out)) == before + len(new), 60, "the new records")
        # The second session's segment and this one's are compacted while the export
        # follows: what it read of them is not read again from the Parquet files.
        assert compact(copy).segments >= 1
        reg = registry(trail["ws"], copy)
        new.append(reg.call(ToolCall("boom", {"x": "after compaction"})).call_id)
        reg.shutdown()
        wait_for(lambda: len(_lines(out)) == before + len(new), 60, "the last record")
    finally:
        proc.send_signal(signal.SIGTERM)
        _stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    events = _lines(out)
    uids = [e["metadata"]["uid"] for e in events]
    assert len(uids) == len(set(uids)) == before + len(new)
    assert set(new) <= set(uids)
    assert all(validate(e) == [] for e in events)
    # The output file is appended to: a second export adds, it does not replace.
    res = run("--home", str(copy), "-o", str(out), "--since", new[-1])
    assert res.returncode == 0 and len(_lines(out)) == before + len(new) + 1


def test_without_follow_the_export_ends_while_writers_go_on(trail: dict[str, Any],
                                                          copy: Path) -> None:
    before = len(trail["calls"]) + len(trail["approvals"])
    stop = threading.Event()
    reg = registry(trail["ws"], copy)
    first = reg.call(ToolCall("read_text", {"path": "notes.txt"}))
    assert reg.flush(30)

    def write() -> None:
        while not stop.wait(0.002):  # a steady agent, not a flood
            reg.call(ToolCall("read_text", {"path": "notes.txt"}))

    writer = threading.Thread(target=write)
    writer.start()
    try:
        res = run("--home", str(copy))
    finally:
        stop.set()
        writer.join(60)
        reg.shutdown()
    assert res.returncode == 0, res.stderr
    uids = [e["metadata"]["uid"] for e in events_of(res.stdout)]
    assert len(uids) == len(set(uids)) > before and first.call_id in uids


def test_follow_stops_by_itself_at_max_events(trail: dict[str, Any], copy: Path) -> None:
    before = len(trail["calls"]) + len(trail["approvals"])
    proc = _follower("--home", str(copy), "--max-events", str(before + 2))
    reg = registry(trail["ws"], copy)
    ids = [reg.call(ToolCall("read_text", {"path": "notes.txt"})).call_id for _ in range(3)]
    reg.shutdown()
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    uids = [e["metadata"]["uid"] for e in events_of(stdout)]
    assert len(uids) == before + 2 and uids[-2:] == ids[:2]


class _LogsReceiver:
    """An OTLP/HTTP logs endpoint on 127.0.0.1 that decodes ``ExportLogsServiceRequest``."""

    def __init__(self, status: int = 200) -> None:
        from opentelemetry.proto.collector.logs.v1 import logs_service_pb2

        self.records: list[dict[str, Any]] = []
        self.raw = b""
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.raw += body
                req = logs_service_pb2.ExportLogsServiceRequest()
                req.ParseFromString(body)
                for rl in req.resource_logs:
                    res = {a.key: a.value.string_value for a in rl.resource.attributes}
                    for sl in rl.scope_logs:
                        for r in sl.log_records:
                            outer.records.append({
                                "body": r.body.string_value, "resource": res,
                                "scope": sl.scope.name, "time": r.time_unix_nano,
                                "severity": r.severity_number,
                                "trace_id": r.trace_id.hex(), "span_id": r.span_id.hex(),
                                "attributes": {a.key: a.value.int_value or a.value.string_value
                                               for a in r.attributes}})
                self.send_response(status)
                self.send_header("Content-Type", "application/x-protobuf")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.port = free_port()
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1/logs"

    def __enter__(self) -> _LogsReceiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[_LogsReceiver]:
    with _LogsReceiver() as rx:
        yield rx


def test_otlp_delivers_each_event_as_a_log_record(
        trail: dict[str, Any], receiver: _LogsReceiver,
        exported: tuple[str, list[dict[str, Any]]]) -> None:
    res = run("--home", str(trail["home"]), "--otlp-endpoint", receiver.endpoint)
    assert res.returncode == 0, res.stderr
    assert res.stdout == ""
    _text, events = exported
    assert len(receiver.records) == len(events)
    bodies = [json.loads(r["body"]) for r in receiver.records]
    assert sorted(bodies, key=lambda e: e["metadata"]["uid"]) == sorted(
        events, key=lambda e: e["metadata"]["uid"])
    assert SECRET.encode() not in receiver.raw and b"sk-ant" not in receiver.raw
    rec = trail["calls"]["read"].record
    (read,) = [r for r in receiver.records if json.loads(r["body"])["metadata"]["uid"] ==
               rec.call_id]
    assert read["trace_id"] == rec.trace_id and read["span_id"] == rec.span_id
    assert read["time"] == rec.started_at_us // 1000 * 1_000_000
    assert read["attributes"] == {"ocsf.class_uid": 6003, "ocsf.type_uid": 600302,
                                  "ocsf.uid": rec.call_id}
    assert read["resource"]["service.name"] == "tooltrace"
    assert read["scope"] == "tooltrace.audit.export"


def test_otlp_refusal_is_exit_1(trail: dict[str, Any]) -> None:
    with _LogsReceiver(status=400) as rx:
        res = run("--home", str(trail["home"]), "--otlp-endpoint", rx.endpoint)
    assert res.returncode == 1 and "did not accept" in res.stderr
