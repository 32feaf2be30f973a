"""The command sandbox: what ``run_command`` and background jobs may reach, enforced by the
kernel.

A sandboxed command may read and write the workspace (and the directories the operator adds
with ``write_paths``) and a private temporary directory made for it alone (``TMPDIR``, removed
when it ends); read and execute the system's directories (``SYSTEM_DIRS``), the Python
installation that runs tooltrace and the directories the operator adds (``read_paths``, the
policy file's absolute ``[paths] read_only`` roots); use the basic devices (``DEVICES``) and
read ``/proc``. Nothing else: not ``/tmp``, not ``$HOME``, not the tooltrace home, which stays
out of reach even where it lies inside a grant. Outbound network is refused unless the
operator allows it.

Two backends (``docs/internals/sandbox.md`` compares them, with measurements):

- ``bwrap`` (bubblewrap): the command runs in new user, mount, pid, ipc, uts and cgroup
  namespaces and, unless the network is allowed, a network namespace with only a loopback of
  its own. Its file tree holds only the grants; ``/tmp`` is its private directory; the home is
  covered by an empty tmpfs where a grant holds it; when the command ends, its pid namespace
  and everything left in it go with it.
- ``landlock``: the command restricts itself before it starts (``tooltrace.runtime._landlock``): the
  grants are the only paths it may open; from ABI 4 TCP ``connect`` and ``bind`` are refused,
  from ABI 6 it cannot signal processes outside or reach abstract unix sockets. Landlock
  cannot cover a directory inside a grant, so it refuses to run when the home lies in one.

``choose_sandbox`` picks one for a setting or raises ``SandboxUnavailableError`` saying how
to get one. ``auto`` takes Landlock where it can enforce the grants (the program is exec'd in
place, so its process group, exit code and signals are exactly those of an unsandboxed run,
and no namespace is needed), else bubblewrap (a kernel without Landlock, an ABI older than 4
while the network is refused, a home inside a grant).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final, Protocol

from ..exceptions import SandboxUnavailableError
from . import SANDBOX_MODES, _landlock

__all__ = [
    "DEVICES",
    "SANDBOX_MODES",
    "SYSTEM_DIRS",
    "CommandSandbox",
    "Grants",
    "Launch",
    "choose_sandbox",
    "landlock_abi",
    "sandbox_label",
]

#: The sandbox settings: ``auto`` (Landlock, else bubblewrap), ``landlock``, ``bwrap``, ``off``.
#: Read and execute for every sandboxed command (those that exist here). ``/etc`` holds what
#: programs need to start (the loader cache, users, certificates, alternatives); ``/opt`` holds
#: installed software. None holds the record, and none is writable.
SYSTEM_DIRS: Final = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc",
                      "/opt")
#: The devices a sandboxed command may open for reading and writing.
DEVICES: Final = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom",
                  "/dev/tty")
_HELPER: Final = os.path.abspath(_landlock.__file__)
_PROBE_TIMEOUT_S: Final = 10.0


@dataclass(frozen=True, slots=True)
class Grants:
    """What one command may reach besides the system's directories (real paths)."""

    write: tuple[str, ...]
    """Directories it may read, write, execute and change (the workspace first)."""
    read: tuple[str, ...] = ()
    """Directories it may read and execute."""
    hidden: tuple[str, ...] = ()
    """Directories that stay out of reach even inside a grant (the tooltrace home)."""
    network: bool = False
    """Whether outbound network is allowed."""


@dataclass(slots=True)
class Launch:
    """How to start one sandboxed command, and what to clean up once it ended."""

    argv: list[str]
    """What to execute: the sandbox's launcher, its settings, then the command."""
    env: dict[str, str]
    """The command's environment (``TMPDIR`` set)."""
    pass_fds: tuple[int, ...] = ()
    """Descriptors the launcher needs (the status pipe)."""
    tmpdir: str | None = None
    """The private temporary directory (host path), removed by ``close``."""
    _status: tuple[int, int] | None = field(default=None, repr=False)

    def started(self) -> None:
        """Call once the launcher was started: wait until the command runs or the launcher
        failed; raise ``OSError`` (the program) or ``SandboxUnavailableError`` (the kernel)."""
        if self._status is None:
            return
        r, w = self._status
        self._status = None
        os.close(w)
        chunks = []
        try:
            while chunk := os.read(r, 256):
                chunks.append(chunk)
        finally:
            os.close(r)
        report = b"".join(chunks).decode("ascii", "replace")
        if not report:
            return
        stage, _, code = report.partition(":")
        err = int(code) if code.isdecimal() else errno.EPERM
        if stage == "landlock":
            raise SandboxUnavailableError(
                f"the kernel refused the Landlock sandbox ({os.strerror(err)}); set"
                " sandbox = \"bwrap\" or, knowingly, \"off\"")
        raise OSError(err, os.strerror(err), self.argv[self.argv.index("--") + 1])

    def close(self) -> None:
        """Remove the private temporary directory and close what ``started`` did not."""
        if self._status is not None:
            for fd in self._status:
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._status = None
        if self.tmpdir is not None:
            # rmtree does not follow symlinks the command may have planted there.
            shutil.rmtree(self.tmpdir, ignore_errors=True)
            self.tmpdir = None


