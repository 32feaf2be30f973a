"""The command sandbox with the real kernel: Landlock and bubblewrap each hold ``run_command``
and background jobs to the workspace and a private TMPDIR; the home, other directories, $HOME,
symlinks out of the workspace and (unless allowed) the network stay out of reach; the ABI
masks; the refusal where no backend can run; the record, span and autopsy name the sandbox."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import site
import socket
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from support.components import missing, require_binary
from support.otlp import OtlpHttpReceiver
from support.runtime import wait_for

import tooltrace
from tooltrace import Status, ToolCall, ToolRegistry, create_registry
from tooltrace.builtins import CommandConfig, register_builtins
from tooltrace.runtime import (
    CommandSandbox,
    Grants,
    SandboxUnavailableError,
    choose_sandbox,
    landlock_abi,
    sandbox_label,
)
from tooltrace.runtime import _landlock as ll
from tooltrace.telemetry.tracing import TracingSink
from tooltrace.testing import RecordingSink

BACKENDS = ("landlock", "bwrap")


@dataclass
class Box:
    """A registry over ``ws`` whose home is ``home``; ``outside`` stands for any other place."""

    mode: str
    reg: ToolRegistry
    ws: Path
    home: Path
    outside: Path
    sink: RecordingSink

    def run(self, script: str, **env: str) -> Any:
        """Run a ``sh -c`` script; paths it must not name openly come in through ``env``."""
        return self.reg.call(ToolCall("run_command", {"argv": ["sh", "-c", script],
                                                      "env": env}))


def _need(mode: str) -> None:
    """The backend ``mode`` needs is here (a missing one skips, and fails under CI=true)."""
    if mode in ("bwrap", "auto"):
        require_binary("bwrap", "apt-get install bubblewrap")
    if mode in ("landlock", "auto") and landlock_abi() < 4:
        missing("a kernel with Landlock ABI 4 or newer (Linux 6.7+)")


def _box(tmp_path: Path, mode: str, **config: Any) -> Box:
    if not config.get("bwrap_path") and "landlock_max_abi" not in config:
        _need(mode)
    ws, home, outside = tmp_path / "ws", tmp_path / "home", tmp_path / "outside"
    for d in (ws, home, outside):
        d.mkdir()
    (ws / "hello.txt").write_text("hello\n")
    (home / "trail.jsonl").write_text("the record\n")
    (outside / "secret.txt").write_text("secret\n")
    sink = RecordingSink()
    reg = ToolRegistry(workspace=ws, home=home, sinks=[sink], cancel_grace_s=1.0)
    register_builtins(reg, commands=CommandConfig(sandbox=mode, **config))
    return Box(mode, reg, ws, home, outside, sink)


@pytest.fixture(params=BACKENDS)
def box(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Box]:
    """A box for each backend, network refused."""
    b = _box(tmp_path, request.param)
    yield b
    b.reg.shutdown(timeout_s=5.0)


def _detail(env: Any) -> dict[str, Any]:
    return dict(next(s for s in env.steps if s.step == "execute").detail or {})


@pytest.fixture
def temp_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where this test's commands get their private temporary directories (so that commands
    of other processes cannot be counted)."""
    root = tmp_path / "temp-root"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    return root


def _private_tmps(root: Path) -> list[str]:
    return [p for p in os.listdir(root) if p.startswith("tooltrace-cmd-")]


def _results(stdout: str) -> dict[str, int]:
    return {k: int(v) for k, v in (line.split("=") for line in stdout.split())}


def test_each_backend_runs_here_and_is_recorded(box: Box) -> None:
    env = box.run("echo ok")
    assert env.status is Status.OK, env.summary
    assert env.data["stdout"] == "ok\n"
    expected = "bwrap" if box.mode == "bwrap" else f"landlock-abi{landlock_abi()}"
    assert _detail(env)["sandbox"] == expected


def test_the_workspace_and_a_private_tmpdir_are_writable(box: Box, temp_root: Path) -> None:
    env = box.run('cat hello.txt && echo made > made.txt && echo t > "$TMPDIR/t" '
                  '&& cat "$TMPDIR/t" && mkdir -p sub && mv made.txt sub/ && echo "$TMPDIR"')
    assert env.status is Status.OK and env.data["exit_code"] == 0, env.data
    out = env.data["stdout"].splitlines()
    assert out[:2] == ["hello", "t"]
    assert (box.ws / "sub" / "made.txt").read_text() == "made\n"
    # TMPDIR is the command's own, not /tmp itself, and it is gone once the command ended.
    tmpdir = out[2]
    if box.mode == "landlock":
        assert tmpdir.startswith(f"{temp_root}/tooltrace-cmd-")
    else:
        assert tmpdir == "/tmp"  # bubblewrap mounts the private directory there
    assert _private_tmps(temp_root) == []


def test_the_command_starts_in_its_checked_directory(box: Box) -> None:
    (box.ws / "sub").mkdir()
    env = box.reg.call(ToolCall("run_command", {"argv": ["sh", "-c", "pwd; ls"],
                                                "cwd": "sub"}))
    assert env.status is Status.OK, env.summary
    assert env.data["stdout"] == f"{os.path.realpath(box.ws / 'sub')}\n"


