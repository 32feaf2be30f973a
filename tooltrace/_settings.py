"""Settings: the one place tooltrace reads its ``TOOLTRACE_*`` environment variables.

An explicit argument wins over the environment variable, which wins over the default. Every
variable is a constant here and a row of ``SETTINGS`` (its default and meaning, as the
configuration page of the documentation shows them; a test keeps the two equal). Values are read
when they are asked for (when an object is built, a call decides, a reader opens), never at
import time. The command line's ``--home`` and ``--archive`` options name the same variables
(click reads them, so an option's value is the one in effect); the OpenTelemetry variables are
the SDK's own (``tooltrace.telemetry.tracing``).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from .exceptions import ConfigurationError

__all__ = [
    "HOME_ENTRIES",
    "PROMETHEUS_MULTIPROC_DIR",
    "SETTINGS",
    "TOOLTRACE_ANCHORS",
    "TOOLTRACE_ANCHOR_RETENTION_DAYS",
    "TOOLTRACE_APPROVAL",
    "TOOLTRACE_ARCHIVE",
    "TOOLTRACE_ARCHIVE_DATA_PATH",
    "TOOLTRACE_AUDIT_COMPACT",
    "TOOLTRACE_AUDIT_FSYNC",
    "TOOLTRACE_AUDIT_KEY",
    "TOOLTRACE_AUDIT_STRICT",
    "TOOLTRACE_HOME",
    "TOOLTRACE_LOG_FORMAT",
    "TOOLTRACE_LOG_LEVEL",
    "TOOLTRACE_MAX_DEPTH",
    "TOOLTRACE_MAX_TIMEOUT_S",
    "TOOLTRACE_POLICY",
    "TOOLTRACE_RUN_ID",
    "TOOLTRACE_SIGNING_KEY",
    "TOOLTRACE_SNAPSHOT_MAX_BYTES",
    "TOOLTRACE_TRACE_URL",
    "Setting",
    "anchor_retention_days",
    "anchors_uri",
    "approval_allows",
    "archive_data_path",
    "archive_uri",
    "audit_compact",
    "audit_fsync",
    "audit_key",
    "audit_strict",
    "default_home",
    "log_format",
    "log_level",
    "max_depth",
    "max_timeout_s",
    "policy_path",
    "prometheus_multiproc_dir",
    "protected_paths",
    "resolve_home",
    "run_id",
    "signing_key_file",
    "snapshot_max_bytes",
    "state_dir",
    "trace_url",
]

# Each variable's default and meaning, as the documentation shows them, are in SETTINGS.
#: The tooltrace home (audit trail, artifacts, keys).
TOOLTRACE_HOME: Final = "TOOLTRACE_HOME"
#: The run id of calls that carry none.
TOOLTRACE_RUN_ID: Final = "TOOLTRACE_RUN_ID"
#: The longest deadline a call may ask for, in seconds.
TOOLTRACE_MAX_TIMEOUT_S: Final = "TOOLTRACE_MAX_TIMEOUT_S"
#: How deeply tools may nest calls through their context (``ctx.call``).
TOOLTRACE_MAX_DEPTH: Final = "TOOLTRACE_MAX_DEPTH"
#: ``allow`` or ``deny``: what an ``ask`` verdict becomes with no approver.
TOOLTRACE_APPROVAL: Final = "TOOLTRACE_APPROVAL"
#: ``auto`` or ``off``: whether audit writers compact sealed segments in the background.
TOOLTRACE_AUDIT_COMPACT: Final = "TOOLTRACE_AUDIT_COMPACT"
#: The audit fsync policy: ``record``, ``grouped`` or ``none``.
TOOLTRACE_AUDIT_FSYNC: Final = "TOOLTRACE_AUDIT_FSYNC"
#: ``1``, ``true`` or ``yes``: strict audit mode when the sink leaves ``strict`` unset.
TOOLTRACE_AUDIT_STRICT: Final = "TOOLTRACE_AUDIT_STRICT"
#: The secret of the audit checkpoints' HMAC (else ``<home>/audit.key``, created 0600).
TOOLTRACE_AUDIT_KEY: Final = "TOOLTRACE_AUDIT_KEY"
#: The file of the Ed25519 key that signs checkpoints (else ``<home>/keys/signing.ed25519``).
TOOLTRACE_SIGNING_KEY: Final = "TOOLTRACE_SIGNING_KEY"
#: Where ``tooltrace audit ship-anchors`` puts anchors (``s3://bucket/prefix``, Object Lock).
TOOLTRACE_ANCHORS: Final = "TOOLTRACE_ANCHORS"
#: How many days each shipped anchor object stays under its COMPLIANCE lock.
TOOLTRACE_ANCHOR_RETENTION_DAYS: Final = "TOOLTRACE_ANCHOR_RETENTION_DAYS"
#: The template of a link to a trace viewer (``{trace_id}``, ``{span_id}``).
TOOLTRACE_TRACE_URL: Final = "TOOLTRACE_TRACE_URL"
#: The log sink's level: debug, info, warning or error.
TOOLTRACE_LOG_LEVEL: Final = "TOOLTRACE_LOG_LEVEL"
#: The log sink's format: ``json`` or ``console``.
TOOLTRACE_LOG_FORMAT: Final = "TOOLTRACE_LOG_FORMAT"
#: The policy file (TOML) registries, the CLI and the MCP proxy read.
TOOLTRACE_POLICY: Final = "TOOLTRACE_POLICY"
#: The archive URI readers and ``tooltrace audit ship`` use when ``--archive`` is not given.
TOOLTRACE_ARCHIVE: Final = "TOOLTRACE_ARCHIVE"
#: Where a new DuckLake archive keeps its Parquet files (``s3://bucket/prefix/``).
TOOLTRACE_ARCHIVE_DATA_PATH: Final = "TOOLTRACE_ARCHIVE_DATA_PATH"

#: The largest file kept as a snapshot before a write, in bytes.
TOOLTRACE_SNAPSHOT_MAX_BYTES: Final = "TOOLTRACE_SNAPSHOT_MAX_BYTES"


@dataclass(frozen=True, slots=True)
class Setting:
    """One variable: its name, its default and what it sets (Markdown, as the docs show them),
    and the documentation page that says more (title, path under ``docs/``)."""

    name: str
    default: str
    meaning: str
    see: tuple[str, str] | None = None


#: Every variable tooltrace reads, in the order of the configuration page.
SETTINGS: Final = (
    Setting(TOOLTRACE_HOME, "a per-user state directory for the workspace (`tooltrace where`)",
            "home of the audit trail, artifacts, keys, anchors, logs of the demo and CLI;"
            " never inside a workspace unless placed there",
            ("Threat model", "threat-model.md#the-home")),
    Setting(TOOLTRACE_RUN_ID, "a fresh UUIDv7 per registry",
            "run id stamped on calls that carry none"),
    Setting(TOOLTRACE_MAX_TIMEOUT_S, "`600`", "upper bound, in seconds, on per-call deadline"
            " overrides", ("Runtime", "guide/runtime.md#deadlines")),
    Setting(TOOLTRACE_MAX_DEPTH, "`8`", "how deeply tools may nest calls through their context;"
            " deeper calls are refused", ("Nested calls", "guide/nested.md#depth")),
    Setting(TOOLTRACE_APPROVAL, "`deny`",
            "what an `ask` verdict becomes with no approver (`allow` lets it through)"),
    Setting(TOOLTRACE_POLICY, "`./tooltrace.toml` when it exists",
            "the policy file registries, the CLI and the MCP proxy read",
            ("Policy files", "guide/policy-file.md")),
    Setting(TOOLTRACE_AUDIT_FSYNC, "`grouped`", "audit fsync policy: `record`, `grouped`, `none`",
            ("the trail", "audit/trail.md#fsync-policies-and-acknowledgement")),
    Setting(TOOLTRACE_AUDIT_COMPACT, "`auto`", "`off`: audit writers leave sealed segments to"
            " `tooltrace compact` instead of compacting them in the background",
            ("the trail", "audit/trail.md#background-compaction")),
    Setting(TOOLTRACE_AUDIT_STRICT, "off", "`1`, `true` or `yes`: refuse a call whose audit"
            " intent cannot be made durable", ("the trail", "audit/trail.md#strict-mode")),
    Setting(TOOLTRACE_AUDIT_KEY, "key file `<home>/audit.key` (0600)",
            "key of the audit checkpoints' HMAC"),
    Setting(TOOLTRACE_SIGNING_KEY, "key file `<home>/keys/signing.ed25519` (0600)",
            "file of the Ed25519 private key that signs checkpoints, seals and approvals",
            ("the trail", "audit/trail.md#signatures")),
    Setting(TOOLTRACE_ANCHORS, "unset", "`s3://bucket/prefix` (Object Lock on) where `tooltrace"
            " audit ship-anchors` ships the signed checkpoint heads",
            ("the archive", "audit/archive.md#anchors-under-object-lock")),
    Setting(TOOLTRACE_ANCHOR_RETENTION_DAYS, "`365`", "days each shipped anchor object stays"
            " under its COMPLIANCE lock",
            ("the archive", "audit/archive.md#anchors-under-object-lock")),
    Setting(TOOLTRACE_TRACE_URL, "unset",
            "link template for trace ids in `autopsy` and `report` (`{trace_id}`, `{span_id}`)"),
    Setting(TOOLTRACE_LOG_LEVEL, "`info`", "log sink level: `debug`, `info`, `warning`, `error`",
            ("Logs", "telemetry/logs.md")),
    Setting(TOOLTRACE_LOG_FORMAT, "`json`", "log sink format: `json`, `console`",
            ("Logs", "telemetry/logs.md")),
    Setting(TOOLTRACE_ARCHIVE, "unset", "the shared audit archive readers and `tooltrace audit"
            " ship` use", ("the archive", "audit/archive.md#configuration")),
    Setting(TOOLTRACE_ARCHIVE_DATA_PATH, "unset", "where a new DuckLake archive keeps its"
            " Parquet files; read when the first ship creates the catalog",
            ("the archive", "audit/archive.md#configuration")),
    Setting(TOOLTRACE_SNAPSHOT_MAX_BYTES, "`8388608` (8 MiB)", "largest file kept as a snapshot"
            " before a write; a larger one is recorded as too large, not kept",
            ("Snapshots", "guide/snapshots.md#the-size-bound")),
)


#: prometheus-client's own variable (not a tooltrace setting): the directory its multiprocess
#: mode keeps each process's counters in. prometheus-client reads it when it is imported;
#: tooltrace reads it to serve the sum over every process (``serve_metrics``).
PROMETHEUS_MULTIPROC_DIR: Final = "PROMETHEUS_MULTIPROC_DIR"


def prometheus_multiproc_dir() -> str | None:
    """``PROMETHEUS_MULTIPROC_DIR`` (or its older lower-case spelling); None when unset."""
    return _env(PROMETHEUS_MULTIPROC_DIR) or _env(PROMETHEUS_MULTIPROC_DIR.lower())


def _env(name: str) -> str | None:
    """The variable's value; None when it is unset or empty."""
    return os.environ.get(name) or None