class CommandSandbox(Protocol):
    """A backend that starts commands inside a sandbox."""

    @property
    def name(self) -> str:
        """What the execute step and the span record: ``bwrap``, ``landlock-abi<N>``, ``off``."""
        ...

    def unable(self, grants: Grants) -> str | None:
        """Why this backend cannot enforce ``grants`` (None: it can)."""
        ...

    def launch(self, argv: list[str], env: Mapping[str, str], grants: Grants) -> Launch:
        """How to start ``argv`` inside the sandbox (makes its private temporary directory)."""
        ...


def sandbox_label(value: object) -> str | None:
    """``value`` if it is a sandbox name an execute step may record, else None."""
    if value in ("off", "bwrap"):
        return str(value)
    if isinstance(value, str) and value.startswith("landlock-abi") and value[12:].isdecimal():
        return value
    return None


@functools.cache
def landlock_abi() -> int:
    """The Landlock ABI this kernel offers (0: none), capped at what this binding knows."""
    try:
        return min(_landlock.abi_version(), _landlock.KNOWN_ABI)
    except OSError:
        return 0


def _system_reads() -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """(directories to grant, symlinks to recreate as they are): the system's directories and
    the Python installation that runs tooltrace (``sys.base_prefix`` and a venv's prefix)."""
    # The home and the temporary directory as they are now, not at the first command.
    return _reads(os.path.realpath(os.path.expanduser("~")),
                  os.path.realpath(tempfile.gettempdir()))


@functools.cache
def _reads(*kept_out: str) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """``_system_reads`` for a home and a temporary directory (``kept_out``)."""
    dirs: list[str] = []
    links: list[tuple[str, str]] = []
    for d in SYSTEM_DIRS:
        if os.path.islink(d):
            links.append((os.readlink(d), d))
        elif os.path.isdir(d):
            dirs.append(d)
    # A prefix that holds the user's home or the temporary directory (``/``, say) would grant
    # them: such an installation is not granted, and the operator names what it needs.
    for p in (sys.base_prefix, sys.prefix):
        real = os.path.realpath(p)
        if (p and os.path.isdir(real) and not _under(real, dirs)
                and not any(_under(k, (real,)) for k in kept_out)):
            dirs.append(real)
    return tuple(dict.fromkeys(dirs)), tuple(links)


def _under(path: str, roots: Iterable[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _find_program(name: str, env: Mapping[str, str], visible: tuple[str, ...]) -> None:
    """Raise as ``exec`` would where no candidate for ``name`` exists, or none inside the
    sandbox (``PermissionError``): the command fails before anything starts. A name relative
    to the command's directory is left to the exec, which runs there."""
    if "/" in name:
        candidates = [name]
    else:
        path = env.get("PATH", os.defpath)
        candidates = [os.path.join(d or ".", name) for d in path.split(os.pathsep)]
    found = False
    for c in candidates:
        if not os.path.isabs(c):
            return
        if os.path.isfile(c):
            found = True
            if os.access(c, os.X_OK) and _under(os.path.realpath(c), visible):
                return
    if not found:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), name)
    raise PermissionError(errno.EACCES, "the program is not executable, or lies outside what"
                          " the sandbox grants", name)


def _private_tmp() -> str:
    return tempfile.mkdtemp(prefix="tooltrace-cmd-")


@dataclass(frozen=True, slots=True)
class _Off:
    name: str = "off"

    def unable(self, grants: Grants) -> str | None:
        return None

    def launch(self, argv: list[str], env: Mapping[str, str], grants: Grants) -> Launch:
        return Launch(list(argv), dict(env))


@dataclass(frozen=True, slots=True)
class _Bubblewrap:
    path: str
    name: str = "bwrap"

    def unable(self, grants: Grants) -> str | None:
        return None

    def launch(self, argv: list[str], env: Mapping[str, str], grants: Grants) -> Launch:
        dirs, links = _system_reads()
        _find_program(argv[0], env, (*dirs, *grants.read, *grants.write))
        args = [self.path, "--unshare-all"]
        if grants.network:
            args.append("--share-net")
        for target, link in links:
            args += ["--symlink", target, link]
        tmp = _private_tmp()
        args += ["--proc", "/proc", "--dev", "/dev", "--bind", tmp, "/tmp"]
        # After /tmp: a Python installation there (a venv in /tmp) is mounted over it.
        for d in dirs:
            args += ["--ro-bind", d, d]
        if grants.network:
            resolv = os.path.realpath("/etc/resolv.conf")
            args += ["--ro-bind-try", resolv, resolv]
        for d in grants.read:
            args += ["--ro-bind-try", d, d]
        for d in grants.write:
            args += ["--bind", d, d]
        for h in grants.hidden:
            if not _under(h, (*dirs, *grants.read, *grants.write)):
                continue
            # A directory becomes an empty one; a file (the home's keys, where the workspace
            # holds the home) reads as empty and cannot be written.
            if os.path.isdir(h):
                args += ["--tmpfs", h]
            elif os.path.isfile(h):
                args += ["--ro-bind", "/dev/null", h]
        return Launch([*args, "--", *argv], {**env, "TMPDIR": "/tmp"}, tmpdir=tmp)


