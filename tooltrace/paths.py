"""Workspace path policy: decide whether a user-supplied path stays inside the workspace.

A tool argument naming a file is untrusted text. :class:`Workspace` turns it into a
:class:`ResolvedPath` (or refuses with a :class:`PathPolicyError` whose ``reason`` comes from a
closed set) and opens it without a time-of-check/time-of-use gap.

The decision is made in two layers:

1. **Syntax** (no system calls; ``tooltrace._pathsyntax``): NUL bytes, control characters,
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
"""

from __future__ import annotations

import codecs
import errno
import os
import stat
from dataclasses import dataclass

from ._pathsyntax import _SHOWN_CHARS, PathPolicyError, _fail, _syntax, canonical_form
from ._pathsyntax import REASONS as REASONS

__all__ = ["PathPolicyError", "ResolvedPath", "Workspace", "canonical_form"]

_MAX_SYMLINKS = 40


@dataclass(frozen=True, slots=True)
class ResolvedPath:
    """Where a user path resolved to."""

    relative: str
    """POSIX, relative to the workspace root (``""`` is the root itself)."""
    absolute: str
    """The real host path, for internal use only (never shown to users or sinks)."""
    followed_symlinks: bool
    """Whether a symlink (inside the workspace) was followed on the way."""


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

    ``root`` is made real (``realpath``) once, at construction. ``strict_hardlinks=True`` also
    refuses to read files with more than one hard link.
    """

    __slots__ = ("_prefix", "root", "strict_hardlinks")

    root: str
    strict_hardlinks: bool

    def __init__(self, root: str | os.PathLike[str], *, strict_hardlinks: bool = False) -> None:
        real = os.path.realpath(os.fspath(root))
        if not os.path.isdir(real):
            raise PathPolicyError("not_found", "workspace root is not a directory")
        self.root = real
        self._prefix = real if real.endswith("/") else real + "/"
        self.strict_hardlinks = strict_hardlinks

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

        Relative paths are taken from the workspace root; absolute paths must lead inside it.
        ``allowed_suffixes`` (case-insensitive, e.g. ``(".txt", ".md")``) is checked on the
        final real name, so a symlink cannot smuggle in another kind of file.
        """
        absolute, parts = _syntax(user_path)
        if absolute:
            parts = self._strip_root(parts, user_path)
        resolved, followed = self._walk(parts, user_path, must_exist)
        if allowed_suffixes is not None:
            name = resolved[-1].lower() if resolved else ""
            if not name.endswith(tuple(s.lower() for s in allowed_suffixes)):
                raise _fail("bad_extension", user_path, "this kind of file is not accepted")
        rel = "/".join(resolved)
        return ResolvedPath(rel, self._prefix + rel if rel else self.root, followed)

    def contains(self, user_path: str) -> bool:
        """True when ``user_path`` resolves inside the workspace (it need not exist)."""
        try:
            self.resolve(user_path, must_exist=False)
        except PathPolicyError:
            return False
        return True

    def _strip_root(self, parts: list[str], user_path: str) -> list[str]:
        """Turn an absolute path's components into components relative to the root."""
        root_parts = self.root.strip("/").split("/") if self.root != "/" else []
        n = len(root_parts)
        if parts[:n] == root_parts and ".." not in parts[:n]:
            return parts[n:]
        # Not lexically under the root: it may still get there through a symlink on the
        # host (for example /proc/self/cwd). Decide on the real path.
        real = os.path.realpath("/" + "/".join(parts))
        if real == self.root:
            return []
        if real.startswith(self._prefix):
            return real[len(self._prefix) :].split("/")
        raise _fail("outside_workspace", user_path, "the path is outside the workspace")

    def _walk(self, parts: list[str], user_path: str, must_exist: bool) -> tuple[list[str], bool]:
        """Resolve components from the root, one lstat each, following symlinks ourselves."""
        # Each pending component remembers whether it came from a symlink's target, so an
        # escape is reported as the link's doing or the user's.
        pending = [(c, False) for c in reversed(parts)]
        resolved: list[str] = []
        followed = False
        links = 0
        missing = False
        missing_depth = 0
        prefix = self._prefix
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
                if target.startswith("/"):
                    target_parts = [c for c in target.split("/") if c and c != "."]
                    tail = self._absolute_target(target_parts, user_path)
                    resolved = []
                    pending.extend((c, True) for c in reversed(tail))
                else:
                    pending.extend(
                        (c, True) for c in reversed(target.split("/")) if c and c != "."
                    )
                continue
            if pending and not stat.S_ISDIR(mode):
                # A later component (maybe '..') would have to be looked up in a non-directory.
                raise _fail("not_a_directory", user_path, "a parent is not a directory")
            resolved.append(comp)
        return resolved, followed

    def _absolute_target(self, target_parts: list[str], user_path: str) -> list[str]:
        """Components (relative to the root) of an absolute symlink target, or refuse it."""
        root_parts = self.root.strip("/").split("/") if self.root != "/" else []
        n = len(root_parts)
        if target_parts[:n] == root_parts and ".." not in target_parts[:n]:
            return target_parts[n:]
        real = os.path.realpath("/" + "/".join(target_parts))
        if real == self.root:
            return []
        if real.startswith(self._prefix):
            return real[len(self._prefix) :].split("/")
        raise _fail("symlink_escape", user_path, "a symlink leads outside the workspace")

    # -- opening ------------------------------------------------------------------------------

    def open_parent(self, rp: ResolvedPath) -> tuple[int, str]:
        """Open the parent directory of ``rp`` by walking from the root with O_NOFOLLOW.

        Returns (directory fd, final name); the caller closes the fd and does its own
        ``*at``-style work relative to it (``os.open(name, ..., dir_fd=fd)``, ``os.rename`` with
        ``src_dir_fd``/``dst_dir_fd``), for example an atomic replace. Any component that is no
        longer a plain directory (swapped for a symlink, removed) fails the walk: nothing is
        followed.
        """
        parts = rp.relative.split("/") if rp.relative else []
        if not parts:
            raise PathPolicyError("not_regular", "the workspace root is a directory, not a file")
        return self._open_dirs(parts[:-1], rp), parts[-1]

    _open_parent = open_parent  # older spelling, kept for callers inside the package

    def open_dir(self, rp: ResolvedPath) -> int:
        """Open the directory ``rp`` itself by the same O_NOFOLLOW walk; the caller closes it.

        Every component, the last one included, must still be a plain directory (a symlink
        fails the walk with ``symlink_race``). The descriptor then stays on that directory
        whatever later happens to the names leading to it, so work that must happen *in* the
        directory (a process's working directory) uses the descriptor, never the path again.
        """
        return self._open_dirs(rp.relative.split("/") if rp.relative else [], rp)

    def _open_dirs(self, parts: list[str], rp: ResolvedPath) -> int:
        """Walk ``parts`` from the root, one directory at a time, following no symlink."""
        dfd = os.open(self.root, _DIR_FLAGS)
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
        shown = repr(rp.relative[-_SHOWN_CHARS:])
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
        shown = repr(rp.relative[-_SHOWN_CHARS:])
        if not stat.S_ISREG(st.st_mode):
            raise PathPolicyError("not_regular", f"{shown} is not a regular file")
        if st.st_nlink > 1 and (writing or self.strict_hardlinks):
            raise PathPolicyError("hardlink", f"{shown} has more than one hard link")
        return st

    def open_read(self, rp: ResolvedPath) -> int:
        """Open a resolved file for reading and return the descriptor (caller closes it).

        The walk cannot be raced into following a symlink; FIFOs and devices are refused.
        """
        dfd, name = self.open_parent(rp)
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