def resolve_home(
    explicit: str | os.PathLike[str] | None = None,
    *,
    workspace: str | os.PathLike[str] | None = None,
) -> Path:
    """The tooltrace home: explicit argument > ``TOOLTRACE_HOME`` > :func:`default_home` of
    ``workspace`` (the current directory when None)."""
    if explicit is not None:
        return Path(explicit)
    env = _env(TOOLTRACE_HOME)
    return Path(env) if env else default_home(workspace)


#: What tooltrace keeps in a home: the trail, its keys and anchors, snapshots, artifacts, logs,
#: the MCP proxy's pins. Protected one by one where a workspace lies inside its home.
HOME_ENTRIES: Final = ("audit", "audit.key", "keys", "anchors", "snapshots", "artifacts", "logs",
                       "mcp-pins.json")


def protected_paths(home: str | os.PathLike[str], workspace: str | os.PathLike[str]) -> list[Path]:
    """What no tool of ``workspace`` may reach of ``home``: the whole home, or, where the
    workspace lies inside it (or is it), each entry the home keeps (``HOME_ENTRIES``)."""
    real_home = Path(os.path.realpath(home))
    if Path(os.path.realpath(workspace)).is_relative_to(real_home):
        return [real_home / name for name in HOME_ENTRIES]
    return [real_home]


