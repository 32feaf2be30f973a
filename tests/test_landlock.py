"""The Landlock helper with the real kernel: the rights each grant gives at each ABI, the
ruleset the kernel refuses, grants that cannot be opened, how the program is looked up, what
the status descriptor says and who holds it, no new privileges, and a kernel without Landlock."""

from __future__ import annotations

import ctypes
import os
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.components import missing

from tooltrace.runtime import _landlock as ll
from tooltrace.runtime import landlock_abi

# The kernel's access rights (include/uapi/linux/landlock.h), written out.
EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 0x1, 0x2, 0x4, 0x8
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR = 0x10, 0x20, 0x40, 0x80
MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK = 0x100, 0x200, 0x400, 0x800
MAKE_SYM, REFER, TRUNCATE, IOCTL_DEV = 0x1000, 0x2000, 0x4000, 0x8000
# What a ruleset handles at each ABI.
HANDLED = {1: 0x1FFF, 2: 0x3FFF, 3: 0x7FFF, 4: 0x7FFF, 5: 0xFFFF, 6: 0xFFFF, 7: 0xFFFF}
# What each kind of grant allows on a directory and on a file, before the ABI cuts it.
RIGHTS = {
    "rx": (EXECUTE | READ_FILE | READ_DIR, EXECUTE | READ_FILE),
    "r": (READ_FILE | READ_DIR, READ_FILE),
    "rw": (EXECUTE | WRITE_FILE | READ_FILE | READ_DIR | REMOVE_DIR | REMOVE_FILE | MAKE_DIR
           | MAKE_REG | MAKE_SOCK | MAKE_FIFO | MAKE_SYM | REFER | TRUNCATE,
           EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE),
    "dev": (READ_FILE | WRITE_FILE | TRUNCATE | IOCTL_DEV, READ_FILE | WRITE_FILE | TRUNCATE
            | IOCTL_DEV),
}
ENOTDIR, EACCES, ENOENT, ENOSYS, ENOMSG = 20, 13, 2, 38, 42


@pytest.mark.parametrize("abi", range(1, 8))
@pytest.mark.parametrize("kind", sorted(RIGHTS))
def test_each_grant_allows_exactly_its_rights_at_each_abi(kind: str, abi: int) -> None:
    on_dir, on_file = RIGHTS[kind]
    assert ll.allowed(kind, abi, True) == on_dir & HANDLED[abi]
    assert ll.allowed(kind, abi, False) == on_file & HANDLED[abi]
    assert (ll.FS_EXECUTE, ll.FS_WRITE_FILE, ll.FS_READ_FILE, ll.FS_READ_DIR) == (1, 2, 4, 8)
    # No ABI is used past the newest whose rights are written out above.
    assert max(HANDLED) == ll.KNOWN_ABI


def test_the_abi_is_the_one_the_kernel_reports() -> None:
    if os.uname().machine not in ("x86_64", "aarch64"):
        missing("the system call is named by its x86_64 and aarch64 number: this machine is"
                " neither")
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    # landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION), system call 444.
    reported = libc.syscall(ctypes.c_long(444), None, ctypes.c_size_t(0), ctypes.c_long(1))
    assert ll.abi_version() == max(0, reported)


# -- the helper, run as tooltrace runs it ------------------------------------------------------

#: The helper as tooltrace starts it, after the interpreter.
HELPER = ("-I", "-S", "-B", ll.__file__)


@dataclass(frozen=True)
class Ran:
    """What one run of the helper left: its exit code, output and status report."""

    code: int
    stdout: str
    stderr: str
    status: bytes


def _abi() -> int:
    abi = landlock_abi()
    if abi < 1:
        missing("a kernel with Landlock (Linux 5.13+, enabled at boot)")
    return abi


def _helper(flags: list[str], argv: list[str], *, status: bool = True,
            env: dict[str, str] | None = None, stdin: str = "", cwd: Path | None = None,
            new_session: bool = False, python: tuple[str, ...] = (),
            status_on_stdin: bool = False) -> Ran:
    """Run the helper with ``flags`` (a status pipe added unless ``status`` is False; given as
    its standard input, fd 0, when ``status_on_stdin``), then ``argv`` after ``--``."""
    r, w = os.pipe()
    try:
        fd_flags = ["--status-fd", "0" if status_on_stdin else str(w)] if status else []
        given: dict[str, Any] = {"stdin": w} if status_on_stdin else {"input": stdin,
                                                                      "pass_fds": (w,)}
        p = subprocess.run([sys.executable, *python, *HELPER, *flags, *fd_flags, "--", *argv],
                           **given, capture_output=True, text=True, env=env, cwd=cwd,
                           start_new_session=new_session, timeout=60, check=False)
        os.close(w)
        w = -1
        report = os.read(r, 256)
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)
    return Ran(p.returncode, p.stdout, p.stderr, report)