def test_nothing_outside_can_be_read_written_or_deleted(box: Box) -> None:
    script = ('cat "$F" >/dev/null 2>&1; echo read=$?; '
              'echo x >> "$F" 2>/dev/null; echo write=$?; '
              'rm "$F" 2>/dev/null; echo delete=$?; '
              'ls "$D" >/dev/null 2>&1; echo list=$?; '
              'touch "$D/new" 2>/dev/null; echo create=$?; '
              'cat /tmp/*/secret.txt >/dev/null 2>&1; echo tmp=$?')
    for d, f in ((box.home, box.home / "trail.jsonl"), (box.outside, box.outside / "secret.txt")):
        before = f.read_bytes()
        # Through the environment: the policy refuses a command word that names the home, so
        # only the sandbox stands between a computed path and the file.
        env = box.run(script, F=str(f), D=str(d))
        assert env.status is Status.OK, env.summary
        results = _results(env.data["stdout"])
        assert all(code != 0 for code in results.values()), (d.name, results)
        assert f.read_bytes() == before
        assert not (d / "new").exists()


def test_home_directory_files_cannot_be_read(box: Box, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    user_home = tmp_path / "user"
    user_home.mkdir()
    (user_home / ".netrc").write_text("machine example.org password hunter2\n")
    monkeypatch.setenv("HOME", str(user_home))
    env = box.run('cat "$HOME/.netrc"; echo "rc=$?"')
    assert env.status is Status.OK
    assert "hunter2" not in env.data["stdout"]
    assert env.data["stdout"].strip().endswith("rc=1")


def test_a_symlink_planted_in_the_workspace_does_not_lead_out(box: Box) -> None:
    (box.ws / "door").symlink_to(box.outside)
    (box.ws / "key").symlink_to(box.outside / "secret.txt")
    env = box.run("cat door/secret.txt >/dev/null 2>&1; echo dir=$?; "
                  "cat key >/dev/null 2>&1; echo file=$?; "
                  "echo x > door/planted 2>/dev/null; echo write=$?; "
                  "echo x >> key 2>/dev/null; echo append=$?")
    assert env.status is Status.OK
    assert all(code != 0 for code in _results(env.data["stdout"]).values()), env.data
    assert (box.outside / "secret.txt").read_text() == "secret\n"
    assert not (box.outside / "planted").exists()


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A TCP listener on loopback that the commands try to reach."""
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    srv.settimeout(5.0)
    yield srv
    srv.close()


_CONNECT = ("import socket, sys\n"
            "try:\n"
            "    socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=5).close()\n"
            "except OSError as exc:\n"
            "    print(type(exc).__name__); sys.exit(3)\n"
            "print('connected')\n")


def _connect(reg: ToolRegistry, port: int) -> Any:
    return reg.call(ToolCall("run_command", {"argv": [sys.executable, "-c", _CONNECT,
                                                      str(port)]}))


def test_the_network_is_refused(box: Box, listener: socket.socket) -> None:
    env = _connect(box.reg, listener.getsockname()[1])
    assert env.status is Status.OK
    assert env.data["exit_code"] == 3, env.data
    listener.settimeout(0.0)
    with pytest.raises(BlockingIOError):
        listener.accept()
    assert "sandbox_network" not in _detail(env)


@pytest.mark.parametrize("mode", BACKENDS)
def test_the_network_when_the_operator_allows_it(mode: str, tmp_path: Path,
                                                 listener: socket.socket) -> None:
    b = _box(tmp_path, mode, network=True)
    try:
        env = _connect(b.reg, listener.getsockname()[1])
        assert env.status is Status.OK and env.data["stdout"] == "connected\n", env.data
        conn, _ = listener.accept()
        conn.close()
        assert _detail(env)["sandbox_network"] is True
    finally:
        b.reg.shutdown(timeout_s=5.0)


def test_a_background_job_runs_in_the_same_sandbox(box: Box, temp_root: Path) -> None:
    call = ToolCall("run_command", {"argv": ["sh", "-c", 'echo x > "$F"; echo job=$?'],
                                    "env": {"F": str(box.outside / "from-job")}},
                    background=True)
    env = box.reg.call(call)
    assert env.status is Status.OK, env.summary
    sandbox = _detail(env)["sandbox"]
    assert sandbox in ("bwrap", f"landlock-abi{landlock_abi()}")
    job_id = env.data["job_id"]

    def ended() -> bool:
        st = box.reg.call(ToolCall("job_status", {"job_id": job_id}, run_id=env.record.run_id))
        return bool(st.data["state"] == "exited")

    wait_for(ended, 30.0, "the job to end")
    tail = box.reg.call(ToolCall("job_tail", {"job_id": job_id}, run_id=env.record.run_id))
    assert tail.data["stdout"].strip() != "job=0"
    assert not (box.outside / "from-job").exists()
    wait_for(lambda: _private_tmps(temp_root) == [], 10.0, "the job's TMPDIR to go")


@pytest.mark.parametrize("mode", ["off", "landlock"])
def test_a_program_that_cannot_start_fails_the_call_as_without_a_sandbox(
    mode: str, tmp_path: Path,
) -> None:
    # Landlock's helper reports the failed exec through its status pipe: the call fails with
    # the same error as an unsandboxed start; a missing program fails before anything starts.
    b = _box(tmp_path, mode)
    bad = b.ws / "bad"
    bad.write_bytes(b"\x7fELF\x00garbage")
    bad.chmod(0o755)
    (b.ws / "plain").write_text("not executable\n")
    try:
        for argv, error in ((["./bad"], "OSError"), (["./plain"], "PermissionError"),
                            (["no-such-program-here"], "FileNotFoundError")):
            env = b.reg.call(ToolCall("run_command", {"argv": argv}))
            assert env.status is Status.FAILED, (argv, env.summary)
            assert env.record.error_type == error, (argv, env.summary)
            assert "pid" not in _detail(env)
    finally:
        b.reg.shutdown(timeout_s=5.0)


@pytest.mark.parametrize("network", [False, True])
def test_a_program_the_kernel_cannot_exec_is_named_in_the_error(tmp_path: Path,
                                                                  network: bool) -> None:
    # The helper's argv differs in length with the network setting; the error names the
    # program either way, not a word of the helper's own settings.
    b = _box(tmp_path, "landlock", network=network)
    bad = b.ws / "bad"
    bad.write_bytes(b"\x7fELF\x00garbage")
    bad.chmod(0o755)
    try:
        env = b.reg.call(ToolCall("run_command", {"argv": ["./bad", "--", "x"]}))
        assert env.status is Status.FAILED and env.record.error_type == "OSError", env.summary
        assert env.summary.endswith("Exec format error: './bad'"), env.summary
    finally:
        b.reg.shutdown(timeout_s=5.0)


@pytest.mark.parametrize("mode", BACKENDS)
def test_a_missing_or_unreachable_program_fails_before_anything_starts(mode: str,
                                                                        tmp_path: Path) -> None:
    b = _box(tmp_path, mode)
    ran = b.ws / "ran"
    (b.ws / "plain").write_text(f"touch {ran}\n")
    for prog in (b.outside / "prog", b.outside / "bin" / "tool"):
        prog.parent.mkdir(exist_ok=True)
        prog.write_text(f"#!/bin/sh\ntouch {ran}\n")
        prog.chmod(0o755)
    unreachable = "the program is not executable, or lies outside what the sandbox grants"
    cases: list[tuple[dict[str, Any], str, str]] = [
        ({"argv": ["no-such-program-here"]}, "FileNotFoundError", "No such file or directory"),
        # The file is there, in the workspace, but not executable.
        ({"argv": [str(b.ws / "plain")]}, "PermissionError", unreachable),
        # Executable, but outside the grants: by its path, and found on PATH.
        ({"argv": [str(b.outside / "prog")]}, "PermissionError", unreachable),
        ({"argv": ["tool"], "env": {"PATH": f"{b.outside / 'bin'}:/usr/bin:/bin"}},
         "PermissionError", unreachable),
    ]
    try:
        for args, error, says in cases:
            env = b.reg.call(ToolCall("run_command", args))
            assert env.status is Status.FAILED, (args, env.summary)
            assert env.record.error_type == error and says in env.summary, (args, env.summary)
            assert "pid" not in _detail(env)
        assert not ran.exists()
    finally:
        b.reg.shutdown(timeout_s=5.0)


def _run_in(sandbox: CommandSandbox, argv: list[str], grants: Grants, cwd: Path,
            env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Start ``argv`` in ``sandbox`` as the command tools do, and wait for it."""
    launch = sandbox.launch(argv, {"PATH": os.defpath, **(env or {})}, grants)
    try:
        proc = subprocess.Popen(launch.argv, cwd=cwd, env=launch.env, pass_fds=launch.pass_fds,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            launch.started()
        finally:
            out, err = proc.communicate(timeout=60)
        return subprocess.CompletedProcess(argv, proc.returncode, out, err)
    finally:
        launch.close()


@pytest.mark.parametrize("mode", BACKENDS)
def test_grants_that_do_not_mention_the_network_refuse_it(mode: str, tmp_path: Path,
                                                          listener: socket.socket) -> None:
    _need(mode)
    grants = Grants(write=(str(tmp_path),))
    sandbox = choose_sandbox(mode, grants)
    port = listener.getsockname()[1]
    p = _run_in(sandbox, [sys.executable, "-c", _CONNECT, str(port)], grants, tmp_path)
    assert p.returncode == 3, (p.stdout, p.stderr)
    listener.settimeout(0.0)
    with pytest.raises(BlockingIOError):
        listener.accept()


@pytest.mark.parametrize("mode", BACKENDS)
def test_read_paths_can_be_read_not_written(mode: str, tmp_path: Path) -> None:
    b = _box(tmp_path, mode, read_paths=(str(tmp_path / "outside"),))
    f = b.outside / "secret.txt"
    try:
        env = b.run('cat "$F"; echo x >> "$F" 2>/dev/null; echo write=$?', F=str(f))
        assert env.status is Status.OK, env.summary
        assert env.data["stdout"].splitlines()[0] == "secret"
        assert _results(env.data["stdout"].splitlines()[1])["write"] != 0
        assert f.read_text() == "secret\n"
    finally:
        b.reg.shutdown(timeout_s=5.0)


@pytest.mark.parametrize("mode", BACKENDS)
def test_a_home_named_as_a_read_path_stays_out_of_reach(mode: str, tmp_path: Path) -> None:
    # The home is the read grant itself, not a directory inside one.
    b = _box(tmp_path, mode, read_paths=(str(tmp_path / "home"),))
    try:
        env = b.run('cat "$F"', F=str(b.home / "trail.jsonl"))
        if mode == "landlock":
            _refused(env)
            assert "cannot keep a directory inside a grant out of reach" in env.summary
        else:
            assert env.status is Status.OK, env.summary
            assert "the record" not in env.data["stdout"]
            assert env.data["exit_code"] != 0
    finally:
        b.reg.shutdown(timeout_s=5.0)


def test_every_hidden_directory_inside_a_grant_is_hidden_by_bwrap(tmp_path: Path) -> None:
    _need("bwrap")
    ws = tmp_path / "ws"
    keys = ws / "keys"
    keys.mkdir(parents=True)
    (keys / "key").write_text("signing key\n")
    # Hidden directories outside every grant come first: the one inside is hidden all the same.
    grants = Grants(write=(str(ws),), hidden=(str(tmp_path / "elsewhere"), str(tmp_path / "x"),
                                              str(keys)))
    sandbox = choose_sandbox("bwrap", grants)
    p = _run_in(sandbox, ["sh", "-c", "cat keys/key; ls -A keys"], grants, ws)
    assert "signing key" not in p.stdout and p.stdout == "", (p.stdout, p.stderr)


@pytest.mark.parametrize("mode", ["off", *BACKENDS])
def test_a_launch_closed_before_it_started_leaves_no_descriptor_or_directory(
    mode: str, tmp_path: Path, temp_root: Path,
) -> None:
    # A start that fails before the launcher runs (no descriptor left for its pipes, say)
    # closes the launch: Landlock's status pipe goes with it, both ends.
    _need(mode)
    grants = Grants(write=(str(tmp_path),))
    sandbox = choose_sandbox(mode, grants)
    launch = sandbox.launch(["true"], {"PATH": os.defpath}, grants)
    pipe = os.fstat(launch.pass_fds[0]).st_ino if launch.pass_fds else None
    assert (pipe is not None) is (mode == "landlock")
    assert len(_ends_of(pipe)) == (2 if pipe else 0)
    launch.close()
    assert _ends_of(pipe) == []
    assert _private_tmps(temp_root) == []
    launch.close()  # a second close does nothing


def _ends_of(pipe: int | None) -> list[int]:
    """This process's descriptors on the pipe whose inode is ``pipe``."""
    ends = []
    for name in os.listdir("/proc/self/fd"):
        try:
            st = os.fstat(int(name))
        except OSError:
            continue  # the listing's own descriptor, closed by now
        if stat.S_ISFIFO(st.st_mode) and st.st_ino == pipe:
            ends.append(int(name))
    return ends


@pytest.mark.parametrize("mode", BACKENDS)
def test_a_command_that_leaves_an_undeletable_file_in_its_tmpdir_still_returns(
    mode: str, tmp_path: Path, temp_root: Path,
) -> None:
    # A directory its owner cannot write (root ignores that) holding an immutable file (which
    # only root can make): removing the private directory fails, the result stands.
    b = _box(tmp_path, mode)
    try:
        env = b.run('mkdir "$TMPDIR/d" && echo x > "$TMPDIR/d/f" && chattr +i "$TMPDIR/d/f"'
                    ' 2>/dev/null; chmod 500 "$TMPDIR/d" && echo done')
        assert env.status is Status.OK and env.data["stdout"] == "done\n", env.summary
    finally:
        b.reg.shutdown(timeout_s=5.0)
        for left in _private_tmps(temp_root):
            d = temp_root / left / "d"
            subprocess.run(["chattr", "-i", str(d / "f")], capture_output=True, check=False)
            d.chmod(0o700)


# -- ABI handling ------------------------------------------------------------------------------


# What a ruleset handles at each ABI (the kernel's own constants, written out).
_FS = {1: 0x1FFF, 2: 0x3FFF, 3: 0x7FFF, 4: 0x7FFF, 5: 0xFFFF, 6: 0xFFFF, 7: 0xFFFF}


@pytest.mark.parametrize("abi", range(1, 8))
def test_the_masks_follow_the_abi(abi: int) -> None:
    assert ll.handled_fs(abi) == _FS[abi]
    assert ll.handled_net(abi, True) == (0b11 if abi >= 4 else 0)
    assert ll.handled_net(abi, False) == 0
    assert ll.scoped(abi) == (0b11 if abi >= 6 else 0)
    # A grant never names a right the ABI does not handle, and a file's rule no directory right.
    for kind in ("rx", "r", "rw", "dev"):
        assert ll.allowed(kind, abi, True) & ~ll.handled_fs(abi) == 0
        assert ll.allowed(kind, abi, False) & ~0xC007 == 0
    assert ll.allowed("rw", abi, True) & (1 << 13) == ((1 << 13) if abi >= 2 else 0)
    assert ll.allowed("rw", abi, False) & (1 << 14) == ((1 << 14) if abi >= 3 else 0)
    assert ll.allowed("rx", abi, False) == ll.FS_EXECUTE | ll.FS_READ_FILE
    assert ll.handled_fs(0) == 0


def test_the_helper_finds_its_program_with_only_the_system_granted(tmp_path: Path) -> None:
    # Python's own lookup of PATH imports from the standard library, which the grants need not
    # hold: the helper looks the program up before it restricts itself.
    _need("landlock")
    (tmp_path / "ws").mkdir()
    (tmp_path / "secret.txt").write_text("secret\n")
    r, w = os.pipe()
    try:
        p = subprocess.run(
            [sys.executable, "-I", "-S", "-B", ll.__file__, "--abi", str(landlock_abi()),
             "--rx", "/usr", "--rx", "/etc", "--rw", str(tmp_path / "ws"), "--status-fd",
             str(w), "--", "sh", "-c", f"echo ran > {tmp_path}/ws/out; cat {tmp_path}/secret.txt"],
            pass_fds=(w,), capture_output=True, text=True, timeout=60, check=False)
        os.close(w)
        w = -1
        assert os.read(r, 64) == b""  # nothing went wrong before the exec
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)
    assert (tmp_path / "ws" / "out").read_text() == "ran\n"
    assert p.returncode != 0 and "Permission denied" in p.stderr


@pytest.mark.parametrize("abi", range(1, 8))
def test_each_abi_confines_on_this_kernel(abi: int, tmp_path: Path,
                                          listener: socket.socket) -> None:
    # The network is allowed below ABI 4 (it cannot be refused there), refused from 4 on.
    b = _box(tmp_path, "landlock", landlock_max_abi=abi, network=abi < 4)
    port = listener.getsockname()[1]
    try:
        # A hard link, not mv: mv copies where the kernel refuses to move across directories.
        env = b.run('mkdir a b && echo x > a/f && ln a/f b/f 2>/dev/null; echo refer=$?; '
                    'cat "$F" >/dev/null 2>&1; echo outside=$?; '
                    'kill -0 "$P" 2>/dev/null; echo signal=$?; '
                    f'"$PY" -c "$C" {port} >/dev/null; echo tcp=$?',
                    F=str(b.outside / "secret.txt"), P=str(os.getpid()), PY=sys.executable,
                    C=_CONNECT)
        assert _detail(env)["sandbox"] == f"landlock-abi{abi}"
        got = _results(env.data["stdout"])
        assert got["outside"] != 0
        # ABI 1 cannot allow linking or moving a file between directories; 2 (REFER) can.
        assert (got["refer"] == 0) is (abi >= 2)
        # From ABI 6 signals to processes outside the sandbox are refused.
        assert (got["signal"] == 0) is (abi < 6)
        assert (got["tcp"] == 0) is (abi < 4)
        if abi < 4:
            listener.accept()[0].close()
    finally:
        b.reg.shutdown(timeout_s=5.0)


# -- what the host's installation adds: run in a child whose setting differs ------------------


def _python_child(python: list[str], code: str, args: list[str], env: Mapping[str, str],
                  executable: str | None = None) -> Any:
    """Run ``code`` in a child interpreter (``python``) with this tooltrace and the packages
    it imports (their directories added as sites, as this interpreter has them); the last line
    it prints, read as JSON."""
    prelude = f"import site\nfor d in {site.getsitepackages()!r}:\n    site.addsitedir(d)\n"
    p = subprocess.run([*python, "-c", prelude + code, *args], executable=executable,
                       capture_output=True, text=True, timeout=120, check=False,
                       env={**os.environ, "PYTHONPATH": str(Path(tooltrace.__file__).parents[1]),
                            **env})
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.splitlines()[-1])


