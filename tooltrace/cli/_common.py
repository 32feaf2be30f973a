"""What every command shares: the options several commands take (--home, --json, --wide,
--archive, and the listing filters --tool, --since, --limit), output for people and machines,
and the guard that keeps host paths out of what is printed."""

from __future__ import annotations

import datetime as dt
import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click
import orjson

from .._settings import TOOLTRACE_ARCHIVE, TOOLTRACE_HOME

if TYPE_CHECKING:
    from ..audit import AuditStore

__all__ = [
    "EXIT_FAIL",
    "EXIT_OK",
    "EXIT_USAGE",
    "OutputGuard",
    "archive_option",
    "fail",
    "home_option",
    "json_option",
    "limit_option",
    "open_store",
    "parse_since",
    "policy_option",
    "print_json",
    "self_command",
    "since_option",
    "tool_option",
    "trail_options",
    "wide_option",
]

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2

F = TypeVar("F", bound=Callable[..., Any])


def home_option(f: F) -> F:
    """``--home``: the tooltrace home (default: TOOLTRACE_HOME, else the current directory's
    home in the user's state directory)."""
    return click.option(
        "--home",
        type=click.Path(file_okay=False, path_type=Path),
        envvar=TOOLTRACE_HOME,
        default=None,
        help="tooltrace home (default: $TOOLTRACE_HOME, else this directory's home under"
        " $XDG_STATE_HOME/tooltrace/homes; `tooltrace where` prints it).",
    )(f)


def archive_option(f: F) -> F:
    """``--archive``: read the shipped audit archive instead of the home."""
    return click.option(
        "--archive",
        envvar=TOOLTRACE_ARCHIVE,
        default=None,
        metavar="URI",
        help="Read the audit archive (ducklake:..., s3://bucket/prefix or a directory) instead"
        " of the home (default: $TOOLTRACE_ARCHIVE).",
    )(f)


def policy_option(f: F) -> F:
    """``--policy``: the policy file (default: $TOOLTRACE_POLICY, else ./tooltrace.toml)."""
    return click.option(
        "--policy",
        "policy_file",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help="Policy file (default: $TOOLTRACE_POLICY, else ./tooltrace.toml when it exists).",
    )(f)


def json_option(f: F) -> F:
    """``--json``: machine-readable output on stdout."""
    return click.option("--json", "as_json", is_flag=True, help="Print JSON for machines.")(f)


def wide_option(f: F) -> F:
    """``--wide``: every column of a table, however wide the terminal."""
    return click.option("--wide", is_flag=True,
                        help="Show every column (tables otherwise fit the terminal width,"
                        " leaving out what does not fit, with a note).")(f)


def trail_options(f: F) -> F:
    """What every command reading the audit trail takes, in this order: ``--home``,
    ``--json``, ``--wide`` and ``--archive``."""
    return home_option(json_option(wide_option(archive_option(f))))


def tool_option(what: str | None) -> Callable[[F], F]:
    """``--tool``: only the ``what`` (``calls``, ``approvals``) of this tool; with None, only
    this tool."""
    text = f"Only {what} of this tool." if what else "Only this tool."
    return click.option("--tool", help=text)


def since_option(what: str) -> Callable[[F], F]:
    """``--since``: only the ``what`` since a time, for ``parse_since``."""
    return click.option(
        "--since", help=f"Only {what} since: a duration (30m, 2h, 7d) or a UTC timestamp."
    )


def limit_option(f: F) -> F:
    """``--limit``: how many rows a listing shows at most (default 50)."""
    return click.option("--limit", type=click.IntRange(1, 1_000_000), default=50,
                        show_default=True)(f)


class OutputGuard:
    """Replaces host paths (the home's and the working directory's) in printed text.

    Records are redacted before they are stored; this is the last line of defence for what the
    CLI itself adds (error messages, file locations).
    """

    def __init__(self, home: Path | None) -> None:
        subs: list[tuple[str, str]] = []
        if home is not None:
            subs.append((str(home.resolve()), "<home>"))
        cwd = os.getcwd()
        if cwd not in ("/", ""):
            subs.append((cwd, "."))
        subs.sort(key=lambda s: -len(s[0]))
        self._subs = [(a, b) for a, b in subs if a]

    def __call__(self, text: str) -> str:
        for a, b in self._subs:
            if a in text:
                text = text.replace(a, b)
        return text


def _default(obj: Any) -> Any:
    if isinstance(obj, dt.datetime):
        return iso(obj)
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    return str(obj)


def to_json(obj: Any, guard: OutputGuard) -> str:
    """JSON text of ``obj`` with host paths scrubbed."""
    opts = orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS | orjson.OPT_NAIVE_UTC | orjson.OPT_UTC_Z
    text = orjson.dumps(obj, default=_default, option=opts)
    return guard(text.decode())


