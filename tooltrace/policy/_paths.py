"""Workspace path policy: decide whether a user-supplied path stays inside the workspace.

A tool argument naming a file is untrusted text. :class:`Workspace` turns it into a
:class:`ResolvedPath` (or refuses with a :class:`PathPolicyError` whose ``reason`` comes from a
closed set) and opens it without a time-of-check/time-of-use gap.

The decision is made in two layers:

1. **Syntax** (no system calls; ``tooltrace.policy._pathsyntax``): NUL bytes, control characters,
   percent-escapes of path syntax, ``~`` and ``$VAR``/``%VAR%`` (never expanded: rejected),
   Unicode look-alikes of path syntax (fullwidth dot U+FF0E, fullwidth solidus, ...), Windows
   forms (drive letters, UNC and device namespace prefixes, alternate data streams, reserved
   device names, 8.3 short names, trailing dots and spaces). Backslashes are separators, so
   ``a\\..\\..\\x`` is ``a/../../x``.
2. **Real path**: the components are walked from the workspace root one ``lstat`` at a time;
   ``..`` pops a resolved component, symlinks are read and their targets walked the same way
   (chains, relative and absolute targets, at most 40 links). Containment is therefore decided
   component-wise on the final real path: ``/w/root-evil`` is not inside ``/w/root``, and a
   symlink leading outside is refused even when it is dangling.

Opening (:meth:`Workspace.open_read`, :meth:`Workspace.open_write`, :meth:`Workspace.open_dir`)
never trusts the earlier decision: it walks the already symlink-free relative path from a
directory descriptor of the root with ``O_NOFOLLOW`` on every component, so a component swapped
for a symlink between the check and the open makes the open fail instead of escaping.

Hard links cannot be told apart from the original file: a file with ``st_nlink > 1`` is refused
for writing (reason ``hardlink``) always, and for reading when ``strict_hardlinks=True``.

**Read-only roots** (``read_only_roots=``) are further directories a path may resolve into, for
reading only: an absolute path, or a symlink whose target leads there, resolves in the root it
really lies in (the deepest root holding its real path), by the same walk. A symlink that leads
out of every root is refused. A path in a read-only root comes back with ``read_only=True``;
opening it for writing (``open_write``, ``open_parent``, ``open_dir``) is refused (reason
``read_only``), and the policy stage lets only tools that read and change nothing name it.

**Protected roots** (``protected_roots=``) are directories no path may resolve into, whatever
the tool: the registry protects its home (trail, keys, anchors, snapshots, artifacts) this way,
so a home placed inside a workspace is still out of every built-in tool's reach (reason
``protected``); the policy stage applies the same test (:meth:`Workspace.is_protected`) to
the words of a command line.
"""

from __future__ import annotations

import codecs
import errno
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ._pathsyntax import _SHOWN_CHARS, PathPolicyError, _fail, _syntax, canonical_form
from ._pathsyntax import REASONS as REASONS

__all__ = ["PathPolicyError", "ResolvedPath", "Workspace", "canonical_form", "reads_only"]

_MAX_SYMLINKS = 40


@dataclass(frozen=True, slots=True)
class ResolvedPath:
    """Where a user path resolved to."""

    relative: str
    """POSIX, relative to the workspace root (``""`` is the root itself); outside the workspace
    (in a read-only root), the absolute real path."""
    absolute: str
    """The real host path, for internal use only (never shown to users or sinks)."""
    followed_symlinks: bool
    """Whether a symlink was followed on the way."""
    read_only: bool = False
    """Whether it lies in a read-only root: it may be read, never written."""


def reads_only(tool: Any) -> bool:
    """Whether a tool (a ``ToolDefinition``) may be given a path in a read-only root: only a
    tool that reads (capability ``read``) and changes nothing (effect ``none``)."""
    return str(tool.capability) == "read" and str(tool.effect) == "none"


def _components(root: str) -> list[str]:
    return root.strip("/").split("/") if root != "/" else []


def _shown(rp: ResolvedPath) -> str:
    """A resolved path as messages show it: never a host path outside the workspace."""
    if rp.relative.startswith("/"):
        return repr("<read-only>/" + rp.relative.rsplit("/", 1)[-1][-_SHOWN_CHARS:])
    return repr(rp.relative[-_SHOWN_CHARS:])