# Run inside the child: each backend's command and what it said.
_CHILD = """
import json, sys
from tooltrace import ToolCall, ToolRegistry
from tooltrace.builtins import CommandConfig, register_builtins
ws, home, script, *modes = sys.argv[1:]
out = {}
for mode in modes:
    name, _, network = mode.partition("+")
    reg = ToolRegistry(workspace=ws, home=home)
    register_builtins(reg, commands=CommandConfig(sandbox=name, network=bool(network)))
    env = reg.call(ToolCall("run_command", {"argv": ["sh", "-c", script]}))
    step = next(s for s in env.steps if s.step == "execute")
    out[mode] = [(step.detail or {}).get("sandbox"), env.summary, (env.data or {}).get("stdout")]
    reg.shutdown(timeout_s=5.0)
print(json.dumps(out))
"""


def _child(python: list[str], tmp_path: Path, script: str, modes: list[str],
           env: Mapping[str, str], executable: str | None = None) -> dict[str, Any]:
    """Each of ``modes`` (``bwrap``, ``landlock+net``...) runs ``sh -c script`` in a child."""
    ws, home = tmp_path / "child-ws", tmp_path / "child-home"
    ws.mkdir(exist_ok=True)
    return dict(_python_child(python, _CHILD, [str(ws), str(home), script, *modes], env,
                              executable))


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Python installation of its own (a venv) for child interpreters."""
    root = tmp_path_factory.mktemp("python") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True,
                   capture_output=True, timeout=120)
    return root


@pytest.mark.parametrize("holds", ["nothing", "home-is-it", "home", "tmp"])
def test_a_python_installation_holding_the_home_or_the_temp_dir_is_not_granted(
    holds: str, venv: Path, tmp_path: Path,
) -> None:
    # The interpreter's own installation is granted to commands (they may run Python), unless
    # granting it would grant the user's home or the temporary directory with it.
    _need("auto")
    for d in ("home", "tmp"):
        (venv / d).mkdir(exist_ok=True)
    (tmp_path / "elsewhere").mkdir()
    env = {"HOME": str(tmp_path / "elsewhere"), "TMPDIR": str(tmp_path / "elsewhere")}
    if holds == "home-is-it":
        env["HOME"] = str(venv)
    elif holds != "nothing":
        env["HOME" if holds == "home" else "TMPDIR"] = str(venv / holds)
    got = _child([str(venv / "bin" / "python")], tmp_path, f"cat {venv}/pyvenv.cfg",
                 list(BACKENDS), env)
    for mode in BACKENDS:
        sandbox, summary, stdout = got[mode]
        assert sandbox.startswith(mode), (mode, summary)
        assert ("home = " in stdout) is (holds == "nothing"), (mode, holds, stdout)


def test_the_resolver_configuration_is_granted_with_the_network_only(tmp_path: Path) -> None:
    # Where /etc/resolv.conf links out of /etc (systemd-resolved, resolvconf: into /run), a
    # command allowed the network reads its target to resolve names; one refused the network
    # has no use for it and does not read it. The child runs in a mount namespace of its own
    # whose /etc is an overlay holding such a link.
    _need("auto")
    unshare = require_binary("unshare", "apt-get install util-linux")
    run = tmp_path / "run"
    for d in ("upper", "work", "run"):
        (tmp_path / d).mkdir()
    (run / "resolv.conf").write_text("nameserver 192.0.2.53\n")
    setup = (f"mount -t overlay overlay -o lowerdir=/etc,upperdir={tmp_path}/upper,"
             f"workdir={tmp_path}/work /etc && ln -sf {run}/resolv.conf /etc/resolv.conf")
    probe = subprocess.run([unshare, "-Urm", "sh", "-c", f"{setup} && cat /etc/resolv.conf"],
                           capture_output=True, text=True, timeout=60, check=False)
    if probe.stdout != "nameserver 192.0.2.53\n":
        missing(f"a user and mount namespace with an overlay /etc ({probe.stderr.strip()})")
    modes = [f"{m}{n}" for m in BACKENDS for n in ("", "+net")]
    got = _child([unshare, "-Urm", "sh", "-c", f'{setup} && exec "$0" "$@"', sys.executable],
                 tmp_path, "cat /etc/resolv.conf", modes, {})
    for mode in modes:
        sandbox, summary, stdout = got[mode]
        assert sandbox.startswith(mode.partition("+")[0]), (mode, summary)
        assert stdout == ("nameserver 192.0.2.53\n" if mode.endswith("+net") else ""), (
            mode, stdout)


def test_a_home_moved_into_the_python_installation_is_kept_out_from_then_on(
    venv: Path, tmp_path: Path,
) -> None:
    _need("auto")
    (venv / "home").mkdir(exist_ok=True)
    (tmp_path / "ws").mkdir()
    script = f"""