def _everything(ws: Path) -> list[str]:
    """Grants under which any program runs: the whole tree read and execute, ``ws`` writable."""
    return ["--abi", str(_abi()), "--rx", "/", "--rw", str(ws)]


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    d = tmp_path / "ws"
    d.mkdir()
    return d


def test_a_grant_reads_lists_and_executes_as_its_kind_says(tmp_path: Path, ws: Path) -> None:
    for name in ("r", "rx"):
        d = tmp_path / name
        d.mkdir()
        (d / "data").write_text(f"{name} data\n")
        (d / "prog").write_text("#!/bin/sh\necho ran\n")
        (d / "prog").chmod(0o755)
    script = ('for d in "$R" "$X"; do '
              'cat "$d/data" >/dev/null 2>&1; echo read=$?; '
              'ls "$d" >/dev/null 2>&1; echo list=$?; '
              '"$d/prog" >/dev/null 2>&1; echo exec=$?; '
              'echo x >> "$d/data" 2>/dev/null; echo write=$?; '
              'touch "$d/new" 2>/dev/null; echo create=$?; '
              'done')
    env = {"PATH": os.environ["PATH"], "R": str(tmp_path / "r"), "X": str(tmp_path / "rx")}
    run = _helper(["--abi", str(_abi()), "--rx", "/usr", "--rx", "/bin", "--rx", "/lib",
                   "--rx", "/lib64", "--dev", "/dev/null", "--r", str(tmp_path / "r"), "--rx",
                   str(tmp_path / "rx")],
                  ["sh", "-c", script], env=env)
    assert run.status == b"" and run.code == 0, run
    lines = [(k, v == "0") for k, v in (line.split("=") for line in run.stdout.split())]
    got = {"r": dict(lines[:5]), "rx": dict(lines[5:])}
    assert got["r"] == {"read": True, "list": True, "exec": False, "write": False,
                        "create": False}, got
    assert got["rx"] == {**got["r"], "exec": True}, got
    assert (tmp_path / "r" / "data").read_text() == "r data\n"


def test_a_writable_directory_takes_anything_but_device_nodes_even_from_root(ws: Path) -> None:
    script = ("mkdir d; echo mkdir=$?; mkfifo f; echo fifo=$?; ln -s d s; echo symlink=$?; "
              "echo x > r; echo file=$?; : > r; echo truncate=$?; rm r; echo remove=$?; "
              "mknod c c 1 3 2>/dev/null; echo char=$?; mknod b b 7 0 2>/dev/null; echo block=$?")
    run = _helper(_everything(ws), ["sh", "-c", f'cd "{ws}" && {script}'])
    assert run.status == b"", run
    got = dict(line.split("=") for line in run.stdout.split())
    assert {k: v for k, v in got.items() if k not in ("char", "block")} == dict.fromkeys(
        ("mkdir", "fifo", "symlink", "file", "truncate", "remove"), "0"), got
    assert got["char"] != "0" and got["block"] != "0", got
    assert sorted(os.listdir(ws)) == ["d", "f", "s"]


@pytest.mark.parametrize("flags", [[], ["--abi", "0"]], ids=["no-abi", "abi-0"])
def test_a_ruleset_that_handles_nothing_is_refused_and_the_program_never_runs(
    ws: Path, flags: list[str],
) -> None:
    # A ruleset must handle some right; with none the kernel answers ENOMSG.
    _abi()
    run = _helper([*flags, "--rx", "/", "--rw", str(ws)], ["touch", str(ws / "ran")])
    assert (run.code, run.status) == (126, f"landlock:{ENOMSG}".encode()), run
    assert not (ws / "ran").exists()


def test_a_grant_that_cannot_be_opened_refuses_the_sandbox(ws: Path) -> None:
    (ws / "file").write_text("")
    run = _helper([*_everything(ws), "--rx", str(ws / "file" / "below")],
                  ["touch", str(ws / "ran")])
    assert (run.code, run.status) == (126, f"landlock:{ENOTDIR}".encode()), run
    assert not (ws / "ran").exists()


def test_a_grant_of_a_path_that_does_not_exist_is_skipped(ws: Path) -> None:
    # The missing grants come first: those after them still hold.
    run = _helper(["--abi", str(_abi()), "--rx", str(ws / "absent"), "--rw",
                   str(ws / "also-absent"), "--rx", "/", "--rw", str(ws)],
                  ["touch", str(ws / "ran")])
    assert (run.code, run.status) == (0, b""), run
    assert (ws / "ran").exists()