# --------------------------------------------------------------------------------------------
# Workspace
# --------------------------------------------------------------------------------------------

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_DIR_FLAGS = os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC


class Workspace:
    """A directory that tool paths must stay inside.

    ``root`` is made real (``realpath``) once, at construction, and so is each of
    ``read_only_roots``: directories paths may also lead into, to be read only.
    ``strict_hardlinks=True`` also refuses to read files with more than one hard link.
    """

    __slots__ = ("_prefix", "_roots", "protected_roots", "read_only_roots", "root",
                 "strict_hardlinks")

    root: str
    read_only_roots: tuple[str, ...]
    protected_roots: tuple[str, ...]
    strict_hardlinks: bool

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        strict_hardlinks: bool = False,
        read_only_roots: Iterable[str | os.PathLike[str]] = (),
        protected_roots: Iterable[str | os.PathLike[str]] = (),
    ) -> None:
        real = os.path.realpath(os.fspath(root))
        if not os.path.isdir(real):
            raise PathPolicyError("not_found", "workspace root is not a directory")
        self.root = real
        self._prefix = real if real.endswith("/") else real + "/"
        self.strict_hardlinks = strict_hardlinks
        ro: dict[str, None] = {}
        for r in read_only_roots:
            r_real = os.path.realpath(os.fspath(r))
            if not os.path.isdir(r_real):
                raise PathPolicyError("not_found", "a read-only root is not a directory")
            ro[r_real] = None
        self.read_only_roots = tuple(ro)
        self.protected_roots = tuple(  # real paths; they need not exist yet
            dict.fromkeys(os.path.realpath(os.fspath(p)) for p in protected_roots))
        # (prefix, root) of every root a path may resolve in; index 0 is the workspace.
        self._roots = tuple((r if r.endswith("/") else r + "/", r) for r in (real, *ro))

    def with_read_only(self, roots: Iterable[str | os.PathLike[str]]) -> Workspace:
        """This workspace with ``roots`` added to its read-only roots."""
        return Workspace(self.root, strict_hardlinks=self.strict_hardlinks,
                         read_only_roots=(*self.read_only_roots, *roots),
                         protected_roots=self.protected_roots)

    def with_protected(self, roots: Iterable[str | os.PathLike[str]]) -> Workspace:
        """This workspace with ``roots`` added to its protected roots (see the module doc)."""
        return Workspace(self.root, strict_hardlinks=self.strict_hardlinks,
                         read_only_roots=self.read_only_roots,
                         protected_roots=(*self.protected_roots, *roots))

    def is_protected(self, real: str) -> bool:
        """Whether the real host path ``real`` is a protected root or lies under one."""
        return any(real == p or real.startswith(p.rstrip("/") + "/")
                   for p in self.protected_roots)

    def __repr__(self) -> str:
        return f"Workspace({self.root!r})"

    # -- deciding -----------------------------------------------------------------------------

    def resolve(
        self,
        user_path: str,
        *,
        must_exist: bool = True,
        allowed_suffixes: tuple[str, ...] | None = None,
    ) -> ResolvedPath:
        """Decide where ``user_path`` leads; raise :class:`PathPolicyError` if it may not go there.

        Relative paths are taken from the workspace root; absolute paths must lead inside it
        or into a read-only root. ``allowed_suffixes`` (case-insensitive, e.g.
        ``(".txt", ".md")``) is checked on the final real name, so a symlink cannot smuggle in
        another kind of file.
        """
        absolute, parts = _syntax(user_path)
        root = 0
        if absolute:
            root, parts = self._enter(parts, user_path, "outside_workspace")
        root, resolved, followed = self._walk(root, parts, user_path, must_exist)
        if allowed_suffixes is not None:
            name = resolved[-1].lower() if resolved else ""
            if not name.endswith(tuple(s.lower() for s in allowed_suffixes)):
                raise _fail("bad_extension", user_path, "this kind of file is not accepted")
        prefix, top = self._roots[root]
        rel = "/".join(resolved)
        real = prefix + rel if rel else top
        # The deepest root holding the real path decides (roots may nest either way).
        deepest = max((i for i, (p, r) in enumerate(self._roots)
                       if real == r or real.startswith(p)), key=lambda i: len(self._roots[i][1]))
        if self.protected_roots and self.is_protected(real):
            raise _fail("protected", user_path, "the path leads into tooltrace's own files")
        if real == self.root or real.startswith(self._prefix):
            rel = real[len(self._prefix):] if real != self.root else ""
        else:
            rel = real
        return ResolvedPath(rel, real, followed, deepest != 0)

    def contains(self, user_path: str) -> bool:
        """True when ``user_path`` resolves inside the workspace (it need not exist)."""
        try:
            self.resolve(user_path, must_exist=False)
        except PathPolicyError:
            return False
        return True

    def _enter(self, parts: list[str], user_path: str, reason: str) -> tuple[int, list[str]]:
        """The root an absolute path's components lead into, and the components below it."""
        for i, (_prefix, top) in enumerate(self._roots):
            n = len(top_parts := _components(top))
            if parts[:n] == top_parts and ".." not in parts[:n]:
                return i, parts[n:]
        # Not lexically under a root: it may still get there through a symlink on the host
        # (for example /proc/self/cwd). Decide on the real path.
        real = os.path.realpath("/" + "/".join(parts))
        for i, (prefix, top) in enumerate(self._roots):
            if real == top:
                return i, []
            if real.startswith(prefix):
                return i, real[len(prefix) :].split("/")
        if reason == "symlink_escape":
            raise _fail(reason, user_path, "a symlink leads outside the workspace")
        raise _fail(reason, user_path, "the path is outside the workspace")

    def _walk(
        self, root: int, parts: list[str], user_path: str, must_exist: bool
    ) -> tuple[int, list[str], bool]:
        """Resolve components from a root, one lstat each, following symlinks ourselves; a
        symlink may lead into another root. Returns (root, components below it, followed)."""
        # Each pending component remembers whether it came from a symlink's target, so an
        # escape is reported as the link's doing or the user's.
        pending = [(c, False) for c in reversed(parts)]
        resolved: list[str] = []
        followed = False
        links = 0
        missing = False
        missing_depth = 0
        prefix = self._roots[root][0]
        while pending:
            comp, from_link = pending.pop()
            if comp == "..":
                if missing:
                    # Back out of a directory that does not exist yet: lexical is exact here.
                    resolved.pop()
                    missing_depth -= 1
                    missing = missing_depth > 0
                    continue
                if not resolved:
                    if from_link:
                        raise _fail("symlink_escape", user_path, "a symlink leads outside")
                    raise _fail("outside_workspace", user_path, "'..' leaves the workspace")
                resolved.pop()
                continue
            if missing:
                resolved.append(comp)
                missing_depth += 1
                continue
            here = prefix + "/".join(resolved) + ("/" if resolved else "") + comp
            try:
                st = os.lstat(here)
            except FileNotFoundError:
                if must_exist:
                    raise _fail("not_found", user_path, "no such file or directory") from None
                missing = True
                missing_depth = 1
                resolved.append(comp)
                continue
            except NotADirectoryError:
                raise _fail("not_a_directory", user_path, "a parent is not a directory") from None
            except OSError as exc:
                raise _fail("invalid", user_path, f"cannot inspect ({exc.strerror})") from None
            mode = st.st_mode
            if stat.S_ISLNK(mode):
                links += 1
                if links > _MAX_SYMLINKS:
                    raise _fail("symlink_loop", user_path, "too many levels of symlinks")
                followed = True
                try:
                    target = os.readlink(here)
                except OSError:
                    # Replaced between lstat and readlink: someone is changing the tree.
                    raise _fail("symlink_race", user_path, "changed while resolving") from None
                if "\x00" in target or not target:
                    raise _fail("invalid", user_path, "unreadable symlink")
                entered = self._follow(root, resolved, target, user_path)
                if entered is None:
                    parts = [c for c in target.split("/") if c and c != "."]
                    pending.extend((c, True) for c in reversed(parts))
                else:
                    root, tail = entered
                    prefix = self._roots[root][0]
                    resolved = []
                    pending.extend((c, True) for c in reversed(tail))
                continue
            if pending and not stat.S_ISDIR(mode):
                # A later component (maybe '..') would have to be looked up in a non-directory.
                raise _fail("not_a_directory", user_path, "a parent is not a directory")
            resolved.append(comp)
        return root, resolved, followed

    def _follow(
        self, root: int, resolved: list[str], target: str, user_path: str
    ) -> tuple[int, list[str]] | None:
        """Where a symlink's target leads when it leaves the root it is in: (root entered,
        components below it); None when it is walked on from the link's directory."""
        parts = [c for c in target.split("/") if c and c != "."]
        if not target.startswith("/"):
            up = next((i for i, c in enumerate(parts) if c != ".."), len(parts))
            if up <= len(resolved):
                return None
            # The leading '..'s apply to real directories: the absolute target is exact.
            here = _components(self._roots[root][1]) + resolved
            if up > len(here):
                raise _fail("symlink_escape", user_path, "a symlink leads outside")
            parts = here[: len(here) - up] + parts[up:]
        return self._enter(parts, user_path, "symlink_escape")

    # -- opening ------------------------------------------------------------------------------

    def open_parent(self, rp: ResolvedPath) -> tuple[int, str]:
        """Open the parent directory of ``rp`` by walking from the root with O_NOFOLLOW.

        Returns (directory fd, final name); the caller closes the fd and does its own
        ``*at``-style work relative to it (``os.open(name, ..., dir_fd=fd)``, ``os.rename`` with
        ``src_dir_fd``/``dst_dir_fd``), for example an atomic replace. Any component that is no
        longer a plain directory (swapped for a symlink, removed) fails the walk: nothing is
        followed. It is for writing: a path in a read-only root is refused (``read_only``).
        """
        self._refuse_read_only(rp)
        return self._parent(rp)

    def _parent(self, rp: ResolvedPath) -> tuple[int, str]:
        top, parts = self._base(rp)
        if not parts:
            raise PathPolicyError("not_regular", "the workspace root is a directory, not a file")
        return self._open_dirs(top, parts[:-1], rp), parts[-1]

    def _base(self, rp: ResolvedPath) -> tuple[str, list[str]]:
        """The root ``rp`` lies in and its components below it."""
        rel = rp.relative
        if not rel.startswith("/"):
            return self.root, rel.split("/") if rel else []
        inside = [top for prefix, top in self._roots[1:] if rel == top or rel.startswith(prefix)]
        if not inside:
            raise PathPolicyError("outside_workspace", f"{_shown(rp)} is outside the workspace")
        top = max(inside, key=len)
        return top, _components(rel)[len(_components(top)):]

    @staticmethod
    def _refuse_read_only(rp: ResolvedPath) -> None:
        if rp.read_only:
            raise PathPolicyError("read_only", f"{_shown(rp)} is in a read-only root")

    def open_dir(self, rp: ResolvedPath) -> int:
        """Open the directory ``rp`` itself by the same O_NOFOLLOW walk; the caller closes it.

        Every component, the last one included, must still be a plain directory (a symlink
        fails the walk with ``symlink_race``). The descriptor then stays on that directory
        whatever later happens to the names leading to it, so work that must happen *in* the
        directory (a process's working directory) uses the descriptor, never the path again.
        A process there could write in it: a directory in a read-only root is refused.
        """
        self._refuse_read_only(rp)
        return self._open_dirs(*self._base(rp), rp)

    def _open_dirs(self, top: str, parts: list[str], rp: ResolvedPath) -> int:
        """Walk ``parts`` from the root ``top``, one directory at a time, following no
        symlink."""
        dfd = os.open(top, _DIR_FLAGS)
        try:
            for comp in parts:
                if comp in ("", ".", ".."):
                    raise PathPolicyError("invalid", "resolved path is not canonical")
                try:
                    nfd = os.open(comp, _DIR_FLAGS, dir_fd=dfd)
                except OSError as exc:
                    raise self._open_error(exc, rp) from None
                os.close(dfd)
                dfd = nfd
        except BaseException:
            os.close(dfd)
            raise
        return dfd

    @staticmethod
    def _open_error(exc: OSError, rp: ResolvedPath) -> PathPolicyError:
        shown = _shown(rp)
        if isinstance(exc, FileNotFoundError):
            return PathPolicyError("not_found", f"{shown} no longer exists")
        # ELOOP (final symlink with O_NOFOLLOW) or ENOTDIR (a directory became a symlink).
        if isinstance(exc, NotADirectoryError) or exc.errno == errno.ELOOP:
            return PathPolicyError("symlink_race", f"{shown} changed while being opened")
        if isinstance(exc, IsADirectoryError):
            return PathPolicyError("not_regular", f"{shown} is a directory")
        return PathPolicyError("invalid", f"{shown} cannot be opened ({exc.strerror})")

    def _check_fd(self, fd: int, rp: ResolvedPath, *, writing: bool) -> os.stat_result:
        st = os.fstat(fd)
        shown = _shown(rp)
        if not stat.S_ISREG(st.st_mode):
            raise PathPolicyError("not_regular", f"{shown} is not a regular file")
        if st.st_nlink > 1 and (writing or self.strict_hardlinks):
            raise PathPolicyError("hardlink", f"{shown} has more than one hard link")
        return st

    def open_read(self, rp: ResolvedPath) -> int:
        """Open a resolved file for reading and return the descriptor (caller closes it).

        The walk cannot be raced into following a symlink; FIFOs and devices are refused.
        """
        dfd, name = self._parent(rp)
        try:
            try:
                fd = os.open(name, os.O_RDONLY | _O_NOFOLLOW | _O_CLOEXEC | _O_NONBLOCK, dir_fd=dfd)
            except OSError as exc:
                raise self._open_error(exc, rp) from None
        finally:
            os.close(dfd)
        try:
            self._check_fd(fd, rp, writing=False)
            os.set_blocking(fd, True)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def open_write(
        self,
        rp_or_relative: ResolvedPath | str,
        *,
        create: bool = True,
        truncate: bool = True,
        mode: int = 0o644,
    ) -> int:
        """Open a file for writing (creating it if ``create``) and return the descriptor.

        Parent directories must exist. Files with more than one hard link are refused, and
        truncation happens only after that check, so a hard link to an outside file is never
        emptied.
        """
        if isinstance(rp_or_relative, ResolvedPath):
            rp = rp_or_relative
        else:
            rp = self.resolve(rp_or_relative, must_exist=not create)
        dfd, name = self.open_parent(rp)
        flags = os.O_WRONLY | _O_NOFOLLOW | _O_CLOEXEC | _O_NONBLOCK
        if create:
            flags |= os.O_CREAT
        try:
            try:
                fd = os.open(name, flags, mode, dir_fd=dfd)
            except OSError as exc:
                raise self._open_error(exc, rp) from None
        finally:
            os.close(dfd)
        try:
            self._check_fd(fd, rp, writing=True)
            os.set_blocking(fd, True)
            if truncate:
                os.ftruncate(fd, 0)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def read_text(
        self,
        user_path: str,
        *,
        max_bytes: int,
        allowed_suffixes: tuple[str, ...] | None = (".txt",),
    ) -> tuple[str, int, ResolvedPath]:
        """Read up to ``max_bytes`` of a UTF-8 text file inside the workspace.

        Returns (text, size of the whole file in bytes, where it resolved). A multi-byte
        character cut by the limit is dropped; invalid bytes become U+FFFD.
        """
        if max_bytes < 0:
            raise ValueError("max_bytes must be >= 0")
        rp = self.resolve(user_path, must_exist=True, allowed_suffixes=allowed_suffixes)
        fd = self.open_read(rp)
        try:
            size = os.fstat(fd).st_size
            chunks: list[bytes] = []
            want = max_bytes
            while want > 0:
                chunk = os.read(fd, min(want, 1 << 20))
                if not chunk:
                    break
                chunks.append(chunk)
                want -= len(chunk)
        finally:
            os.close(fd)
        data = b"".join(chunks)
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        text = decoder.decode(data, final=len(data) >= size)
        return text, size, rp