def state_dir() -> Path:
    """Where tooltrace keeps per-user state: ``$XDG_STATE_HOME/tooltrace``, else
    ``~/.local/state/tooltrace`` (the XDG Base Directory default)."""
    base = _env("XDG_STATE_HOME")
    if base is None or not os.path.isabs(base):
        # The specification says a relative value is invalid and is to be ignored.
        base = os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "tooltrace"


def default_home(workspace: str | os.PathLike[str] | None = None) -> Path:
    """The home a workspace gets when none is named: ``<state dir>/homes/<name>-<digest>``,
    keyed by the workspace's real path, so two workspaces never share one and the home never
    lies inside the workspace an agent's tools work in."""
    import hashlib  # here: the readers that are handed a home never load OpenSSL

    real = os.path.realpath(os.fspath(workspace) if workspace is not None else os.getcwd())
    digest = hashlib.sha256(os.fsencode(real)).hexdigest()[:16]
    # The readable part only helps a person listing the directory; the digest is the key.
    name = re.sub(r"[^A-Za-z0-9._-]", "_", os.path.basename(real) or "root")[:40].lstrip(".")
    return state_dir() / "homes" / f"{name or 'root'}-{digest}"


def run_id() -> str | None:
    """``TOOLTRACE_RUN_ID``; None when unset (the registry then makes a fresh one)."""
    return _env(TOOLTRACE_RUN_ID)


