"""Workspace path policy: decide whether a user-supplied path stays inside the workspace.

A tool argument naming a file is untrusted text. :class:`Workspace` turns it into a
:class:`ResolvedPath` (or refuses with a :class:`PathPolicyError` whose ``reason`` comes from a
closed set) and opens it without a time-of-check/time-of-use gap.

The decision is made in two layers:

1. **Syntax** (no system calls): NUL bytes, control characters, percent-escapes of path syntax,
   ``~`` and ``$VAR``/``%VAR%`` (never expanded: rejected), Unicode look-alikes of path syntax
   (fullwidth dot U+FF0E, fullwidth solidus, ...), Windows forms (drive letters, UNC and device
   namespace prefixes, alternate data streams, reserved device names, 8.3 short names, trailing
   dots and spaces). Backslashes are separators, so ``a\\..\\..\\x`` is ``a/../../x``.
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
import re
import stat
import unicodedata
from dataclasses import dataclass
from urllib.parse import unquote_to_bytes

from .exceptions import TooltraceError
from .redaction import default_redactor

__all__ = ["PathPolicyError", "ResolvedPath", "Workspace", "canonical_form"]

_MAX_INPUT_CHARS = 4096
_MAX_COMPONENT_BYTES = 255
_MAX_SYMLINKS = 40
_MAX_DECODE_ROUNDS = 3
_SHOWN_CHARS = 60
# How much of a refused input a message looks at (it is redacted whole, then shown whole if it
# fits in _SHOWN_CHARS); beyond this the input is long enough to be refused as such.
_SCANNED_CHARS = 8192

# Reasons form a closed set (they end up in step details and may be counted).
REASONS = frozenset(
    {
        "invalid",
        "too_long",
        "nul_byte",
        "control_char",
        "encoded_traversal",
        "env_expansion",
        "home_expansion",
        "lookalike",
        "windows_path",
        "stream_name",
        "device_name",
        "short_name",
        "trailing_dot_space",
        "outside_workspace",
        "symlink_escape",
        "symlink_loop",
        "symlink_race",
        "not_found",
        "not_a_directory",
        "not_regular",
        "bad_extension",
        "hardlink",
        "too_large",
    }
)


class PathPolicyError(TooltraceError, ValueError):
    """A path was refused by the workspace policy.

    ``reason`` is a short code from a closed set (``outside_workspace``, ``symlink_escape``,
    ``nul_byte``, ...). ``str(e)`` is a readable message that never holds a full host path:
    only the user's input (sanitised, shortened, absolute inputs reduced to their last
    component) or a workspace-relative path.
    """

    reason: str

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class ResolvedPath:
    """Where a user path resolved to.

    ``relative`` is POSIX and relative to the workspace root (``""`` is the root itself);
    ``absolute`` is the real host path, for internal use only (never shown to users or sinks);
    ``followed_symlinks`` says whether a symlink was followed on the way.
    """

    relative: str
    absolute: str
    followed_symlinks: bool


# --------------------------------------------------------------------------------------------
# Syntax layer
# --------------------------------------------------------------------------------------------

_PCT = re.compile(r"%([0-9A-Fa-f]{2})")
_PCT_U = re.compile(r"%[uU][0-9A-Fa-f]{4}")
# Bytes that, once decoded from an escape, would change the path's structure.
_SYNTAX_BYTES = frozenset(b"./\\:")
_ENV_DOLLAR = re.compile(r"(?<!:)\$(?:[A-Za-z_{(]|\d)")  # "::$DATA" is a stream
_ENV_PERCENT = re.compile(r"%[A-Za-z_][A-Za-z0-9_()]*%")
_DRIVE = re.compile(r"^[A-Za-z]:")
_DEVICE = re.compile(
    r"^(?:con|prn|aux|nul|com[0-9\u00b9\u00b2\u00b3]|lpt[0-9\u00b9\u00b2\u00b3]"
    r"|conin\$|conout\$|clock\$)[ .]*(?:\..*)?$",
    re.IGNORECASE,
)
_SHORT_NAME = re.compile(r"^[^~/ ]{1,6}~[0-9]+(?:\.[^.]{0,3})?$")
_BIDI = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f")
# ASCII characters that carry path meaning; a non-ASCII character whose compatibility form
# contains one of them is a look-alike (U+FF0E FULLWIDTH FULL STOP, U+2215 DIVISION SLASH ...).
_SYNTAX_CHARS = frozenset("./\\:~%$")
# Separator look-alikes that have no compatibility mapping, so NFKC alone misses them.
_CONFUSABLES = frozenset("\u2215\u2044\u29f8\u2216\u29f5\u29f9\u2571\u2572\u01c0")


def _show(user_path: str) -> str:
    """The user's input as it may appear in a message: printable, redacted, no host path, and
    whole or not at all. It is never cut: a cut secret is no longer recognised, neither by the
    default detectors here nor by a registry's redactor, which redacts the message again with
    the operator's registered values (so a long input is described by its length only)."""
    text = "".join(ch if ch.isprintable() else "?" for ch in user_path[:_SCANNED_CHARS])
    if text.startswith(("/", "\\")) or _DRIVE.match(text):
        # An absolute input may be (part of) a host path: keep only its last component.
        last = re.split(r"[/\\]+", text.rstrip("/\\"))[-1] if text.strip("/\\") else ""
        text = "<absolute>/" + last
    text = default_redactor().redact_text(text)
    if len(text) > _SHOWN_CHARS:
        return f"<{len(user_path)} characters>"
    return repr(text)