import json, os, sys
from tooltrace import ToolCall, ToolRegistry
from tooltrace.builtins import CommandConfig, register_builtins
out = []
for mode in ("landlock", "bwrap"):
    reg = ToolRegistry(workspace={str(tmp_path / "ws")!r}, home={str(tmp_path / "home")!r})
    register_builtins(reg, commands=CommandConfig(sandbox=mode))
    for home in ({str(tmp_path)!r}, {str(venv / "home")!r}):
        os.environ["HOME"] = home
        env = reg.call(ToolCall("run_command", {{"argv": ["cat", {str(venv / "pyvenv.cfg")!r}]}}))
        out.append(env.data["exit_code"] if env.data else env.summary)
    reg.shutdown(timeout_s=5.0)
print(json.dumps(out))
"""
    got = _python_child([str(venv / "bin" / "python")], script, [], {"HOME": str(tmp_path)})
    # Each backend: readable while the home lies elsewhere, not once it lies inside.
    assert got == [0, 1, 0, 1]


def test_without_an_interpreter_landlock_is_refused_and_auto_takes_bubblewrap(
    tmp_path: Path,
) -> None:
    # An embedding program's Python may not know its own executable (sys.executable is "").
    _need("auto")
    python = sys.executable
    got = _child(["embedded-python"], tmp_path, "echo ran", ["landlock", "auto"],
                 {"PATH": os.path.dirname(shutil.which("bwrap") or "/usr/bin/bwrap")},
                 executable=python)
    sandbox, summary, _ = got["landlock"]
    assert sandbox is None
    assert ("no command sandbox can run here (no Python interpreter to apply Landlock with)"
            in summary), summary
    assert got["auto"][0] == "bwrap" and got["auto"][2] == "ran\n", got["auto"]


# -- where no sandbox can run ----------------------------------------------------------------


def _refused(env: Any) -> None:
    assert env.status is Status.FAILED
    assert env.record.error_type == "SandboxUnavailableError"
    assert "pid" not in _detail(env)


def test_no_backend_means_no_command(tmp_path: Path) -> None:
    # The real code path, with bubblewrap missing and Landlock capped away.
    b = _box(tmp_path, "auto", bwrap_path=str(tmp_path / "no-bwrap"), landlock_max_abi=0)
    try:
        env = b.run("touch ran")
        _refused(env)
        assert "install bubblewrap" in env.summary and 'sandbox = "off"' in env.summary
        assert not (b.ws / "ran").exists()
        job = b.reg.call(ToolCall("run_command", {"argv": ["touch", "ran"]}, background=True))
        _refused(job)
        assert not (b.ws / "ran").exists()
    finally:
        b.reg.shutdown(timeout_s=5.0)


@pytest.mark.parametrize(("config", "says"), [
    ({"sandbox": "bwrap", "bwrap_path": "/nonexistent/bwrap"}, "bubblewrap"),
    ({"sandbox": "landlock", "landlock_max_abi": 0}, "this kernel offers no Landlock"),
    ({"sandbox": "landlock", "landlock_max_abi": 3}, "ABI 3 cannot refuse the network"),
])
def test_a_forced_backend_that_cannot_run_refuses(tmp_path: Path, config: dict[str, Any],
                                                  says: str) -> None:
    mode = config.pop("sandbox")
    b = _box(tmp_path, mode, **config)
    try:
        env = b.run("true")
        _refused(env)
        assert says in env.summary
    finally:
        b.reg.shutdown(timeout_s=5.0)


def test_a_command_whose_landlock_cannot_be_applied_is_refused_naming_the_other_settings(
    tmp_path: Path,
) -> None:
    # A write path below a file: the helper cannot open it to grant it, and fails before the
    # program starts.
    _need("landlock")
    (tmp_path / "file").write_text("")
    b = _box(tmp_path, "landlock", write_paths=(str(tmp_path / "file" / "sub"),))
    try:
        env = b.run("touch ran")
        _refused(env)
        assert "the kernel refused the Landlock sandbox (Not a directory)" in env.summary
        assert 'set sandbox = "bwrap" or, knowingly, "off"' in env.summary
        assert not (b.ws / "ran").exists()
    finally:
        b.reg.shutdown(timeout_s=5.0)


@pytest.mark.parametrize("mode", ["on", "strict", "Off", "none", ""])
def test_an_unknown_setting_is_refused_never_taken_for_off(mode: str) -> None:
    # Called by keyword, as the public signature allows.
    with pytest.raises(SandboxUnavailableError) as exc:
        choose_sandbox(mode=mode, grants=Grants(write=("/nonexistent",)))
    assert str(exc.value) == (f"unknown sandbox setting {mode!r}: one of auto, landlock, bwrap,"
                              " off")


def _fake_bwrap(tmp_path: Path, script: str) -> str:
    path = tmp_path / "fake-bwrap"
    path.write_text(f"#!/bin/sh\n{script}\n")
    path.chmod(0o755)
    return str(path)


_LONG = "bwrap: " + "x" * 293


@pytest.mark.parametrize(("script", "says"), [
    # bubblewrap where user namespaces are off: the first line of its error, cut at 200.
    (f"echo {_LONG} >&2; echo second line >&2; exit 1", f"({_LONG[:200]})"),
    ("echo 'bwrap: No permissions to create a new namespace' >&2; exit 1",
     "(bwrap: No permissions to create a new namespace)"),
    # Killed without a word: its status says what happened.
    ("kill -9 $$", "(-9)"),
    ("exit 3", "(3)"),
])
def test_a_bubblewrap_that_fails_its_probe_is_refused_with_its_reason(
    tmp_path: Path, script: str, says: str,
) -> None:
    b = _box(tmp_path, "bwrap", bwrap_path=_fake_bwrap(tmp_path, script))
    try:
        env = b.run("touch ran")
        _refused(env)
        assert f"no command sandbox can run here (bubblewrap does not run here {says})" in (
            env.summary), env.summary
        assert not (b.ws / "ran").exists()
    finally:
        b.reg.shutdown(timeout_s=5.0)


def test_a_bubblewrap_that_cannot_be_executed_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "bwrap"
    bad.write_bytes(b"\x7fELF\x00garbage")
    bad.chmod(0o755)
    b = _box(tmp_path, "bwrap", bwrap_path=str(bad))
    try:
        env = b.run("touch ran")
        _refused(env)
        assert "(bubblewrap does not run here (OSError))" in env.summary, env.summary
    finally:
        b.reg.shutdown(timeout_s=5.0)


def test_bubblewrap_is_probed_once_not_before_every_command(tmp_path: Path) -> None:
    real = require_binary("bwrap", "apt-get install bubblewrap")
    log = tmp_path / "bwrap.log"
    wrapper = _fake_bwrap(tmp_path, f'echo "$*" >> {log}\nexec {real} "$@"')
    b = _box(tmp_path, "bwrap", bwrap_path=wrapper)
    try:
        for _ in range(3):
            env = b.run("echo ok")
            assert env.status is Status.OK and env.data["stdout"] == "ok\n", env.summary
    finally:
        b.reg.shutdown(timeout_s=5.0)
    runs = log.read_text().splitlines()
    assert len(runs) == 4
    assert runs[0].startswith("--unshare-all --ro-bind / / ")  # the probe, then three commands
    assert not any(r.startswith("--unshare-all --ro-bind / / ") for r in runs[1:])


def test_off_runs_unconfined_and_says_so(tmp_path: Path) -> None:
    b = _box(tmp_path, "off", bwrap_path="/nonexistent/bwrap", landlock_max_abi=0)
    try:
        env = b.run('cat "$F"', F=str(b.outside / "secret.txt"))
        assert env.data["stdout"] == "secret\n"
        assert _detail(env)["sandbox"] == "off"
    finally:
        b.reg.shutdown(timeout_s=5.0)


def test_a_home_inside_the_workspace_is_hidden_by_bwrap_and_refused_by_landlock(
    tmp_path: Path,
) -> None:
    _need("auto")
    ws = tmp_path / "ws"
    home = ws / ".tooltrace"
    home.mkdir(parents=True)
    (home / "key").write_text("signing key\n")
    for mode in ("auto", "landlock"):
        reg = ToolRegistry(workspace=ws, home=home)
        register_builtins(reg, commands=CommandConfig(sandbox=mode))
        try:
            env = reg.call(ToolCall("run_command", {"argv": ["sh", "-c", 'cat "$K"; echo x > "$K"'],
                                                    "env": {"K": str(home / "key")}}))
            if mode == "landlock":
                _refused(env)
                assert "cannot keep a directory inside a grant out of reach" in env.summary
            else:
                assert _detail(env)["sandbox"] == "bwrap"
                assert "signing key" not in env.data["stdout"]
        finally:
            reg.shutdown(timeout_s=5.0)
    assert (home / "key").read_text() == "signing key\n"


def test_bad_settings_are_configuration_errors() -> None:
    from tooltrace import ConfigurationError

    with pytest.raises(ConfigurationError, match="sandbox must be one of"):
        CommandConfig(sandbox="of")
    with pytest.raises(ConfigurationError, match="absolute"):
        CommandConfig(read_paths=("relative",))
    with pytest.raises(ConfigurationError):
        CommandConfig(landlock_max_abi=-1)


@pytest.mark.parametrize(("value", "label"), [
    ("off", "off"), ("bwrap", "bwrap"), ("landlock-abi4", "landlock-abi4"),
    ("landlock-abi12", "landlock-abi12"), ("landlock-abi", None), ("landlock-abiX", None),
    ("landlock-abi4 ", None), ("xlandlock-abi4", None), ("xxxxxxxxxxxx4", None),
    ("auto", None), ("bash", None), ("", None), (None, None), (4, None), (["off"], None),
])
def test_only_a_sandbox_name_is_a_label(value: object, label: str | None) -> None:
    # What a span and a metric may carry from an execute step's detail: a closed set.
    assert sandbox_label(value) == label


@pytest.mark.parametrize("mode", ["off", *BACKENDS])
def test_the_chosen_backend_and_its_grants_cannot_be_changed(mode: str, tmp_path: Path) -> None:
    _need(mode)
    grants = Grants(write=(str(tmp_path),))
    sandbox = choose_sandbox(mode, grants)
    fields = dataclasses.fields(sandbox)  # type: ignore[arg-type]
    assert fields
    for f in fields:
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(sandbox, f.name, getattr(sandbox, f.name))
    with pytest.raises(dataclasses.FrozenInstanceError):
        grants.network = True  # type: ignore[misc]
    assert grants.network is False


# -- the record: step, span, autopsy, policy file ---------------------------------------------


def test_the_span_carries_the_sandbox(tmp_path: Path) -> None:
    _need("landlock")
    with OtlpHttpReceiver() as rx:
        tracing = TracingSink(endpoint=rx.endpoint, protocol="http/protobuf")
        (tmp_path / "ws").mkdir()
        reg = ToolRegistry(workspace=tmp_path / "ws", home=tmp_path / "h", sinks=[tracing])
        register_builtins(reg)
        try:
            env = reg.call(ToolCall("run_command", {"argv": ["true"]}))
            assert tracing.flush(10.0)
            (span,) = [s for s in rx.wait_for(1) if s.name == "execute_tool run_command"]
        finally:
            reg.shutdown(timeout_s=5.0)
    assert span.attributes["tooltrace.sandbox"] == _detail(env)["sandbox"]
    assert span.attributes["tooltrace.sandbox"] == f"landlock-abi{landlock_abi()}"


def test_the_policy_file_turns_the_sandbox_off_and_autopsy_shows_it(tmp_path: Path) -> None:
    from tooltrace.cli import main

    ws, home = tmp_path / "ws", tmp_path / "home"
    ws.mkdir()
    (tmp_path / "outside.txt").write_text("outside\n")
    policy = tmp_path / "tooltrace.toml"
    policy.write_text('version = 1\n\n[commands]\nsandbox = "off"\nnetwork = true\n')
    reg = create_registry(ws, home=home, policy_file=policy, tracing=False, metrics=False,
                          logging=False)
    try:
        env = reg.call(ToolCall("run_command", {"argv": ["sh", "-c", 'cat "$F"'],
                                                "env": {"F": str(tmp_path / "outside.txt")}}))
        assert env.data["stdout"] == "outside\n"
        assert _detail(env)["sandbox"] == "off"
        assert reg.flush(10.0)
    finally:
        reg.shutdown(timeout_s=5.0)
    out = CliRunner().invoke(main, ["autopsy", env.call_id, "--home", str(home), "--json"])
    assert out.exit_code == 0, out.output
    steps = json.loads(out.output)["steps"]
    (execute,) = [s for s in steps if s["step"] == "execute"]
    detail = execute["detail"]
    assert (json.loads(detail) if isinstance(detail, str) else detail)["sandbox"] == "off"


def test_the_policy_file_places_bad_command_settings(tmp_path: Path) -> None:
    from tooltrace.policy.file import check_policy, command_settings

    f = tmp_path / "tooltrace.toml"
    f.write_text('version = 1\n\n[commands]\nsandbox = "of"\nnetwork = "yes"\nshell = 1\n')
    problems = [str(p) for p in check_policy(f)]
    assert any(p.startswith(f"{f}:4:11:") and "did you mean 'off'" in p for p in problems)
    assert any(p.startswith(f"{f}:5:1:") and "true or false" in p for p in problems)
    assert any(p.startswith(f"{f}:6:") and "shell" in p for p in problems)
    assert command_settings(f) is None
    f.write_text('[commands]\nsandbox = "bwrap"\n')
    settings = command_settings(f)
    assert settings is not None and settings.config().sandbox == "bwrap"
    assert settings.config().network is False