def test_grants_on_a_socket_and_a_terminal_need_not_open_them(ws: Path) -> None:
    # A unix socket cannot be opened for reading, nor /dev/tty without a controlling terminal
    # (a new session has none): the grants name them without opening them.
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(ws / "sock"))
        run = _helper([*_everything(ws), "--rw", str(ws / "sock"), "--dev", "/dev/tty"],
                      ["touch", str(ws / "ran")], new_session=True)
    assert (run.code, run.status) == (0, b""), run
    assert (ws / "ran").exists()


@pytest.mark.parametrize("place", ["first", "twice-last"])
def test_no_tcp_may_stand_anywhere_among_the_flags_and_twice(ws: Path, place: str) -> None:
    grants = ["--rw", str(ws), "--rx", "/"]
    flags = ["--no-tcp", *grants] if place == "first" else [*grants, "--no-tcp", "--no-tcp"]
    run = _helper(["--abi", str(_abi()), *flags], ["touch", str(ws / "ran")])
    assert (run.code, run.status) == (0, b""), run
    assert (ws / "ran").exists()


def test_files_named_like_the_flags_in_the_working_directory_change_nothing(ws: Path) -> None:
    # The command starts where the model asked, which may hold any names.
    for name in ("--abi", "--no-tcp", "--rw", "--rx", "--r", "--dev", "--status-fd", "--"):
        (ws / name).mkdir()
    run = _helper([*_everything(ws), "--no-tcp", "--r", "/proc"], ["touch", "ran"], cwd=ws)
    assert (run.code, run.status) == (0, b""), run
    assert (ws / "ran").exists()


def test_the_helper_starts_without_loading_typing(ws: Path) -> None:
    # Each command pays the helper's start: it loads the few standard modules it uses.
    run = _helper(_everything(ws), ["true"], python=("-X", "importtime"))
    assert run.code == 0, run
    loaded = {line.rsplit("|", 1)[-1].strip() for line in run.stderr.splitlines()
              if line.startswith("import time:")}
    assert "ctypes" in loaded
    assert "typing" not in loaded, sorted(loaded)


def test_the_command_runs_with_no_new_privileges(ws: Path) -> None:
    # Set before the restriction: a set-user-id program it starts gains nothing.
    run = _helper(_everything(ws), ["grep", "NoNewPrivs", "/proc/self/status"])
    assert run.status == b"" and run.stdout.split() == ["NoNewPrivs:", "1"], run


# -- looking the program up --------------------------------------------------------------------


def _program(d: Path, says: str, *, executable: bool = True) -> None:
    d.mkdir(exist_ok=True)
    (d / "prog").write_text(f"#!/bin/sh\necho {says}\n")
    (d / "prog").chmod(0o755 if executable else 0o644)


@pytest.mark.parametrize(("layout", "expect"), [
    # (what each PATH entry holds, what happens: the program's output or the exec error)
    (("x", "empty"), "from 0"),
    (("empty", "x"), "from 1"),
    (("no-x", "x"), "from 1"),
    (("file", "x"), "from 1"),
    (("no-x", "empty"), EACCES),
    (("empty", "no-x"), EACCES),
    (("file", "no-x"), EACCES),
    (("no-x", "file"), EACCES),
    (("empty", "empty"), ENOENT),
    (("empty", "file"), ENOTDIR),
    (("file", "empty"), ENOENT),
])
def test_the_program_is_looked_up_on_path_as_execvp_does(
    ws: Path, layout: tuple[str, str], expect: str | int,
) -> None:
    dirs = []
    for i, what in enumerate(layout):
        d = ws / f"bin{i}"
        if what == "file":
            d.write_text("")
        elif what == "empty":
            d.mkdir()
        else:
            _program(d, f"from {i}", executable=what == "x")
        dirs.append(str(d))
    # The argument names a path: only the program's own name decides how it is found.
    run = _helper(_everything(ws), ["prog", str(ws)], env={"PATH": ":".join(dirs)})
    if isinstance(expect, str):
        assert (run.code, run.status, run.stdout) == (0, b"", f"{expect}\n"), run
    else:
        assert (run.code, run.status, run.stdout) == (127, f"exec:{expect}".encode(), ""), run