def max_timeout_s(explicit: float | None = None) -> float:
    """The longest deadline a call may ask for: explicit > ``TOOLTRACE_MAX_TIMEOUT_S`` > 600.

    Raises ``ConfigurationError`` unless it is a positive number of seconds.
    """
    name = TOOLTRACE_MAX_TIMEOUT_S
    if explicit is not None:
        value = explicit
    else:
        raw = _env(name)
        if raw is None:
            return 600.0
        try:
            value = float(raw)
        except ValueError:
            raise ConfigurationError(
                f"{name} must be a number of seconds, got {raw[:40]!r}"
            ) from None
    if not value > 0:
        raise ConfigurationError(f"{name} must be positive, got {value}")
    return value


def max_depth(explicit: int | None = None) -> int:
    """How deeply tools may nest calls: explicit > ``TOOLTRACE_MAX_DEPTH`` > 8.

    Raises ``ConfigurationError`` unless it is a whole number >= 0 (0: no nested calls).
    """
    return _whole_number(TOOLTRACE_MAX_DEPTH, explicit, 8)


def snapshot_max_bytes(explicit: int | None = None) -> int:
    """The largest file kept as a snapshot: explicit > ``TOOLTRACE_SNAPSHOT_MAX_BYTES`` >
    8 MiB. ``ConfigurationError`` unless it is a whole number of bytes, 0 or more."""
    return _whole_number(TOOLTRACE_SNAPSHOT_MAX_BYTES, explicit, 8 * 1024 * 1024)


def _whole_number(name: str, explicit: int | None, default: int) -> int:
    """explicit > the variable > ``default``; ``ConfigurationError`` unless a whole number
    >= 0."""
    if explicit is not None:
        value = explicit
    else:
        raw = _env(name)
        if raw is None:
            return default
        try:
            value = int(raw)
        except ValueError:
            raise ConfigurationError(f"{name} must be a whole number, got {raw[:40]!r}") from None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigurationError(f"{name} must be a whole number >= 0, got {value!r}")
    return value


def policy_path(explicit: str | os.PathLike[str] | None = None) -> Path | None:
    """The policy file: explicit > ``TOOLTRACE_POLICY`` > ``./tooltrace.toml`` when it exists >
    none (the built-in default policy)."""
    if explicit is not None:
        return Path(explicit)
    env = _env(TOOLTRACE_POLICY)
    if env:
        return Path(env)
    local = Path.cwd() / "tooltrace.toml"
    return local if local.is_file() else None


def approval_allows() -> bool:
    """What an ``ask`` verdict becomes with no approver: True only for
    ``TOOLTRACE_APPROVAL=allow``; anything else denies."""
    return os.environ.get(TOOLTRACE_APPROVAL, "deny").strip().lower() == "allow"