@dataclass(frozen=True, slots=True)
class _Landlock:
    abi: int

    @property
    def name(self) -> str:
        return f"landlock-abi{self.abi}"

    def unable(self, grants: Grants) -> str | None:
        if not grants.network and self.abi < 4:
            return (f"Landlock ABI {self.abi} cannot refuse the network (TCP needs ABI 4 or"
                    " newer)")
        everything = (*_system_reads()[0], *grants.read, *grants.write)
        if any(_under(h, everything) for h in grants.hidden):
            return ("the tooltrace home lies inside a granted directory, and Landlock cannot"
                    " keep a directory inside a grant out of reach")
        return None

    def launch(self, argv: list[str], env: Mapping[str, str], grants: Grants) -> Launch:
        dirs, _links = _system_reads()
        _find_program(argv[0], env, (*dirs, *grants.read, *grants.write))
        tmp = _private_tmp()
        r, w = os.pipe()
        args = [sys.executable, "-I", "-S", "-B", _HELPER, "--abi", str(self.abi)]
        if not grants.network:
            args.append("--no-tcp")
        for d in (*grants.write, tmp):
            args += ["--rw", d]
        for d in (*dirs, *grants.read):
            args += ["--rx", d]
        args += ["--r", "/proc"]
        if grants.network:
            args += ["--r", os.path.realpath("/etc/resolv.conf")]
        for dev in DEVICES:
            args += ["--dev", dev]
        args += ["--status-fd", str(w), "--", *argv]
        return Launch(args, {**env, "TMPDIR": tmp}, (w,), tmp, (r, w))


@functools.cache
def _bwrap_problem(path: str) -> tuple[str | None, str]:
    """(the bubblewrap executable, or None and why it does not work here): one probe run."""
    exe = shutil.which(path)
    if exe is None:
        return None, f"bubblewrap ({path}) is not installed"
    probe = [exe, "--unshare-all", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev",
             "--", "true"]
    try:
        out = subprocess.run(probe, stdin=subprocess.DEVNULL, capture_output=True,
                             timeout=_PROBE_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"bubblewrap does not run here ({type(exc).__name__})"
    if out.returncode != 0:
        why = out.stderr.decode("utf-8", "replace").strip().splitlines()[:1]
        return None, f"bubblewrap does not run here ({why[0][:200] if why else out.returncode})"
    return exe, ""


def _landlock_backend(max_abi: int | None) -> tuple[_Landlock | None, str]:
    abi = landlock_abi() if max_abi is None else min(landlock_abi(), max_abi)
    if abi < 1:
        return None, "this kernel offers no Landlock (5.13 or newer, enabled at boot)"
    if not sys.executable or not os.path.isfile(_HELPER):
        return None, "no Python interpreter to apply Landlock with"
    return _Landlock(abi), ""


_FIX = ("install bubblewrap (Debian and Ubuntu: apt-get install bubblewrap), run on a kernel"
        " with Landlock (ABI 4 or newer refuses the network), or turn the sandbox off knowingly"
        " (sandbox = \"off\" under [commands] in tooltrace.toml, or CommandConfig(sandbox="
        "\"off\"))")


def choose_sandbox(
    mode: str,
    grants: Grants,
    *,
    bwrap: str = "bwrap",
    landlock_max_abi: int | None = None,
) -> CommandSandbox:
    """The backend for setting ``mode`` that can enforce ``grants`` here; raises
    ``SandboxUnavailableError`` naming the fix when there is none (unless ``mode`` is
    ``off``). ``bwrap`` names the bubblewrap executable; ``landlock_max_abi`` caps the Landlock
    ABI used (0: do not use Landlock)."""
    if mode == "off":
        return _Off()
    if mode not in SANDBOX_MODES:
        raise SandboxUnavailableError(f"unknown sandbox setting {mode!r}: one of "
                                      f"{', '.join(SANDBOX_MODES)}")
    reasons: list[str] = []
    if mode in ("auto", "landlock"):
        backend, why = _landlock_backend(landlock_max_abi)
        if backend is not None:
            why = backend.unable(grants) or ""
            if not why:
                return backend
        reasons.append(why)
    if mode in ("auto", "bwrap"):
        exe, why = _bwrap_problem(bwrap)
        if exe is not None:
            return _Bubblewrap(exe)
        reasons.append(why)
    raise SandboxUnavailableError(
        f"no command sandbox can run here ({'; '.join(reasons)}): {_FIX}")
