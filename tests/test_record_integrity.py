"""What a call's record may hold: only redacted text (whichever stage wrote it), and one
call per call id."""

from __future__ import annotations

import json
import random
import shutil
import string
import threading
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

import tooltrace
from tooltrace import Stage, Status, ToolCall, ToolRegistry, tool
from tooltrace.audit import DuplicateCallId, open_store
from tooltrace.builtins import register_builtins
from tooltrace.cli import main as cli
from tooltrace.redaction import Redactor
from tooltrace.telemetry import AuditSink
from tooltrace.testing import RecordingSink

ALNUM = string.ascii_letters + string.digits


def _new_id() -> str:
    return str(uuid.uuid4())


def _token(rng: random.Random) -> str:
    return "ghp_" + "".join(rng.choice(ALNUM) for _ in range(36))


def _core(token: str) -> str:
    return token[4:]


def _leaks(blob: str, token: str) -> bool:
    """Any 12 consecutive characters of the token's random part."""
    core = _core(token)
    return any(core[i : i + 12] in blob for i in range(len(core) - 11))


def _record_text(env: tooltrace.ToolResultEnvelope) -> str:
    return json.dumps(env.to_dict(), default=str) + repr(env.record)


# -- 1. step details go through the redactor --------------------------------------------------


def test_a_secret_in_a_path_reaches_no_step_detail(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "notes").mkdir(parents=True)
    home = tmp_path / "home"
    rng = random.Random(7)
    sink = RecordingSink()
    reg = tooltrace.create_registry(workspace=ws, home=home, tracing=False)
    reg.add_sink(sink)
    try:
        for _ in range(5):
            token = _token(rng)
            name = f"notes/{token}.txt"
            (ws / name).write_text("hello")
            envs = [
                reg.call({"name": "read_text", "arguments": {"path": name}}),
                reg.call({"name": "write_text", "arguments": {"path": f"notes/w-{token}.txt",
                                                               "text": "x"}}),
            ]
            for env in envs:
                assert env.status is Status.OK, env.summary
                pol = next(s for s in env.steps if s.step == "policy")
                assert pol.detail is not None and "paths" in pol.detail
                assert "[REDACTED:github_token]" in json.dumps(pol.detail)
                assert not _leaks(_record_text(env), token), env.to_dict()
        reg.flush()
        for rec in sink.records:
            assert "ghp_" not in repr(rec.steps) or "REDACTED" in repr(rec.steps)
    finally:
        reg.shutdown()
    # The trail as every reader sees it: raw segment bytes, autopsy and calls --json.
    raw = b"".join(p.read_bytes() for p in (home / "audit").rglob("*") if p.is_file())
    runner = CliRunner()
    listing = runner.invoke(cli, ["calls", "--home", str(home), "--json", "--limit", "100"])
    assert listing.exit_code == 0, listing.output
    ids = [c["call_id"] for c in json.loads(listing.output)]
    autopsies = "".join(
        runner.invoke(cli, ["autopsy", cid, "--home", str(home), "--json"]).output for cid in ids
    )
    rng = random.Random(7)
    for _ in range(5):
        token = _token(rng)
        assert not _leaks(raw.decode("utf-8", "replace"), token)
        assert not _leaks(listing.output, token)
        assert not _leaks(autopsies, token)


def test_a_tool_detail_and_a_hook_reason_are_redacted_in_the_record(tmp_path: Path) -> None:
    secret = _token(random.Random(3))

    @tool(effect="none")
    def leaky(ctx: tooltrace.CallContext) -> str:
        """A tool that puts a secret in its step detail."""
        ctx.set_detail("note", f"used {secret}")
        return "ok"

    reg = ToolRegistry(workspace=tmp_path)
    reg.register(leaky)
    env = reg.call(ToolCall("leaky", {}))
    assert env.status is Status.OK
    assert not _leaks(_record_text(env), secret)
    reg.shutdown()


# -- 2. redact, then cut -----------------------------------------------------------------------