def test_a_program_named_by_its_path_is_not_looked_up(ws: Path) -> None:
    _program(ws / "bin", "on path")
    env = {"PATH": str(ws / "bin")}
    missing_prog = _helper(_everything(ws), [str(ws / "absent" / "prog")], env=env)
    assert (missing_prog.code, missing_prog.status) == (127, f"exec:{ENOENT}".encode())
    _program(ws / "sub", "in sub")
    relative = _helper(_everything(ws), ["./sub/prog", "arg"], env=env, cwd=ws)
    assert (relative.code, relative.stdout) == (0, "in sub\n"), relative


# -- the status descriptor ---------------------------------------------------------------------

# A program that says whether it holds the descriptor its argument names.
_HOLDS = [sys.executable, "-c", "import os, sys\n"
          "try:\n    os.fstat(int(sys.argv[1]))\nexcept OSError:\n    print('closed')\n"
          "else:\n    print('held')\n"]


def test_the_command_does_not_hold_the_status_descriptor(ws: Path) -> None:
    # The exec closes it: the parent's end-of-file says the program runs, and the program
    # cannot write a report of its own.
    r, w = os.pipe()
    try:
        p = subprocess.run(
            [sys.executable, *HELPER, *_everything(ws), "--status-fd",
             str(w), "--", *_HOLDS, str(w)],
            pass_fds=(w,), capture_output=True, text=True, timeout=60, check=False)
    finally:
        os.close(w)
        os.close(r)
    assert (p.returncode, p.stdout) == (0, "closed\n"), p


def test_without_a_status_descriptor_the_command_keeps_its_standard_streams(ws: Path) -> None:
    run = _helper(_everything(ws), ["sh", "-c", "echo out; echo err >&2; cat"], status=False,
                  stdin="in\n")
    assert (run.code, run.stdout, run.stderr) == (0, "out\nin\n", "err\n"), run
    refused = _helper(["--rx", "/"], ["sh", "-c", "echo out"], status=False)
    assert (refused.code, refused.stdout) == (126, ""), refused


def test_the_status_descriptor_may_be_standard_input(ws: Path) -> None:
    for argv, code, report, out in ((["no-such-program-here"], 127, f"exec:{ENOENT}", ""),
                                    ([*_HOLDS, "0"], 0, "", "closed\n")):
        ran = _helper(_everything(ws), argv, status_on_stdin=True)
        assert (ran.code, ran.status.decode(), ran.stdout) == (code, report, out), ran


def test_a_parent_that_stopped_listening_still_learns_the_exit_code(ws: Path) -> None:
    r, w = os.pipe()
    os.close(r)  # the report finds no reader (EPIPE)
    try:
        p = subprocess.run(
            [sys.executable, *HELPER, *_everything(ws), "--status-fd",
             str(w), "--", "no-such-program-here"],
            pass_fds=(w,), capture_output=True, text=True, timeout=60, check=False)
    finally:
        os.close(w)
    assert (p.returncode, p.stderr) == (127, ""), p


# -- a kernel without Landlock -----------------------------------------------------------------

def _filtered(code: str) -> str:
    """A script that installs the seccomp filter ``code`` (a list of BPF instructions) on
    itself; the rest of the script (and what it executes) runs under it."""
    return f"""
import ctypes, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
code = {code}
filt = ctypes.create_string_buffer(b"".join(struct.pack("HBBI", *c) for c in code))
prog = struct.pack("HxxxxxxQ", len(code), ctypes.addressof(filt))
ul = ctypes.c_ulong
assert libc.prctl(38, ul(1), ul(0), ul(0), ul(0)) == 0, ctypes.get_errno()
assert libc.prctl(22, ul(2), ctypes.c_char_p(prog), ul(0), ul(0)) == 0, ctypes.get_errno()
"""


# A filter that answers ENOSYS to Landlock's three system calls (444-446 on x86_64 and
# aarch64), as a kernel built without Landlock does.
_NO_LANDLOCK = _filtered("""[
        (0x20, 0, 0, 0),                  # A = the system call's number
        (0x35, 0, 2, 444),                # A >= 444, else allow
        (0x25, 1, 0, 446),                # A > 446: allow
        (0x06, 0, 0, 0x00050000 | 38),    # SECCOMP_RET_ERRNO | ENOSYS
        (0x06, 0, 0, 0x7FFF0000)]         # SECCOMP_RET_ALLOW""")


# A 32-bit personality: uname() names a machine (i686, armv8l) whose numbers the binding does
# not claim to know.
_FOREIGN_MACHINE = "import ctypes\nctypes.CDLL(None).personality(0x0008)\n"  # PER_LINUX32


@pytest.mark.parametrize("setup", [_NO_LANDLOCK, _FOREIGN_MACHINE],
                         ids=["kernel-without-landlock", "unknown-machine"])
