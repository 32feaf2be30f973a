"""Landlock, the Linux security module through which a process restricts itself: a small ctypes
binding, the access rights each ABI knows, and the helper that applies a ruleset and then runs
the command.

The helper is this file run as a script by the interpreter that runs tooltrace::

    python -I -S -B _landlock.py --abi 7 --no-tcp --rw WS --rx /usr ... --status-fd N -- PROG ARGS

It restricts itself (``no_new_privs``, then ``landlock_restrict_self``) and execs the program,
which inherits the restriction with everything it starts. Why a process of its own rather than
``subprocess``'s ``preexec_fn``: the registry runs tools on threads, and Python code between
``fork`` and ``exec`` in a threaded process can deadlock on a lock another thread held at the
fork (the documentation says ``preexec_fn`` is not safe with threads); the helper is a fresh,
single-threaded interpreter. It imports nothing but the standard library, so with ``-I -S`` it
starts in a few milliseconds (docs/internals/sandbox.md has the measurement). What went wrong
before the exec is written to the status descriptor (``landlock:<errno>`` or ``exec:<errno>``),
which the exec closes: the parent reads end-of-file when the program runs.

ABI handling: a ruleset may only name the rights the running kernel knows, so every mask below
is cut to the ABI in use (``handled_fs``, ``handled_net``, ``scoped``). ABI 1 has the
filesystem rights; 2 adds ``REFER`` (moving and linking across directories; on ABI 1 that is
always refused); 3 ``TRUNCATE``; 4 TCP ``bind`` and ``connect``; 5 ``IOCTL_DEV``; 6 scopes
abstract unix sockets and signals to the sandbox; 7 adds audit-log flags and no new right.
"""

from __future__ import annotations

import os
import stat
import sys

# Not typing's: importing typing would add milliseconds to the helper's start, every command.
TYPE_CHECKING = False

if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "FS_EXECUTE",
    "FS_READ_DIR",
    "FS_READ_FILE",
    "FS_WRITE_FILE",
    "KNOWN_ABI",
    "abi_version",
    "allowed",
    "handled_fs",
    "handled_net",
    "restrict",
    "scoped",
]

FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
_FS_REMOVE_DIR = 1 << 4
_FS_REMOVE_FILE = 1 << 5
_FS_MAKE_CHAR = 1 << 6
_FS_MAKE_DIR = 1 << 7
_FS_MAKE_REG = 1 << 8
_FS_MAKE_SOCK = 1 << 9
_FS_MAKE_FIFO = 1 << 10
_FS_MAKE_BLOCK = 1 << 11
_FS_MAKE_SYM = 1 << 12
_FS_REFER = 1 << 13  # ABI 2
_FS_TRUNCATE = 1 << 14  # ABI 3
_FS_IOCTL_DEV = 1 << 15  # ABI 5
_FS_ABI1 = (1 << 13) - 1
_NET_BIND_TCP = 1 << 0  # ABI 4
_NET_CONNECT_TCP = 1 << 1  # ABI 4
_SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
_SCOPE_SIGNAL = 1 << 1  # ABI 6
#: The newest ABI whose rights this binding knows (a newer kernel is used as this one).
KNOWN_ABI = 7

# Rights that only mean something on a directory; a rule on a file may not name them.
_DIR_ONLY = (FS_READ_DIR | _FS_REMOVE_DIR | _FS_REMOVE_FILE | _FS_MAKE_CHAR | _FS_MAKE_DIR
             | _FS_MAKE_REG | _FS_MAKE_SOCK | _FS_MAKE_FIFO | _FS_MAKE_BLOCK | _FS_MAKE_SYM
             | _FS_REFER)
#: What each kind of grant allows (before the ABI cuts it): ``rx`` read and execute, ``r`` read
#: only, ``rw`` everything but making device nodes and device ioctls, ``dev`` a device file.
_KINDS = {
    "rx": FS_EXECUTE | FS_READ_FILE | FS_READ_DIR,
    "r": FS_READ_FILE | FS_READ_DIR,
    "rw": (_FS_ABI1 | _FS_REFER | _FS_TRUNCATE) & ~(_FS_MAKE_CHAR | _FS_MAKE_BLOCK),
    "dev": FS_READ_FILE | FS_WRITE_FILE | _FS_TRUNCATE | _FS_IOCTL_DEV,
}

_CREATE_RULESET_VERSION = 1 << 0
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38
# The generic syscall table's numbers, which x86_64 and aarch64 both use for these calls.
_NUMBERS = (444, 445, 446)
_MACHINES = frozenset({"x86_64", "amd64", "aarch64", "arm64"})


def handled_fs(abi: int) -> int:
    """The filesystem rights a ruleset handles at ``abi`` (each denied unless a rule grants it)."""
    if abi < 1:
        return 0
    rights = _FS_ABI1
    if abi >= 2:
        rights |= _FS_REFER
    if abi >= 3:
        rights |= _FS_TRUNCATE
    if abi >= 5:
        rights |= _FS_IOCTL_DEV
    return rights


def handled_net(abi: int, refuse_tcp: bool) -> int:
    """The network rights handled at ``abi``: TCP bind and connect from ABI 4, when refused."""
    return _NET_BIND_TCP | _NET_CONNECT_TCP if refuse_tcp and abi >= 4 else 0


def scoped(abi: int) -> int:
    """The scopes set at ``abi``: from ABI 6, abstract unix sockets and signals stay inside."""
    return _SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL if abi >= 6 else 0


def allowed(kind: str, abi: int, is_dir: bool) -> int:
    """What a grant of ``kind`` (``rx``, ``r``, ``rw``, ``dev``) allows at ``abi`` on a
    directory or a file (a file's rule holds only the rights that apply to files)."""
    rights = _KINDS[kind] & handled_fs(abi)
    return rights if is_dir else rights & ~_DIR_ONLY