def audit_fsync(explicit: str | None = None) -> str:
    """The audit fsync policy's name: explicit > ``TOOLTRACE_AUDIT_FSYNC`` > ``grouped`` (the
    sink checks it)."""
    return explicit if explicit is not None else _env(TOOLTRACE_AUDIT_FSYNC) or "grouped"


def audit_compact(explicit: bool | None = None) -> bool:
    """Background compaction of the audit trail: explicit > ``TOOLTRACE_AUDIT_COMPACT``
    (``auto``/``on``/``1``/``true``/``yes``, or ``off``/``0``/``false``/``no``) > on.
    ``ConfigurationError`` for any other value."""
    if explicit is not None:
        return explicit
    raw = _env(TOOLTRACE_AUDIT_COMPACT)
    if raw is None:
        return True
    value = raw.strip().lower()
    if value in ("auto", "on", "1", "true", "yes"):
        return True
    if value in ("off", "0", "false", "no"):
        return False
    raise ConfigurationError(f"{TOOLTRACE_AUDIT_COMPACT} must be auto or off, got {raw[:40]!r}")


def audit_strict(explicit: bool | None = None) -> bool:
    """Strict audit mode: explicit > ``TOOLTRACE_AUDIT_STRICT`` (``1``, ``true``, ``yes``) >
    off."""
    if explicit is not None:
        return explicit
    return os.environ.get(TOOLTRACE_AUDIT_STRICT, "").strip().lower() in ("1", "true", "yes")


def audit_key() -> bytes | None:
    """``TOOLTRACE_AUDIT_KEY`` as bytes; None when unset (the home's key file is used)."""
    env = _env(TOOLTRACE_AUDIT_KEY)
    return env.encode() if env else None


def signing_key_file() -> Path | None:
    """``TOOLTRACE_SIGNING_KEY`` as a path; None when unset (the home's key file is used)."""
    env = _env(TOOLTRACE_SIGNING_KEY)
    return Path(env) if env else None


def anchors_uri(explicit: str | None = None) -> str | None:
    """Where anchors are shipped: explicit > ``TOOLTRACE_ANCHORS`` > none."""
    return explicit or _env(TOOLTRACE_ANCHORS)


def anchor_retention_days(explicit: int | None = None) -> int:
    """Days a shipped anchor object stays locked: explicit > ``TOOLTRACE_ANCHOR_RETENTION_DAYS``
    > 365. ``ConfigurationError`` unless a whole number of at least 1."""
    value = _whole_number(TOOLTRACE_ANCHOR_RETENTION_DAYS, explicit, 365)
    if value < 1:
        raise ConfigurationError(f"{TOOLTRACE_ANCHOR_RETENTION_DAYS} must be at least 1 day")
    return value


def trace_url() -> str | None:
    """``TOOLTRACE_TRACE_URL``, the template of a link to a trace; None when unset."""
    return _env(TOOLTRACE_TRACE_URL)


def log_level(explicit: str | int | None = None) -> str | int:
    """The log sink's level: explicit > ``TOOLTRACE_LOG_LEVEL`` > ``info`` (the sink checks
    it)."""
    if explicit is not None:
        return explicit
    return os.environ.get(TOOLTRACE_LOG_LEVEL, "").strip() or "info"


def log_format(explicit: str | None = None) -> str:
    """The log sink's format: explicit > ``TOOLTRACE_LOG_FORMAT`` > ``json`` (the sink checks
    it)."""
    if explicit is not None:
        return explicit
    return os.environ.get(TOOLTRACE_LOG_FORMAT, "").strip() or "json"


def archive_uri(explicit: str | None = None) -> str:
    """The archive URI: explicit > ``TOOLTRACE_ARCHIVE`` > empty (no archive given)."""
    return explicit if explicit is not None else os.environ.get(TOOLTRACE_ARCHIVE, "")


def archive_data_path(explicit: str | None = None) -> str | None:
    """Where a new DuckLake catalog keeps its Parquet: explicit > ``TOOLTRACE_ARCHIVE_DATA_PATH``
    > none."""
    return explicit or _env(TOOLTRACE_ARCHIVE_DATA_PATH)