def print_json(obj: Any, guard: OutputGuard) -> None:
    """Print ``obj`` as JSON on stdout."""
    click.echo(to_json(obj, guard))


def iso(t: dt.datetime | None) -> str | None:
    """UTC timestamp (stored naive, in UTC) as ISO 8601 with a Z."""
    if t is None:
        return None
    return t.replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def self_command() -> str:
    """How to run this ``tooltrace`` again, for next steps printed to be pasted as they are:
    ``tooltrace`` when that name on PATH is this very program, else its full path (or
    ``<python> -m tooltrace`` when there is no script, as under ``python -m tooltrace``)."""
    import shlex
    import shutil

    argv0 = sys.argv[0] if sys.argv else ""
    script: str | None = None
    if os.path.basename(argv0) == "tooltrace":
        script = argv0 if os.sep in argv0 else shutil.which(argv0)
    if script is None:  # run some other way: the script installed next to this Python
        sibling = Path(sys.executable).parent / "tooltrace"
        script = str(sibling) if sibling.is_file() else None
    if script is None:
        return f"{shlex.quote(sys.executable)} -m tooltrace"
    on_path = shutil.which("tooltrace")
    if on_path is not None and os.path.realpath(on_path) == os.path.realpath(script):
        return "tooltrace"
    return shlex.quote(os.path.abspath(script))


def fail(message: str, code: int = EXIT_FAIL, guard: OutputGuard | None = None) -> NoReturn:
    """Print an error on stderr and exit with ``code``."""
    click.echo(f"error: {guard(message) if guard else message}", err=True)
    sys.exit(code)


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def duration_s(value: str, *, unit_required: bool) -> float | None:
    """Seconds of a duration written as a number with ``s``, ``m``, ``h``, ``d`` or ``w``
    (``90s``, ``10m``, ``2h``; a bare number is seconds unless ``unit_required``); None when
    ``value`` is no such duration."""
    m = _DURATION.match(value)
    if not m or (unit_required and not m[2]):
        return None
    return float(m[1]) * _UNITS[m[2]]


def parse_since(value: str | None) -> str | None:
    """``--since``: a duration back from now (``30m``, ``2h``, ``7d``) or a UTC timestamp."""
    if value is None:
        return None
    seconds = duration_s(value, unit_required=True)
    if seconds is not None:
        ago = dt.timedelta(seconds=seconds)
        return (dt.datetime.now(dt.UTC) - ago).replace(tzinfo=None).isoformat()
    try:
        t = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise click.BadParameter(
            f"{value!r}: use a duration such as 30m, 2h, 7d or an ISO timestamp (UTC)"
        ) from None
    if t.tzinfo is not None:
        t = t.astimezone(dt.UTC).replace(tzinfo=None)
    return t.isoformat()


@contextmanager
def open_store(
    home: Path | None, guard: OutputGuard, archive: str | None = None, *,
    missing: int = EXIT_FAIL,
) -> Iterator[AuditStore]:
    """Open the audit trail (the archive when given); exit ``missing`` (1 unless the command
    says otherwise) with a clear message when there is none or it cannot be read."""
    if archive:
        from .audit import open_archive_store

        with open_archive_store(archive, guard, missing=missing) as arc:
            yield arc
        return
    from .._settings import resolve_home
    from ..audit import AuditStore

    h = resolve_home(home)
    if not (h / "audit").is_dir():
        fail(f"no audit trail under {guard(str(h))} (set --home or TOOLTRACE_HOME)", missing)
    store = AuditStore(h)
    try:
        yield store
    finally:
        store.close()


def cell(value: Any, limit: int = 80) -> str:
    """One table cell: JSON for structures, ISO for times, cut to ``limit`` characters."""
    if value is None:
        return ""
    if isinstance(value, dt.datetime):
        s = iso(value) or ""
    elif isinstance(value, float):
        s = f"{value:.3f}"
    elif isinstance(value, (dict, list)):
        s = orjson.dumps(value, default=_default).decode()
    else:
        s = str(value)
    s = s.replace("\n", " ")
    return s if len(s) <= limit else s[: limit - 1] + "…"


def table(
    title: str | None, columns: Sequence[str], rows: Sequence[Sequence[Any]], guard: OutputGuard,
    *, limit: int = 80, wide: bool = False, priority: Sequence[str] = (),
) -> None:
    """Print rows as a table that fits the terminal (paths scrubbed; see ``_table``)."""
    from ._table import render

    render(title, columns, rows, guard, limit=limit, wide=wide, priority=priority)
