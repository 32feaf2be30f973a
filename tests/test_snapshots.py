"""Snapshots before writes, end to end: real files, the real `tooltrace` CLI in subprocesses.

A write keeps the file's previous content as a content-addressed artifact and records a
`snapshot` step; `tooltrace restore` puts it back through the registry (policed, audited),
refuses a file that changed since unless `--force`, and deletes a file the call created;
`autopsy --diff` shows the change, redacted. The snapshot never follows a symlink swapped in
after the policy decided, and a writer refuses to replace a file other than the snapshotted one.
"""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from support.audit import SECRET

from tooltrace import Capability, Effect, ToolCall, create_registry, tool
from tooltrace.builtins import default_registry
from tooltrace.builtins._write_text import ContentMismatchError, atomic_write
from tooltrace.policy import ApprovalDecision, ApprovalRequest, Policy, PolicyDecision, Verdict
from tooltrace.snapshots import FileSnapshot, FileState

TOOLTRACE = Path(sys.executable).parent / "tooltrace"


def run(
    base: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(TOOLTRACE), *args, "--home", str(base / "home")],
        cwd=base / "ws", capture_output=True, text=True, timeout=120,
        env={**os.environ, **(env or {})},
    )


def write(base: Path, path: str, text: str, env: dict[str, str] | None = None) -> str:
    """Write through `tooltrace call write_text`; the new call's id."""
    res = run(base, "call", "write_text", orjson.dumps({"path": path, "text": text}).decode(),
              "--workspace", str(base / "ws"), env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stderr.strip().rsplit("call_id: ", 1)[1].split()[0]


def write_here(base: Path, path: str, text: str) -> str:
    """The same write as `write`, from this process (audited the same way, one subprocess
    fewer: the commands under test are restore and autopsy)."""
    with create_registry(base / "ws", home=base / "home", metrics=False,
                         log_stream=io.StringIO()) as reg:
        env = reg.call(ToolCall("write_text", {"path": path, "text": text}))
    assert env.ok, env.summary
    return env.call_id


def autopsy(base: Path, call_id: str, *extra: str) -> dict[str, Any]:
    res = run(base, "autopsy", call_id, "--json", *extra)
    assert res.returncode == 0, res.stdout + res.stderr
    out: dict[str, Any] = orjson.loads(res.stdout)
    return out


def snapshot_steps(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for s in report["steps"] if s["step"] == "snapshot"]


@pytest.fixture
def base(tmp_path: Path) -> Path:
    (tmp_path / "ws").mkdir()
    return tmp_path


def test_a_write_is_snapshotted_diffed_and_restored(base: Path) -> None:
    target = base / "ws" / "notes.txt"
    old = f"line one\ntoken {SECRET}\nline three\n"
    target.write_text(old)
    cid = write(base, "notes.txt", "line one\nline two\nline three\n")
    report = autopsy(base, cid, "--diff")
    [snap] = snapshot_steps(report)
    assert snap["decision"] == "stored" and snap["decider"] == "runtime"
    detail = snap["detail"]
    assert detail["path"] == "notes.txt" and detail["size"] == len(old.encode())
    assert detail["sha256"] == hashlib.sha256(old.encode()).hexdigest()
    # The previous content is a content-addressed artifact under the home.
    kept = (base / "home" / "snapshots" / "content" / detail["sha256"][:2]
            / f"{detail['sha256']}.txt")
    assert kept.read_bytes() == old.encode()
    # The snapshot comes after admission and before execution.
    names = [s["step"] for s in report["steps"]]
    assert names.index("admission") < names.index("snapshot") < names.index("execute")
    # The change the call made, redacted.
    [d] = report["diff"]
    assert d["path"] == "notes.txt" and d["created"] is False and d["note"] is None
    assert "--- a/notes.txt\n+++ b/notes.txt\n" in d["diff"]
    assert "+line two\n" in d["diff"] and "-token " in d["diff"]
    assert SECRET not in str(report)

    res = run(base, "restore", cid, "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    assert target.read_text() == old
    [restore_env] = orjson.loads(res.stdout)["restores"]
    assert restore_env["status"] == "ok"
    # The restore was a call through the registry: audited, policed, itself snapshotted.
    r = autopsy(base, restore_env["call_id"])
    assert r["call"]["tool"] == "restore"
    assert any(p["decision"] == "allow" for p in r["policy"])
    assert r["paths"] == {"path": "notes.txt"}
    [rsnap] = snapshot_steps(r)
    new_sha = hashlib.sha256(b"line one\nline two\nline three\n").hexdigest()
    assert rsnap["detail"]["sha256"] == new_sha


def test_restore_refuses_a_file_changed_since_unless_forced(base: Path) -> None:
    target = base / "ws" / "plan.txt"
    target.write_text("v1\n")
    cid = write_here(base, "plan.txt", "v2\n")
    target.write_text("edited by a person\n")
    res = run(base, "restore", cid)
    assert res.returncode == 1
    assert "changed since call" in res.stdout and "force" in res.stdout
    assert target.read_text() == "edited by a person\n"  # nothing lost
    forced = run(base, "restore", cid[:18], "--force")  # a unique prefix works too
    assert forced.returncode == 0, forced.stdout + forced.stderr
    assert target.read_text() == "v1\n"
    # What --force overwrote is itself kept: the forced restore can be undone.
    fid = forced.stderr.strip().rsplit("call_id: ", 1)[1].split()[0]
    assert run(base, "restore", fid).returncode == 0
    assert target.read_text() == "edited by a person\n"


def test_a_created_file_is_restored_by_deleting_it(base: Path) -> None:
    cid = write_here(base, "new.txt", "fresh\n")
    diff = run(base, "autopsy", cid, "--diff")  # the human form
    assert diff.returncode == 0, diff.stderr
    assert "diff of new.txt (created by the call)" in diff.stdout
    assert "--- /dev/null" in diff.stdout and "+fresh" in diff.stdout
    assert "│ 4   │ snapshot" in diff.stdout and "created" in diff.stdout
    assert run(base, "restore", cid).returncode == 0
    assert not (base / "ws" / "new.txt").exists()


def test_the_snapshot_size_is_bounded_by_configuration(base: Path) -> None:
    target = base / "ws" / "big.txt"
    target.write_text("0123456789" * 10)
    env = {"TOOLTRACE_SNAPSHOT_MAX_BYTES": "64"}
    cid = write(base, "big.txt", "small\n", env=env)
    assert target.read_text() == "small\n"  # the write went ahead
    [snap] = snapshot_steps(autopsy(base, cid))
    assert snap["decision"] == "too_large"
    assert snap["detail"]["size"] == 100 and snap["detail"]["limit_bytes"] == 64
    assert "not kept" in snap["detail"]["note"]
    res = run(base, "restore", cid, "--force")
    assert res.returncode == 1 and "over the snapshot limit" in res.stdout
    assert target.read_text() == "small\n"


def test_a_tool_that_declares_what_it_writes_is_snapshotted(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "config.json").write_text('{"a": 1}')

    @tool(capability=Capability.WRITE, effect=Effect.LOCAL, path_params=("path",),
          writes=("path",))
    def set_config(path: str, body: str) -> str:
        """Overwrite a JSON file (plainly: no safe walk of its own)."""
        (ws / path).write_text(body)
        return "done"

    with default_registry(ws, home=tmp_path / "home") as reg:
        reg.register(set_config)
        env = reg.call(ToolCall("set_config", {"path": "config.json", "body": '{"a": 2}'}))
        assert env.ok
        [snap] = [s for s in env.record.steps if s.step == "snapshot"]
        assert snap.decision == "stored" and snap.detail is not None
        assert snap.detail["sha256"] == hashlib.sha256(b'{"a": 1}').hexdigest()
        rec = reg.snapshots.load(env.call_id)
        assert rec.files[0].after is not None
        assert rec.files[0].after.sha256 == hashlib.sha256(b'{"a": 2}').hexdigest()
        back = reg.call(ToolCall("restore", {"call_id": env.call_id, "path": "config.json"}))
        assert back.ok, back.summary
    assert (ws / "config.json").read_text() == '{"a": 1}'


def test_a_symlink_swapped_in_before_the_snapshot_refuses_the_call(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    outside = tmp_path / "outside.txt"
    outside.write_text("host secret\n")
    (ws / "a.txt").write_text("inside\n")

    class AskWrites:
        name = "ask_writes"

        def __call__(self, req: Any) -> PolicyDecision | None:
            if req.tool.name == "write_text":
                return PolicyDecision(Verdict.ASK, "ask_writes", "writes need approval")
            return None

    def swap_then_approve(req: ApprovalRequest) -> ApprovalDecision:
        # After the policy resolved a.txt inside the workspace, it becomes a symlink outside.
        os.unlink(ws / "a.txt")
        os.symlink(outside, ws / "a.txt")
        return ApprovalDecision(True, "tester")

    with default_registry(ws, home=tmp_path / "home", policy=Policy(rules=[AskWrites()]),
                          approver=swap_then_approve) as reg:
        env = reg.call(ToolCall("write_text", {"path": "a.txt", "text": "pwned\n"}))
    assert env.status.value == "rejected" and env.reject_stage is not None
    snap = [s for s in env.record.steps if s.step == "snapshot"]
    assert snap and snap[0].decision == "reject"
    # Refused by the snapshot's own walk (whichever check sees the swap first).
    assert snap[0].detail is not None
    assert snap[0].detail["reason"] in ("symlink_escape", "symlink_race")
    assert not env.record.execution_started
    assert outside.read_text() == "host secret\n"
    # The outside file's content was never copied into the snapshots.
    digest = hashlib.sha256(b"host secret\n").hexdigest()
    assert not (tmp_path / "home" / "snapshots" / "content" / digest[:2] / f"{digest}.txt").exists()


def test_a_writer_refuses_a_file_other_than_the_snapshotted_one(tmp_path: Path) -> None:
    from tooltrace.policy import Workspace

    ws = Workspace(tmp_path)
    (tmp_path / "a.txt").write_text("one\n")
    st = os.stat(tmp_path / "a.txt")
    same = FileSnapshot("path", "a.txt", FileState(True, hashlib.sha256(b"one\n").hexdigest(), 4,
                                                   True), None, st.st_dev, st.st_ino)
    # Replaced by another file with the same content (another inode) after the snapshot.
    os.replace(tmp_path / "a.txt", tmp_path / "old.txt")
    (tmp_path / "a.txt").write_text("one\n")
    with pytest.raises(ContentMismatchError, match="changed after it was snapshotted"):
        atomic_write(ws, "a.txt", b"two\n", snapshot=same)
    assert (tmp_path / "a.txt").read_text() == "one\n"
    absent = FileSnapshot("path", "b.txt", FileState(False))
    (tmp_path / "b.txt").write_text("appeared\n")
    with pytest.raises(ContentMismatchError):
        atomic_write(ws, "b.txt", b"two\n", snapshot=absent)
    assert (tmp_path / "b.txt").read_text() == "appeared\n"


_CRASH = """
import os, sys
from tooltrace import CallContext, Capability, Effect, ToolCall, tool
from tooltrace.builtins import default_registry

@tool(capability=Capability.WRITE, effect=Effect.LOCAL, path_params=("path",), writes=("path",))
def scribble(ctx: CallContext, path: str) -> str:
    \"\"\"Half-write a file, then the process dies.\"\"\"
    print(ctx.call_id, flush=True)
    with open(os.path.join(sys.argv[1], path), "w") as fh:
        fh.write("half")
    os._exit(3)

reg = default_registry(sys.argv[1], home=sys.argv[2])
reg.register(scribble)
reg.call(ToolCall("scribble", {"path": "state.txt"}))
"""


def test_a_call_that_never_returns_can_still_be_restored(base: Path) -> None:
    target = base / "ws" / "state.txt"
    target.write_text("whole\n")
    crash = subprocess.run([sys.executable, "-c", _CRASH, str(base / "ws"), str(base / "home")],
                           capture_output=True, text=True, timeout=120)
    assert crash.returncode == 3, crash.stderr
    cid = crash.stdout.strip()
    assert target.read_text() == "half"
    # The manifest was made durable before the tool ran; what the call left is unknown.
    res = run(base, "restore", cid)
    assert res.returncode == 1 and "is not known" in res.stdout
    assert target.read_text() == "half"
    assert run(base, "restore", cid, "--force").returncode == 0
    assert target.read_text() == "whole\n"


def test_a_write_abandoned_at_its_deadline_leaves_an_unknown_after_state(tmp_path: Path) -> None:
    import threading

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "slow.txt").write_text("before\n")
    wrote, release = threading.Event(), threading.Event()

    @tool(capability=Capability.WRITE, effect=Effect.LOCAL, path_params=("path",),
          writes=("path",), cancellable=False, timeout_s=0.2)
    def slow_write(path: str) -> str:
        """Write after the call has returned (abandoned at its deadline)."""
        release.wait(30)
        (ws / path).write_text("after\n")
        wrote.set()
        return "late"

    with default_registry(ws, home=tmp_path / "home", cancel_grace_s=0.05) as reg:
        reg.register(slow_write)
        env = reg.call(ToolCall("slow_write", {"path": "slow.txt"}))
        release.set()
        assert env.status.value == "unknown"
        assert wrote.wait(10)
        rec = reg.snapshots.load(env.call_id)
        assert rec.files[0].before.sha256 == hashlib.sha256(b"before\n").hexdigest()
        assert rec.files[0].after is None  # it was still running when the call returned
        back = reg.call(ToolCall("restore", {"call_id": env.call_id, "path": "slow.txt"}))
        assert back.status.value == "failed" and "is not known" in back.summary
        forced = reg.call(ToolCall("restore", {"call_id": env.call_id, "path": "slow.txt",
                                               "force": True}))
        assert forced.ok, forced.summary
    assert (ws / "slow.txt").read_text() == "before\n"


def test_restore_of_an_unknown_call_exits_1(base: Path) -> None:
    res = run(base, "restore", "01999999-0000-7000-8000-000000000000")
    assert res.returncode == 1 and "no call" in res.stderr + res.stdout


def test_snapshot_max_bytes_is_checked() -> None:
    from tooltrace._settings import snapshot_max_bytes
    from tooltrace.exceptions import ConfigurationError

    assert snapshot_max_bytes(10) == 10
    with pytest.raises(ConfigurationError):
        snapshot_max_bytes(-1)