@pytest.mark.parametrize("offset", range(0, 80, 3))
def test_a_long_token_in_a_denied_path_is_redacted_before_it_is_cut(
    tmp_path: Path, offset: int
) -> None:
    token = _token(random.Random(offset))
    reg = register_builtins(ToolRegistry(workspace=tmp_path))
    path = "../" + "d" * offset + "/" + token + ".txt"
    env = reg.call(ToolCall("read_text", {"path": path}))
    assert env.status is Status.REJECTED and env.reject_stage is Stage.POLICY
    assert not _leaks(_record_text(env), token), env.summary
    reg.shutdown()


# -- 8. a call id is an identity ---------------------------------------------------------------


def test_a_reused_call_id_is_rejected_before_anything_runs(tmp_path: Path) -> None:
    runs: list[int] = []

    @tool(effect="none")
    def count(n: int) -> int:
        """Count a run."""
        runs.append(n)
        return n

    reg = ToolRegistry(workspace=tmp_path)
    reg.register(count)
    cid = _new_id()
    first = reg.call(ToolCall("count", {"n": 1}, call_id=cid))
    second = reg.call(ToolCall("count", {"n": 2}, call_id=cid.upper()))
    assert first.status is Status.OK and first.call_id == cid
    assert second.status is Status.REJECTED and second.reject_stage is Stage.PARAMS
    assert second.call_id != cid
    assert "duplicate_call_id" in second.summary
    assert second.steps[0].detail == {"reason": "duplicate_call_id", "call_id": cid}
    assert runs == [1]
    reg.shutdown()