def _fail(reason: str, user_path: str, what: str) -> PathPolicyError:
    return PathPolicyError(reason, f"path {_show(user_path)} refused ({reason}): {what}")


def _check_percent(user_path: str) -> None:
    """Refuse percent-escapes (at any depth up to 3) that decode to path syntax or NUL."""
    if _PCT_U.search(user_path):
        raise _fail("encoded_traversal", user_path, "%u escapes are not accepted")
    text = user_path
    for _ in range(_MAX_DECODE_ROUNDS):
        codes = _PCT.findall(text)
        if not codes:
            return
        values = [int(c, 16) for c in codes]
        if 0 in values:
            raise _fail("nul_byte", user_path, "an escaped NUL byte is not accepted")
        if any(v in _SYNTAX_BYTES for v in values):
            raise _fail(
                "encoded_traversal", user_path, "percent-escaped path syntax is not accepted"
            )
        raw = unquote_to_bytes(text)
        if any(v >= 0x80 for v in values):
            # Overlong UTF-8 (%c0%ae for '.') and other invalid sequences.
            try:
                decoded = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise _fail(
                    "encoded_traversal", user_path, "percent-escapes are not valid UTF-8"
                ) from None
            if _has_lookalike(decoded):
                raise _fail("encoded_traversal", user_path, "escaped look-alike of path syntax")
        text = raw.decode("utf-8", "replace")
    if _PCT.search(text):
        raise _fail("encoded_traversal", user_path, "too many layers of percent-encoding")


def _has_lookalike(text: str) -> bool:
    for ch in text:
        if ch in _CONFUSABLES:
            return True
        if ch >= "\x80":
            folded = unicodedata.normalize("NFKC", ch)
            if folded != ch and any(c in _SYNTAX_CHARS for c in folded):
                return True
    return False


def _syntax(user_path: object) -> tuple[bool, list[str]]:
    """Check the input's syntax; return (is_absolute, components) with ``.``/empty dropped.

    ``..`` components are kept: whether they escape depends on symlinks, decided by the walk.
    """
    if not isinstance(user_path, str):
        raise PathPolicyError("invalid", "path must be a string")
    if not user_path:
        raise _fail("invalid", user_path, "empty path")
    if len(user_path) > _MAX_INPUT_CHARS:
        raise _fail("too_long", user_path, f"longer than {_MAX_INPUT_CHARS} characters")
    if "\x00" in user_path:
        raise _fail("nul_byte", user_path, "NUL bytes are not accepted")
    if not user_path.isascii():
        for ch in user_path:
            if "\ud800" <= ch <= "\udfff":
                raise _fail("invalid", user_path, "not valid Unicode (lone surrogate)")
            if ch in _BIDI or unicodedata.category(ch) == "Cc":
                raise _fail("control_char", user_path, "control characters are not accepted")
        if _has_lookalike(user_path):
            raise _fail("lookalike", user_path, "a Unicode look-alike of path syntax")
    elif not user_path.isprintable():
        raise _fail("control_char", user_path, "control characters are not accepted")
    if "%" in user_path:
        _check_percent(user_path)
        if _ENV_PERCENT.search(user_path):
            raise _fail("env_expansion", user_path, "%VAR% is not expanded")
    if "$" in user_path and _ENV_DOLLAR.search(user_path):
        raise _fail("env_expansion", user_path, "$VAR is not expanded")
    path = user_path.replace("\\", "/") if "\\" in user_path else user_path
    if path.startswith("//"):
        raise _fail("windows_path", user_path, "UNC and device paths are outside the workspace")
    if _DRIVE.match(path):
        raise _fail("windows_path", user_path, "drive paths are outside the workspace")
    absolute = path[0] == "/"
    parts: list[str] = []
    for comp in path.split("/"):
        if not comp or comp == ".":
            continue
        if comp != "..":
            _check_component(comp, user_path)
        parts.append(comp)
    return absolute, parts


def _check_component(comp: str, user_path: str) -> None:
    if comp[0] == "~":
        # Refused anywhere, not only at the start: "./~" must decide like its canonical "~".
        raise _fail("home_expansion", user_path, "~ is not expanded")
    if ":" in comp:
        raise _fail("stream_name", user_path, "':' (alternate data stream) is not accepted")
    if comp[-1] in ". ":
        raise _fail("trailing_dot_space", user_path, "a name may not end with a dot or space")
    if len(comp) > 3 and "~" in comp and _SHORT_NAME.match(comp):
        raise _fail("short_name", user_path, "8.3 short names are not accepted")
    if len(comp) >= 3 and _DEVICE.match(comp):
        raise _fail("device_name", user_path, "reserved device names are not accepted")
    if len(comp) * 4 > _MAX_COMPONENT_BYTES and len(os.fsencode(comp)) > _MAX_COMPONENT_BYTES:
        raise _fail("too_long", user_path, f"a name is longer than {_MAX_COMPONENT_BYTES} bytes")


def canonical_form(user_path: str) -> str:
    """The lexical canonical form of a path: ``/`` separators, no empty or ``.`` components.

    ``..`` is kept (its meaning depends on symlinks). Raises :class:`PathPolicyError` for
    inputs refused on syntax alone. A path and its canonical form always get the same decision.
    """
    absolute, parts = _syntax(user_path)
    body = "/".join(parts)
    if absolute:
        return "/" + body
    return body or "."


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
