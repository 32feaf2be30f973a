"""Where the archive is, how DuckDB reaches it, and how secrets stay out of every message.

An archive URI names one of two targets:

- ``ducklake:postgres:<libpq conninfo or postgresql:// URI>`` (or any other DuckLake catalog,
  e.g. ``ducklake:/path/meta.ducklake``): a DuckLake table set. Its data path (``s3://...``) is
  given once, when the first ship creates the catalog (``TOOLTRACE_ARCHIVE_DATA_PATH``); the
  catalog remembers it, so readers need only the URI.
- ``s3://bucket/prefix``, ``file:///dir`` or a plain directory: Parquet partitioned by day
  (hive ``day=YYYY-MM-DD``), sorted by call id, for any engine that reads Parquet.

Credentials come from the standard places and never from the URI: ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_REGION`` / ``AWS_DEFAULT_REGION``,
``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL`` become a temporary DuckDB S3 secret (without
them DuckDB's own persistent secrets apply); PostgreSQL reads ``PG*`` variables,
``~/.pgpass`` or the conninfo itself (libpq). Every error that leaves this package passes
through ``scrub``, which removes those values and any password in the URI.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import random
import re
import stat
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from .._settings import (
    TOOLTRACE_ARCHIVE,
    TOOLTRACE_ARCHIVE_DATA_PATH,
    archive_data_path,
    archive_uri,
)
from ..exceptions import ConfigurationError, TooltraceError

if TYPE_CHECKING:
    import duckdb

__all__ = [
    "TOOLTRACE_ARCHIVE",
    "TOOLTRACE_ARCHIVE_DATA_PATH",
    "ArchiveError",
    "Target",
    "connect",
    "parse_target",
    "prepare",
    "scrub",
]

#: Environment variables whose values are secret wherever they appear.
SECRET_ENV = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "PGPASSWORD")

_EXTENSIONS = ("httpfs", "postgres", "ducklake")
# DuckDB derives an extension's entry point from its file name; the postgres package ships
# its file as ``postgres`` while the extension is called ``postgres_scanner``.
_EXT_FILE = {"postgres": "postgres_scanner"}


class ArchiveError(TooltraceError):
    """The archive could not be reached or written; the message is free of secrets."""


@dataclass(frozen=True, slots=True)
class Target:
    """A parsed archive URI: ``kind`` is ``ducklake`` or ``parquet``."""

    kind: str
    uri: str
    #: DuckLake: the ATTACH string (``ducklake:...``). Parquet: the root (no trailing slash).
    location: str

    @property
    def remote(self) -> bool:
        """True when the data lives on object storage (or the catalog needs it)."""
        return self.kind == "ducklake" or "://" in self.location

    def display(self) -> str:
        """The URI with any password removed (for messages and reports)."""
        return scrub(self.uri)


def parse_target(uri: str | None) -> Target:
    """Parse an archive URI (``None``: ``TOOLTRACE_ARCHIVE``); ``ConfigurationError`` if bad."""
    raw = archive_uri(uri)
    raw = raw.strip()
    if not raw:
        raise ConfigurationError(f"no archive given: pass --archive or set {TOOLTRACE_ARCHIVE}")
    if raw.startswith("ducklake:"):
        if len(raw) <= len("ducklake:"):
            raise ConfigurationError("a ducklake: archive URI needs a catalog after the colon")
        return Target("ducklake", raw, raw)
    if raw.startswith(("s3://", "s3a://", "gs://", "r2://")):
        parts = urlsplit(raw)
        if not parts.netloc:
            raise ConfigurationError(f"archive URI {scrub(raw)!r} has no bucket")
        return Target("parquet", raw, raw.replace("s3a://", "s3://", 1).rstrip("/"))
    if raw.startswith("file://"):
        return Target("parquet", raw, str(Path(raw[len("file://"):]).absolute()))
    if "://" in raw:
        raise ConfigurationError(
            f"unsupported archive URI {scrub(raw)[:60]!r}: use ducklake:..., s3://bucket/prefix"
            " or a directory")
    return Target("parquet", raw, str(Path(raw).absolute()))


_PW_KV = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)
_PW_URL = re.compile(r"(://[^/@\s:]*:)([^@\s/]*)(@)")
_SECRET_KW = re.compile(r"((?:SECRET|SESSION_TOKEN|KEY_ID)\s+)'(?:[^']|'')*'", re.IGNORECASE)


def scrub(text: str) -> str:
    """``text`` without secret values: environment secrets, URI passwords, secret literals."""
    for name in SECRET_ENV:
        val = os.environ.get(name)
        if val and len(val) >= 4:
            text = text.replace(val, "***")
    text = _PW_KV.sub(r"\1***", text)
    text = _PW_URL.sub(r"\1***\3", text)
    return _SECRET_KW.sub(r"\1'***'", text)


def _ext_dir() -> Path:
    # A private directory of correctly named links to the packaged extension files: DuckDB
    # cannot download extensions here, and the link's name sets the entry point it looks for.
    d = Path(tempfile.gettempdir()) / f"tooltrace-duckdb-ext-{os.getuid()}"
    try:
        d.mkdir(mode=0o700)
    except FileExistsError:
        pass
    st = os.lstat(d)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        raise ArchiveError(f"{d} is not a private directory of this user")
    return d


def extension_path(name: str) -> str:
    """Path of a packaged DuckDB extension (PyPI ``duckdb-extension-<name>``) to ``LOAD``."""
    import duckdb

    spec = importlib.util.find_spec(f"duckdb_extension_{name}")
    if spec is None or spec.origin is None:
        raise ArchiveError(
            f"the DuckDB {name} extension is not installed: pip install 'tooltrace[archive]'")
    version = duckdb.__version__
    src = Path(spec.origin).parent / "extensions" / f"v{version}" / f"{name}.duckdb_extension"
    if not src.is_file():
        raise ArchiveError(
            f"duckdb-extension-{name} does not match duckdb {version}: install"
            f" duckdb-extension-{name}=={version}")
    want = _EXT_FILE.get(name)
    if want is None:
        return str(src)
    link = _ext_dir() / f"{want}-{version}" / f"{want}.duckdb_extension"
    link.parent.mkdir(mode=0o700, exist_ok=True)
    if not (link.is_symlink() and os.readlink(link) == str(src)):
        tmp = link.with_name(f".{os.getpid()}.{os.urandom(4).hex()}")
        os.symlink(src, tmp)
        os.replace(tmp, link)
    return str(link)


def _sql_str(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def s3_secret_sql(env: dict[str, str] | None = None) -> str | None:
    """The ``CREATE SECRET`` statement for the S3 credentials in the environment, or None."""
    e = os.environ if env is None else env
    key_id = e.get("AWS_ACCESS_KEY_ID")
    secret = e.get("AWS_SECRET_ACCESS_KEY")
    endpoint = e.get("AWS_ENDPOINT_URL_S3") or e.get("AWS_ENDPOINT_URL")
    if not key_id and not endpoint:
        return None
    opts = ["TYPE s3"]
    if key_id and secret:
        opts += [f"KEY_ID {_sql_str(key_id)}", f"SECRET {_sql_str(secret)}"]
        token = e.get("AWS_SESSION_TOKEN")
        if token:
            opts.append(f"SESSION_TOKEN {_sql_str(token)}")
    region = e.get("AWS_REGION") or e.get("AWS_DEFAULT_REGION") or "us-east-1"
    opts.append(f"REGION {_sql_str(region)}")
    if endpoint:
        parts = urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
        if not parts.netloc:
            raise ConfigurationError("AWS_ENDPOINT_URL must look like http://host:port")
        opts += [f"ENDPOINT {_sql_str(parts.netloc)}", "URL_STYLE 'path'",
                 f"USE_SSL {'true' if parts.scheme == 'https' else 'false'}"]
    return f"CREATE OR REPLACE TEMPORARY SECRET tooltrace_s3 ({', '.join(opts)})"


def connect(target: Target, *, read_only: bool = False, data_path: str | None = None,
            attach_options: dict[str, Any] | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection that reaches ``target`` (see ``prepare``)."""
    import duckdb

    # No progress bar: DuckDB draws one on standard output, inside a command's output.
    con = duckdb.connect(":memory:")
    con.execute("SET enable_progress_bar = false")
    try:
        prepare(con, target, read_only=read_only, data_path=data_path,
                attach_options=attach_options)
    except BaseException:
        con.close()
        raise
    return con