def test_no_landlock_is_offered_where_the_kernel_or_the_machine_lacks_it(setup: str) -> None:
    if os.uname().machine not in ("x86_64", "aarch64"):
        missing("the filter names the system calls by their x86_64 and aarch64 numbers: this"
                " machine is neither")
    _abi()
    probe = subprocess.run(
        [sys.executable, "-c", setup + "from tooltrace.runtime import _landlock as ll\n"
         "print(ll.abi_version())\n"], capture_output=True, text=True, timeout=60, check=False)
    assert (probe.returncode, probe.stdout) == (0, "0\n"), probe


def test_on_a_kernel_without_landlock_the_helper_runs_nothing(ws: Path) -> None:
    if os.uname().machine not in ("x86_64", "aarch64"):
        missing("the filter names the system calls by their x86_64 and aarch64 numbers: this"
                " machine is neither")
    _abi()
    helper = [sys.executable, *HELPER, "--abi", str(ll.KNOWN_ABI), "--rx",
              "/", "--rw", str(ws), "--status-fd", "1", "--", "touch", str(ws / "ran")]
    probe = subprocess.run(
        [sys.executable, "-c", f"{_NO_LANDLOCK}import os\nos.execv({helper[0]!r}, {helper!r})\n"],
        capture_output=True, text=True, timeout=60, check=False)
    assert (probe.returncode, probe.stdout) == (126, f"landlock:{ENOSYS}"), probe
    assert not (ws / "ran").exists()


# -- an older kernel, and other systems --------------------------------------------------------


def _refusing(nr: int, arg: int, most: int) -> str:
    """A filter answering EINVAL to system call ``nr`` when its argument ``arg`` (low 32 bits)
    is above ``most``, as a kernel that does not know a flag does."""
    return _filtered(f"""[
        (0x20, 0, 0, 0),                  # A = the system call's number
        (0x15, 0, 3, {nr}),               # A == nr, else allow
        (0x20, 0, 0, {16 + 8 * arg}),     # A = the argument's low 32 bits
        (0x25, 0, 1, {most}),             # A > most: refuse, else allow
        (0x06, 0, 0, 0x00050000 | 22),    # SECCOMP_RET_ERRNO | EINVAL
        (0x06, 0, 0, 0x7FFF0000)]         # SECCOMP_RET_ALLOW""")


def test_the_abi_is_asked_with_the_version_flag_an_older_kernel_knows() -> None:
    # landlock_create_ruleset(NULL, 0, flags): before Linux 6.15 only VERSION (1) is known;
    # ERRATA (2) answers a bitmask of fixed issues, which is not the ABI.
    if os.uname().machine not in ("x86_64", "aarch64"):
        missing("the filter names the system call by its x86_64 and aarch64 number: this"
                " machine is neither")
    _abi()
    abi = ll.abi_version()  # the kernel's, which may be newer than the binding knows
    assert abi >= 1 and ll.abi_version() == abi  # the second from the library loaded once
    probe = subprocess.run(
        [sys.executable, "-c", _refusing(444, 2, 1) + "from tooltrace.runtime import _landlock"
         " as ll\nprint(ll.abi_version(), ll.abi_version())\n"],
        capture_output=True, text=True, timeout=60, check=False)
    assert (probe.returncode, probe.stdout) == (0, f"{abi} {abi}\n"), probe


def test_the_helper_restricts_itself_with_no_flag_an_older_kernel_refuses(ws: Path) -> None:
    # landlock_restrict_self(ruleset, flags): flags came with ABI 7 (audit logging); a kernel
    # before it refuses any.
    if os.uname().machine not in ("x86_64", "aarch64"):
        missing("the filter names the system call by its x86_64 and aarch64 number: this"
                " machine is neither")
    helper = [sys.executable, *HELPER, *_everything(ws), "--status-fd", "1", "--",
              "touch", str(ws / "ran")]
    probe = subprocess.run(
        [sys.executable, "-c", f"{_refusing(446, 1, 0)}import os\n"
         f"os.execv({helper[0]!r}, {helper!r})\n"],
        capture_output=True, text=True, timeout=60, check=False)
    assert (probe.returncode, probe.stdout) == (0, ""), probe
    assert (ws / "ran").exists()


@pytest.mark.parametrize("platform", ["darwin", "win32", "freebsd14", "cygwin"])
def test_no_landlock_is_offered_off_linux(platform: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Only the platform's name tells this apart here: it is set, the kernel stays Linux.
    _abi()
    monkeypatch.setattr(sys, "platform", platform)
    assert ll.abi_version() == 0