def test_racing_calls_with_one_id_run_once(tmp_path: Path) -> None:
    runs: list[int] = []
    gate = threading.Barrier(8)

    @tool(effect="none")
    def count(n: int) -> int:
        """Count a run."""
        runs.append(n)
        return n

    reg = ToolRegistry(workspace=tmp_path)
    reg.register(count)
    for _ in range(20):
        cid = _new_id()
        out: list[Status] = []

        def go(n: int, cid: str = cid, out: list[Status] = out) -> None:
            gate.wait()
            out.append(reg.call(ToolCall("count", {"n": n}, call_id=cid)).status)

        threads = [threading.Thread(target=go, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert out.count(Status.OK) == 1 and out.count(Status.REJECTED) == 7
    assert len(runs) == 20
    reg.shutdown()


def test_readers_never_merge_two_calls_recorded_under_one_id(tmp_path: Path) -> None:
    """Two homes that each ran a call under one id, their segments put in one home (registries
    refuse the second call, so the duplicate is made the way only a copied file can)."""
    cid = _new_id()
    home = tmp_path / "home"
    for n in (1, 2):
        own = tmp_path / f"home{n}"
        reg = register_builtins(ToolRegistry(workspace=tmp_path, sinks=[AuditSink(home=own)]))
        (tmp_path / f"f{n}.txt").write_text("x")
        env = reg.call(ToolCall("read_text", {"path": f"f{n}.txt"}, call_id=cid))
        assert env.status is Status.OK
        reg.shutdown()
        (home / "audit" / "segments").mkdir(parents=True, exist_ok=True)
        for seg in (own / "audit" / "segments").glob("*.jsonl"):
            shutil.copy(seg, home / "audit" / "segments" / seg.name)
    with open_store(home) as store, pytest.raises(DuplicateCallId) as info:
        store.call(cid)
    assert len(info.value.records) == 2
    res = CliRunner().invoke(cli, ["autopsy", cid, "--home", str(home)])
    assert res.exit_code == 1
    assert "recorded for 2 different calls" in res.output


# -- prefixed tokens glued into names, and every message cut only after redaction ---------------


@pytest.mark.parametrize(
    "text",
    [
        "backup_{gh}_old.txt",
        "notes-{gh}.txt",
        "x_AKIA{aws}_y",
        "id_{gh}",
    ],
)
def test_a_token_glued_into_a_file_name_by_underscore_or_dash_is_found(text: str) -> None:
    rng = random.Random(text)
    gh = _token(rng)
    aws = "".join(rng.choice(string.ascii_uppercase + string.digits) for _ in range(16))
    placed = text.format(gh=gh, aws=aws)
    red = tooltrace.Redactor().redact_text(placed)
    assert gh not in red and aws not in red, red
    assert "[REDACTED:" in red


def test_a_long_token_as_an_unknown_call_field_is_redacted_before_it_is_cut(
    tmp_path: Path,
) -> None:
    # The detector needs all 40 characters of the secret: a cut at 40 leaves 18 of them.
    core = "".join(random.Random(5).choice(ALNUM + "/+") for _ in range(40))
    reg = ToolRegistry(workspace=tmp_path)
    env = reg.call(json.dumps({"name": "x", "arguments": {}, f"aws_secret_access_key={core}": 1}))
    assert env.status is Status.REJECTED and env.reject_stage is Stage.PARAMS
    assert "unknown fields" in env.summary
    text = _record_text(env)
    assert not any(core[i : i + 12] in text for i in range(len(core) - 11)), env.summary
    reg.shutdown()


def test_a_token_in_a_long_program_name_is_redacted_before_it_is_cut(tmp_path: Path) -> None:
    token = _token(random.Random(11))
    prog = tmp_path / ("tool-" + "p" * 30 + "-" + token)
    prog.write_text("#!/bin/sh\necho hi\n")
    prog.chmod(0o755)
    reg = register_builtins(ToolRegistry(workspace=tmp_path))
    env = reg.call(ToolCall("run_command", {"argv": [str(prog)]}))
    assert env.status is Status.OK, env.summary
    assert not _leaks(_record_text(env), token), env.summary
    reg.shutdown()


def test_call_attributes_go_through_the_key_rules_and_a_secret_key_is_dropped(
    tmp_path: Path,
) -> None:
    token = _token(random.Random(21))
    aws = "".join(random.Random(22).choice(ALNUM) for _ in range(40))
    reg = register_builtins(ToolRegistry(workspace=tmp_path))
    (tmp_path / "a.txt").write_text("x")
    env = reg.call(ToolCall("read_text", {"path": "a.txt"}, attributes={
        token: "v", "aws_secret_access_key": aws, "team": "sre", "n": 3,
        "long": "y" * 300 + token,
    }))
    assert env.status is Status.OK
    attrs = env.record.attributes
    assert token not in attrs and attrs["team"] == "sre" and attrs["n"] == 3
    assert aws not in repr(attrs) and "REDACTED" in str(attrs["aws_secret_access_key"])
    assert len(str(attrs["long"])) <= 256
    assert not _leaks(_record_text(env), token)
    reg.shutdown()


@pytest.mark.parametrize("offset", [0, 20, 40, 55])
def test_a_registered_secret_in_a_denied_path_is_never_cut(tmp_path: Path, offset: int) -> None:
    # Only the registry's redactor knows a registered value: a message that cut it on the way
    # (before that redactor saw it) would keep its first characters.
    secret = "".join(random.Random(offset).choice(ALNUM) for _ in range(48))
    reg = register_builtins(
        ToolRegistry(workspace=tmp_path, redactor=tooltrace.Redactor(extra_values=[secret]))
    )
    env = reg.call(ToolCall("read_text", {"path": "../" + "d" * offset + "/" + secret}))
    assert env.status is Status.REJECTED
    text = _record_text(env)
    assert not any(secret[i : i + 12] in text for i in range(len(secret) - 11)), env.summary
    reg.shutdown()


def test_an_azure_secret_in_a_file_name_is_found() -> None:
    rng = random.Random(9)
    alphabet = ALNUM + "_~.-"
    secret = (
        "".join(rng.choice(ALNUM) for _ in range(3)) + "8Q~"
        + "".join(rng.choice(alphabet) for _ in range(33)) + "a"
    )
    for placed in (f"notes/{secret}.txt", f"r-{secret}.txt", f"x_{secret}"):
        red = tooltrace.Redactor().redact_text(placed)
        assert secret not in red and "[REDACTED:azure_client_secret]" in red, red


# -- the success summary the registry makes is remembered, never stale ----------------------


def test_a_value_registered_after_calls_is_redacted_from_the_next_summary(tmp_path: Path) -> None:
    """The registry remembers the scrubbed form of the summaries it makes itself; registering
    a secret that such a summary holds must show in the very next call's summary."""
    reg = ToolRegistry(workspace=tmp_path, home=tmp_path / "home")
    reg.register(tool("tokenizer", execution="inline")(lambda x: x))
    sink = RecordingSink()
    reg.add_sink(sink)
    for _ in range(3):
        assert reg.call(ToolCall("tokenizer", {"x": "abc"})).summary == (
            "tokenizer succeeded (3 chars)"
        )
    reg.redactor.register_value("tokenizer")
    env = reg.call(ToolCall("tokenizer", {"x": "abc"}))
    assert "tokenizer" not in env.summary and "[REDACTED:registered]" in env.summary
    assert "tokenizer" not in sink.records[-1].summary
    reg.shutdown(1.0)


def test_a_redactor_subclass_sees_every_summary(tmp_path: Path) -> None:
    """A redactor subclass may decide by more than the text: its summaries are not
    remembered, it is asked on every call."""
    seen: list[str] = []

    class Counting(Redactor):
        def redact_text(self, text: str) -> str:
            seen.append(text)
            return super().redact_text(text)

    reg = ToolRegistry(workspace=tmp_path, home=tmp_path / "home", redactor=Counting())
    reg.register(tool("noop", execution="inline")(lambda x: x))
    for _ in range(3):
        reg.call(ToolCall("noop", {"x": "abc"}))
    assert seen.count("noop succeeded (3 chars)") == 3
    reg.shutdown(1.0)


def test_a_tool_summary_with_a_secret_is_redacted_every_time(tmp_path: Path) -> None:
    """Only the registry's own summaries are remembered: a tool's summary (here with a
    token) is redacted on each call, whatever came before."""
    rng = random.Random(11)
    reg = ToolRegistry(workspace=tmp_path, home=tmp_path / "home")

    @tool("say", execution="inline")
    def say(text: str) -> tooltrace.ToolResult:
        return tooltrace.ToolResult(data="ok", summary=text)

    reg.register(say)
    for _ in range(3):
        token = _token(rng)
        env = reg.call(ToolCall("say", {"text": f"done with {token}"}))
        assert env.status is Status.OK
        assert not _leaks(_record_text(env), token)
    reg.shutdown(1.0)


def test_the_record_builder_s_field_order_is_the_records(tmp_path: Path) -> None:
    """The builder makes CallRecord and ToolResultEnvelope from positional arguments: their
    fields must stay in this order (a change here is a change to Builder.envelope)."""
    from tooltrace.model import CallRecord, ToolResultEnvelope

    assert CallRecord.__struct_fields__ == (
        "call_id", "run_id", "tool", "source", "status", "reject_stage", "summary",
        "error_type", "started_at_us", "elapsed_us", "execution_started", "args_redacted",
        "result_preview", "artifact", "steps", "mode", "tool_type", "description", "trace_id",
        "span_id", "parent_span_id", "trace_sampled", "hook_modified", "attributes",
        "parent_call_id", "depth", "progress", "principal", "capability", "effect")
    assert ToolResultEnvelope.__struct_fields__ == (
        "call_id", "tool", "status", "summary", "data", "artifact", "retry", "timing", "record")

    @tool("echo_back", capability="write", effect="local", execution="inline")
    def echo_back(text: str) -> str:
        """Echo the text."""
        return text

    reg = ToolRegistry(workspace=tmp_path, home=tmp_path / "home")
    reg.register(echo_back)
    env = reg.call(ToolCall("echo_back", {"text": "hi"}, mode="default"))
    rec = env.record
    assert (env.tool, env.status, env.data, env.call_id) == ("echo_back", Status.OK, "hi",
                                                             rec.call_id)
    assert (rec.tool, rec.source, rec.status, rec.mode, rec.tool_type) == (
        "echo_back", "user", Status.OK, "default", "function")
    assert (rec.capability, rec.effect, rec.depth, rec.reject_stage) == ("write", "local", 0, None)
    assert rec.description == "Echo the text." and rec.execution_started is True
    assert rec.args_redacted == {"text": "hi"} and rec.result_preview == "hi"
    assert env.timing.started_at_us == rec.started_at_us and rec.elapsed_us >= 0
    reg.shutdown()