def prepare(con: duckdb.DuckDBPyConnection, target: Target, *, read_only: bool = False,
            data_path: str | None = None, attach_options: dict[str, Any] | None = None) -> None:
    """Make ``con`` reach ``target``.

    Loads the packaged extensions the target needs, creates the S3 secret from the
    environment, and (DuckLake) attaches the catalog as ``lake``. Raises ``ArchiveError`` with a
    scrubbed message when any of that fails.
    """
    import duckdb

    try:
        needed = ["httpfs"] if target.remote else []
        if target.kind == "ducklake":
            needed += ["postgres", "ducklake"] if ":postgres:" in target.location[:20] else [
                "ducklake"]
        for name in needed:
            con.execute(f"LOAD {_sql_str(extension_path(name))}")
        if target.remote:
            sql = s3_secret_sql()
            if sql is not None:
                con.execute(sql)
        if target.kind == "ducklake":
            opts: dict[str, Any] = dict(attach_options or {})
            if read_only:
                opts["READ_ONLY"] = True
            dp = archive_data_path(data_path)
            if dp and not read_only:
                opts["DATA_PATH"] = dp
            rendered = ", ".join(
                f"{k} {_sql_str(v) if isinstance(v, str) else str(v).lower()}"
                for k, v in opts.items())
            _attach(con, f"ATTACH {_sql_str(target.location)} AS lake"
                    + (f" ({rendered})" if rendered else ""))
    except duckdb.Error as exc:
        raise ArchiveError(
            f"cannot open the archive {target.display()}: {first_line(exc)}") from None


_RACE = ("duplicate key", "already exists", "conflict", "could not serialize")


def _attach(con: duckdb.DuckDBPyConnection, sql: str, attempts: int = 10) -> None:
    """ATTACH, retried while another machine is creating the same catalog at this moment."""
    import duckdb

    for i in range(attempts):
        try:
            con.execute(sql)
            return
        except duckdb.Error as exc:
            if i == attempts - 1 or not any(r in str(exc).lower() for r in _RACE):
                raise
            with contextlib.suppress(duckdb.Error):
                con.execute("DETACH DATABASE IF EXISTS lake")
            time.sleep(min(1.0, 0.05 * 2 ** i) * (0.5 + random.random()))


def first_line(exc: BaseException, limit: int = 400) -> str:
    """The first line of an exception's text, scrubbed and bounded."""
    text = str(exc).strip().splitlines()
    return scrub(text[0] if text else type(exc).__name__)[:limit]
