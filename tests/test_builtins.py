"""Built-in tools with real files, symlinks and subprocesses: write_text and run_command."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.runtime import live_in_group, live_with_marker, wait_for

from tooltrace import Stage, Status, ToolCall, ToolRegistry, Workspace
from tooltrace.builtins import CommandConfig, register_builtins, register_command_tools
from tooltrace.builtins._run_command import OutputCapture, scrub_env
from tooltrace.policy import ResolvedPath
from tooltrace.testing import RecordingSink


def _exec_detail(env: Any) -> dict[str, Any]:
    step = next(s for s in env.steps if s.step == "execute")
    return dict(step.detail or {})


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# -- write_text --------------------------------------------------------------------------------


def test_write_text_records_sha256_before_and_after(registry: ToolRegistry, workspace: Path,
                                                    sink: RecordingSink) -> None:
    old = (workspace / "hello.txt").read_bytes()
    env = registry.call(ToolCall("write_text", {"path": "hello.txt", "text": "new content\n"}))
    assert env.status is Status.OK, env.summary
    assert (workspace / "hello.txt").read_bytes() == b"new content\n"
    detail = _exec_detail(env)
    assert detail["sha256_before"] == _sha(old)
    assert detail["sha256_after"] == _sha(b"new content\n")
    assert detail["resolved"] == "hello.txt"
    # The record the sinks got carries the same detail.
    (rec,) = sink.by_id(env.call_id)
    rec_detail = next(s.detail for s in rec.steps if s.step == "execute")
    assert rec_detail is not None and rec_detail["sha256_after"] == _sha(b"new content\n")
    # A new file has no "before".
    env = registry.call(ToolCall("write_text", {"path": "notes/b.txt", "text": "b"}))
    assert env.status is Status.OK
    assert _exec_detail(env)["sha256_before"] is None
    assert env.data["created"] is True
    # Atomic: no temporary files are left beside the targets.
    assert sorted(p.name for p in (workspace / "notes").iterdir()) == ["a.txt", "b.txt"]
    assert not [p for p in workspace.iterdir() if p.name.endswith(".tmp")]


def test_write_text_keeps_mode_and_honours_expected_sha(registry: ToolRegistry,
                                                         workspace: Path) -> None:
    target = workspace / "hello.txt"
    target.chmod(0o600)
    before = _sha(target.read_bytes())
    env = registry.call(ToolCall("write_text", {"path": "hello.txt", "text": "x",
                                                "expected_sha256": "0" * 64}))
    assert env.status is Status.FAILED
    assert env.record.error_type == "ContentMismatchError"
    assert target.read_bytes() == b"hello world\n"
    env = registry.call(ToolCall("write_text", {"path": "hello.txt", "text": "x",
                                                "expected_sha256": before}))
    assert env.status is Status.OK
    assert target.read_bytes() == b"x"
    assert target.stat().st_mode & 0o777 == 0o600


def test_write_text_refuses_other_suffixes(registry: ToolRegistry, workspace: Path) -> None:
    env = registry.call(ToolCall("write_text", {"path": "run.sh", "text": "rm -rf /"}))
    assert env.status is Status.FAILED
    assert env.record.error_type == "PathPolicyError"
    assert not (workspace / "run.sh").exists()
    # A .txt name that is a symlink to a non-.txt file inside the workspace is refused too.
    (workspace / "conf.ini").write_text("a=1\n")
    (workspace / "conf.txt").symlink_to("conf.ini")
    env = registry.call(ToolCall("write_text", {"path": "conf.txt", "text": "a=2\n"}))
    assert env.status is Status.FAILED
    assert (workspace / "conf.ini").read_text() == "a=1\n"


def test_write_text_refuses_symlink_escapes(registry: ToolRegistry, workspace: Path,
                                            tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    original = secret.read_bytes()
    (workspace / "link.txt").symlink_to(secret)
    (workspace / "outdir").symlink_to(tmp_path)
    for path in ("link.txt", "outdir/secret.txt", "../secret.txt", str(secret)):
        env = registry.call(ToolCall("write_text", {"path": path, "text": "pwned"}))
        assert env.status is Status.REJECTED, path
        assert env.reject_stage is Stage.POLICY
        assert not env.record.execution_started
    assert secret.read_bytes() == original


def test_write_text_refuses_hard_links(registry: ToolRegistry, workspace: Path,
                                       tmp_path: Path) -> None:
    os.link(tmp_path / "secret.txt", workspace / "hard.txt")
    env = registry.call(ToolCall("write_text", {"path": "hard.txt", "text": "pwned"}))
    assert env.status is Status.FAILED
    assert "hard link" in env.summary
    assert (tmp_path / "secret.txt").read_text().startswith("TOP SECRET")


# -- run_command: results ----------------------------------------------------------------------


def test_run_command_exit_codes_are_results(registry: ToolRegistry) -> None:
    env = registry.call(ToolCall("run_command", {"argv": [
        sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"
    ]}))
    assert env.status is Status.OK
    assert env.data["exit_code"] == 3
    assert env.data["stdout"] == "out\n"
    assert env.data["stderr"] == "err\n"
    assert env.data["stdout_bytes"] == 4 and env.data["stderr_bytes"] == 4
    assert "exited with code 3" in env.summary
    detail = _exec_detail(env)
    assert detail["exit_code"] == 3
    assert not live_in_group(detail["pid"])


def test_run_command_has_no_shell_by_default(registry: ToolRegistry) -> None:
    env = registry.call(ToolCall("run_command", {"argv": ["echo", "$HOME", ";", "id"]}))
    assert env.status is Status.OK
    assert env.data["stdout"] == "$HOME ; id\n"
    env = registry.call(ToolCall("run_command", {"argv": ["echo hi"], "shell": True}))
    assert env.status is Status.REJECTED
    assert env.reject_stage is Stage.PARAMS


def test_run_command_shell_is_an_explicit_opt_in(workspace: Path, tmp_path: Path) -> None:
    reg = ToolRegistry(workspace=workspace, home=tmp_path / "h")
    register_command_tools(reg, CommandConfig(allow_shell=True))
    try:
        env = reg.call(ToolCall("run_command", {"argv": ["echo a; echo b"], "shell": True}))
        assert env.status is Status.OK
        assert env.data["stdout"] == "a\nb\n"
        env = reg.call(ToolCall("run_command", {"argv": ["echo", "x"], "shell": True}))
        assert env.status is Status.FAILED
        # The opt-in is an argument the policy sees.
        assert env.record.args_redacted is not None and env.record.args_redacted["shell"] is True
    finally:
        reg.shutdown(2.0)


def test_run_command_cwd_is_policed(registry: ToolRegistry, workspace: Path,
                                    tmp_path: Path) -> None:
    env = registry.call(ToolCall("run_command", {"argv": ["pwd"], "cwd": "notes"}))
    assert env.status is Status.OK
    assert env.data["stdout"].strip() == str(workspace.resolve() / "notes")
    (workspace / "away").symlink_to(tmp_path)
    for cwd in ("..", "away", "/", "notes/../../"):
        env = registry.call(ToolCall("run_command", {"argv": ["pwd"], "cwd": cwd}))
        assert env.status is Status.REJECTED, cwd
        assert env.reject_stage is Stage.POLICY
        assert not env.record.execution_started


def test_run_command_starts_in_the_checked_cwd_whatever_its_name_became(
        registry: ToolRegistry, workspace: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.txt").write_text("TOP SECRET outside the workspace\n")
    box = workspace / "box"
    box.mkdir()
    (box / "victim.txt").write_text("inside\n")
    call = ToolCall("run_command", {"argv": ["cat", "victim.txt"], "cwd": "box"})

    def swap() -> None:
        box.rename(workspace / "box.aside")
        box.symlink_to(outside)

    def unswap() -> None:
        box.unlink()
        (workspace / "box.aside").rename(box)

    # Swapped for a symlink after the check, just before the process starts: the command
    # still runs in the directory that was checked (it was renamed, not left).
    real_popen = subprocess.Popen

    def popen_after_swap(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        swap()
        return real_popen(*args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(subprocess, "Popen", popen_after_swap)
        env = registry.call(call)
    assert env.status is Status.OK, env.summary
    assert (env.data["exit_code"], env.data["stdout"]) == (0, "inside\n")
    # Swapped after the check, before the directory is opened: refused, nothing followed.
    unswap()
    real_open_dir = Workspace.open_dir

    def open_dir_after_swap(self: Workspace, rp: ResolvedPath) -> int:
        swap()
        return real_open_dir(self, rp)

    with monkeypatch.context() as patch:
        patch.setattr(Workspace, "open_dir", open_dir_after_swap)
        env = registry.call(call)
    assert env.status is Status.FAILED
    assert env.record.error_type == "PathPolicyError"
    assert "TOP SECRET" not in repr(env.to_dict())


def test_run_command_scrubs_secret_looking_env(workspace: Path, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_SERVICE_TOKEN", "tok-very-secret-1")
    monkeypatch.setenv("DB_PASSWORD", "pw-very-secret-2")
    monkeypatch.setenv("PLAIN_SETTING", "visible")
    probe = [sys.executable, "-c",
             "import os; print(os.environ.get('MY_SERVICE_TOKEN') == 'tok-very-secret-1',"
             " os.environ.get('DB_PASSWORD') == 'pw-very-secret-2',"
             " os.environ.get('PLAIN_SETTING'))"]
    reg = ToolRegistry(workspace=workspace, home=tmp_path / "h1")
    register_builtins(reg)
    try:
        env = reg.call(ToolCall("run_command", {"argv": probe}))
        assert env.data["stdout"].split() == ["False", "False", "visible"]
        assert _exec_detail(env)["env_removed"] >= 2
    finally:
        reg.shutdown(2.0)
    reg = ToolRegistry(workspace=workspace, home=tmp_path / "h2")
    register_command_tools(reg, CommandConfig(env_allow=("DB_PASSWORD",)))
    try:
        env = reg.call(ToolCall("run_command", {"argv": probe}))
        assert env.data["stdout"].split() == ["False", "True", "visible"]
    finally:
        reg.shutdown(2.0)


def test_scrub_env_rules() -> None:
    kept, removed = scrub_env({"AWS_SECRET_ACCESS_KEY": "a", "GITHUB_TOKEN": "b", "PATH": "/bin",
                               "HOME": "/root", "SSH_AUTH_SOCK": "s", "MY_COOKIE": "c",
                               "GPG_PRIVATE": "p", "api_key": "k"}, allow=("SSH_AUTH_SOCK",))
    assert set(kept) == {"PATH", "HOME", "SSH_AUTH_SOCK"}
    assert removed == sorted(["AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "MY_COOKIE", "GPG_PRIVATE",
                              "api_key"])


@dataclass
class _Span:
    trace_id: str
    span_id: str
    parent_span_id: str | None = None
    sampled: bool = True

    def attach(self) -> object:
        return None

    def detach(self, token: object) -> None:
        return None


class _Opener:
    """A minimal span opener: fixed trace id, counting span ids."""

    def __init__(self) -> None:
        self.n = 0

    def open_span(self, tool: str) -> _Span:
        self.n += 1
        return _Span("4bf92f3577b34da6a3ce929d0e0e4736", f"{self.n:016x}")


def test_run_command_passes_traceparent(workspace: Path, tmp_path: Path) -> None:
    reg = ToolRegistry(workspace=workspace, home=tmp_path / "h", tracer=_Opener())
    register_builtins(reg)
    try:
        env = reg.call(ToolCall("run_command", {"argv": [
            sys.executable, "-c", "import os; print(os.environ['TRACEPARENT'])"]}))
        assert env.status is Status.OK
        rec = env.record
        assert env.data["stdout"].strip() == f"00-{rec.trace_id}-{rec.span_id}-01"
    finally:
        reg.shutdown(2.0)


def test_run_command_traceparent_from_the_tracing_sink(workspace: Path, tmp_path: Path) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from tooltrace.telemetry.tracing import TracingSink

    exporter = InMemorySpanExporter()
    tracing = TracingSink(TracerProvider(), exporter=exporter, interval_s=0.05)
    reg = ToolRegistry(workspace=workspace, home=tmp_path / "h", tracer=tracing, sinks=[tracing])
    register_builtins(reg)
    try:
        env = reg.call(ToolCall("run_command", {"argv": [
            sys.executable, "-c", "import os; print(os.environ.get('TRACEPARENT'))"]}))
        rec = env.record
        assert rec.trace_id is not None
        flags = "01" if rec.trace_sampled else "00"
        assert env.data["stdout"].strip() == f"00-{rec.trace_id}-{rec.span_id}-{flags}"
    finally:
        reg.shutdown(2.0)


def test_run_command_big_output_goes_to_an_artifact(registry: ToolRegistry,
                                                    tmp_path: Path) -> None:
    env = registry.call(ToolCall("run_command", {"argv": [
        sys.executable, "-c", "print('line-%06d ' % 0 + 'x' * 50); "
        "[print('line-%06d ' % i + 'x' * 50) for i in range(1, 2000)]"]}))
    assert env.status is Status.OK
    art = env.artifact
    assert art is not None
    stored = (tmp_path / "home" / art.path).read_bytes()
    assert hashlib.sha256(stored).hexdigest() == art.sha256
    assert b"line-000000" in stored and b"line-001999" in stored
    # Inline the caller only gets a bounded preview; the record references the artifact.
    assert isinstance(env.data, str) and len(env.data) <= registry.preview_chars
    assert env.record.artifact == art
    offload = next(s for s in env.steps if s.step == "offload")
    assert offload.detail is not None and offload.detail["sha256"] == art.sha256


def test_output_capture_is_bounded() -> None:
    cap = OutputCapture(1000)
    for i in range(1000):
        cap.feed(f"{i:09d}\n".encode())
    assert cap.total == 10_000
    assert len(cap.head) + len(cap.tail) == 1000
    text = cap.text()
    assert text.startswith("000000000\n")
    assert text.endswith("000000999\n")
    assert "[9000 bytes omitted]" in text
    assert cap.last(10) == "000000999\n"


def test_run_command_output_is_bounded_in_memory(workspace: Path, tmp_path: Path) -> None:
    reg = ToolRegistry(workspace=workspace, home=tmp_path / "h")
    register_command_tools(reg, CommandConfig(max_capture_bytes=4096))
    try:
        env = reg.call(ToolCall("run_command", {"argv": [
            sys.executable, "-c", "import sys; sys.stdout.write('a' * 5_000_000 + 'END')"]}))
        assert env.status is Status.OK
        assert env.data["stdout_bytes"] == 5_000_003
        assert env.data["truncated"] is True
        assert env.data["stdout"].endswith("END")
        assert "bytes omitted" in env.data["stdout"]
    finally:
        reg.shutdown(2.0)


def test_run_command_drains_both_pipes_without_deadlock(registry: ToolRegistry) -> None:
    # 1 MB to each stream, interleaved: a reader of one pipe at a time would block forever.
    script = ("import sys\nfor _ in range(256):\n"
              "    sys.stdout.write('o' * 4096); sys.stderr.write('e' * 4096)\n")
    env = registry.call(ToolCall("run_command", {"argv": [sys.executable, "-c", script]},
                                 timeout_s=20))
    assert env.status is Status.OK, env.summary
    detail = _exec_detail(env)  # the data itself was offloaded: it is 2 MB
    assert detail["stdout_bytes"] == detail["stderr_bytes"] == 1024 * 1024


# -- run_command: stopping process trees -------------------------------------------------------


def test_deadline_kills_the_whole_tree(registry: ToolRegistry, sink: RecordingSink,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    marker = os.urandom(8).hex()
    monkeypatch.setenv("TT_TEST_MARK", marker)
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(registry.call(ToolCall(
        "run_command", {"argv": ["sh", "-c", "sleep 60 & sleep 60; echo never"]},
        timeout_s=1.5))))
    t.start()
    # The tree really exists: the shell, its background grandchild and its foreground child.
    wait_for(lambda: len(live_with_marker(marker)) >= 3, 5.0, "the process tree to start")
    t.join(10)
    (env,) = out
    assert not live_with_marker(marker), "processes of the tree survived the call"
    pid = _exec_detail(env)["pid"]
    assert not live_in_group(pid)
    assert env.status is Status.FAILED
    assert env.record.error_type == "timeout"
    names = [s.step for s in env.steps]
    assert "deadline" in names
    stop = next(s for s in env.steps if s.step == "stopped")
    assert stop.decision == "confirmed"
    detail = _exec_detail(env)
    assert detail["killed"] == "deadline" and detail["kill_confirmed"] is True
    assert len(sink.by_id(env.call_id)) == 1


def test_cancel_kills_a_term_ignoring_tree(registry: ToolRegistry,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    marker = os.urandom(8).hex()
    monkeypatch.setenv("TT_TEST_MARK", marker)
    out: list[Any] = []
    script = "trap '' TERM; sleep 60 & sleep 60"
    call = ToolCall("run_command", {"argv": ["sh", "-c", script]}, timeout_s=30, run_id="r-kill")
    t = threading.Thread(target=lambda: out.append(registry.call(call)))
    t.start()
    wait_for(lambda: len(live_with_marker(marker)) >= 3, 5.0, "the process tree to start")
    result = registry.cancel("r-kill")
    t.join(10)
    (env,) = out
    assert env.status is Status.CANCELLED, env.summary
    assert list(result.values()) == [Status.CANCELLED]
    assert not live_with_marker(marker)
    names = [s.step for s in env.steps]
    assert "cancel_requested" in names and "cancelled" in names
    detail = _exec_detail(env)
    assert detail["exit_code"] == -9  # the shell ignored SIGTERM and got SIGKILL


def test_stragglers_do_not_outlive_a_foreground_call(registry: ToolRegistry,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    marker = os.urandom(8).hex()
    monkeypatch.setenv("TT_TEST_MARK", marker)
    env = registry.call(ToolCall("run_command", {"argv": [
        "sh", "-c", "sleep 60 >/dev/null 2>&1 & echo started"]}))
    assert env.status is Status.OK
    assert env.data["stdout"] == "started\n"
    assert env.data["stragglers_killed"] is True
    assert not live_with_marker(marker)