def _ffi() -> tuple[Any, Any, Any, Any]:
    """(ctypes, libc, the ruleset attribute type, the path-beneath attribute type), loaded on
    first use: importing tooltrace's command tools does not load ctypes. (No functools or
    typing at run time: the helper's start is what each command pays.)"""
    if _FFI:
        return _FFI[0]
    import ctypes

    class RulesetAttr(ctypes.Structure):
        _fields_ = [("handled_access_fs", ctypes.c_uint64),
                    ("handled_access_net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]

    class PathBeneathAttr(ctypes.Structure):
        _pack_ = 1
        _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    _FFI.append((ctypes, libc, RulesetAttr, PathBeneathAttr))
    return _FFI[0]


_FFI: list[tuple[Any, Any, Any, Any]] = []


def _check(result: int) -> int:
    if result < 0:
        err = _ffi()[0].get_errno()
        raise OSError(err, os.strerror(err))
    return result


def abi_version() -> int:
    """The Landlock ABI the running kernel offers; 0 when it offers none (not built in, turned
    off at boot, or an architecture whose syscall numbers this binding does not know)."""
    if sys.platform != "linux" or os.uname().machine not in _MACHINES:
        return 0
    ctypes, libc, _, _ = _ffi()
    abi = libc.syscall(ctypes.c_long(_NUMBERS[0]), None, ctypes.c_size_t(0),
                       ctypes.c_long(_CREATE_RULESET_VERSION))
    return max(0, int(abi))


def restrict(abi: int, grants: list[tuple[str, str]], refuse_tcp: bool) -> None:
    """Restrict this process (and everything it starts) to ``grants`` — ``(kind, path)``
    pairs; a path that does not exist is skipped — with TCP refused when ``refuse_tcp`` (ABI 4+).
    Irrevocable; raises ``OSError`` when the kernel refuses."""
    ctypes, libc, ruleset_attr, path_beneath_attr = _ffi()
    create, add, restrict_self = (ctypes.c_long(n) for n in _NUMBERS)
    attr = ruleset_attr(handled_fs(abi), handled_net(abi, refuse_tcp), scoped(abi))
    # The size names the fields the ABI reads: older kernels refuse fields they do not know.
    size = 8 if abi < 4 else 16 if abi < 6 else 24
    ruleset = _check(libc.syscall(create, ctypes.byref(attr), ctypes.c_size_t(size),
                                  ctypes.c_long(0)))
    try:
        for kind, path in grants:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except FileNotFoundError:
                continue
            try:
                is_dir = stat.S_ISDIR(os.fstat(fd).st_mode)
                rule = path_beneath_attr(allowed(kind, abi, is_dir), fd)
                if rule.allowed_access:
                    _check(libc.syscall(add, ctypes.c_long(ruleset),
                                        ctypes.c_long(_RULE_PATH_BENEATH), ctypes.byref(rule),
                                        ctypes.c_long(0)))
            finally:
                os.close(fd)
        _check(libc.prctl(ctypes.c_int(_PR_SET_NO_NEW_PRIVS), ctypes.c_ulong(1),
                          ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0)))
        _check(libc.syscall(restrict_self, ctypes.c_long(ruleset), ctypes.c_long(0)))
    finally:
        os.close(ruleset)


def _parse(args: list[str]) -> tuple[int, bool, list[tuple[str, str]], int, list[str]]:
    abi, refuse_tcp, status_fd = 0, False, -1
    grants: list[tuple[str, str]] = []
    i = 0
    while i < len(args) and args[i] != "--":
        flag = args[i]
        if flag == "--no-tcp":
            refuse_tcp, i = True, i + 1
            continue
        value = args[i + 1]
        if flag == "--abi":
            abi = int(value)
        elif flag == "--status-fd":
            status_fd = int(value)
        else:
            grants.append((flag[2:], value))
        i += 2
    return abi, refuse_tcp, grants, status_fd, args[i + 1:]


def _report(fd: int, stage: str, err: int) -> None:
    if fd >= 0:
        try:
            os.write(fd, f"{stage}:{err}".encode())
        except OSError:
            pass


def _execvp(argv: list[str], dirs: list[str]) -> None:
    """``os.execvp`` without its imports (the standard library may be out of reach by now):
    the program by its path, else the first of ``dirs`` that holds it, as ``subprocess`` runs
    it (no shell for a file that is not a program)."""
    if "/" in argv[0]:
        os.execv(argv[0], argv)
    first: OSError | None = None
    last: OSError = FileNotFoundError(2, "No such file or directory", argv[0])
    for d in dirs:
        try:
            os.execv(os.path.join(d, argv[0]), argv)
        except (FileNotFoundError, NotADirectoryError) as exc:
            last = exc
        except OSError as exc:
            last = exc
            first = first or exc
    raise first or last


def main(args: list[str]) -> None:
    """The helper: restrict this process as the arguments say, then exec the program."""
    abi, refuse_tcp, grants, status_fd, argv = _parse(args)
    if status_fd >= 0:
        os.set_inheritable(status_fd, False)  # closed by the exec: EOF tells the parent it ran
    dirs = os.get_exec_path()  # before the restriction: it imports what it needs
    try:
        restrict(abi, grants, refuse_tcp)
    except OSError as exc:
        _report(status_fd, "landlock", exc.errno or 0)
        os._exit(126)
    try:
        _execvp(argv, dirs)
    except OSError as exc:
        _report(status_fd, "exec", exc.errno or 0)
        os._exit(127)


if __name__ == "__main__":
    main(sys.argv[1:])
