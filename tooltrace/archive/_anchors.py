"""Anchors on object storage under S3 Object Lock: shipped from a home, read back by ``verify``.

``ship_anchors`` copies the anchors a home appended since the last run (``<home>/anchors/
anchors.jsonl``, see ``tooltrace.audit.check_anchors``) to ``s3://bucket/prefix/``, one object
per batch, each put with ``ObjectLockMode=COMPLIANCE`` and a retain-until date
(``TOOLTRACE_ANCHOR_RETENTION_DAYS``, 365 by default): until then nobody, the account's root
included, can delete or overwrite that version. An object is named by the byte range of the
anchors file it holds (``<offset>-<end>.jsonl``) and put with ``If-None-Match: *``, so it is
never overwritten: a run killed after the put and before it recorded the put finds the same
object there with the same bytes and goes on; different bytes under that name mean the local
file was rewritten, and the run stops saying so. What was shipped is recorded in
``<home>/anchors/shipped.json``, replaced atomically after each object.

``fetch_anchors`` reads every version of every object under the prefix (a delete marker can
hide an object from a plain listing, never remove its locked version), noting objects not
under a COMPLIANCE lock.

The bucket must have Object Lock enabled (``create_bucket(..., ObjectLockEnabledForBucket=
True)``); S3 refuses a locked put otherwise, and the error says so. Credentials and endpoint
come from the standard AWS variables, as for the archive; every error message is scrubbed.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson

from .._files import replace_whole
from .._settings import TOOLTRACE_ANCHORS, anchor_retention_days, anchors_uri, resolve_home
from ..audit import ParsedAnchors, anchors_path, parse_anchors
from ..exceptions import ConfigurationError
from ._connect import ArchiveError, scrub

__all__ = ["AnchorShipResult", "fetch_anchors", "ship_anchors"]

#: The most bytes of anchors one object holds (a batch larger than this becomes several).
MAX_OBJECT_BYTES = 4 * 1024 * 1024
_CURSOR = "shipped.json"


@dataclass(frozen=True, slots=True)
class AnchorShipResult:
    """What one ``ship_anchors`` run did."""

    target: str
    #: Keys of the objects this run put.
    objects: tuple[str, ...]
    anchors: int
    #: Objects found already there with the same bytes (a run killed after its put).
    already: int
    retain_until: dt.datetime | None

    def to_dict(self) -> dict[str, Any]:
        """JSON form (``tooltrace audit ship-anchors --json``)."""
        return {"target": self.target, "objects": list(self.objects), "anchors": self.anchors,
                "already": self.already,
                "retain_until": None if self.retain_until is None
                else self.retain_until.isoformat().replace("+00:00", "Z")}


def _split(uri: str) -> tuple[str, str]:
    """(bucket, prefix without slashes at its ends) of an ``s3://bucket/prefix`` URI."""
    parts = urlsplit(uri.strip())
    if parts.scheme not in ("s3", "s3a") or not parts.netloc:
        raise ConfigurationError(f"anchors go to s3://bucket/prefix, not {scrub(uri)[:80]!r}")
    return parts.netloc, parts.path.strip("/")


def _key(prefix: str, name: str) -> str:
    return f"{prefix}/{name}" if prefix else name


def _client() -> Any:
    try:
        import boto3
        from botocore.config import Config
    except ImportError:
        raise ArchiveError("shipping anchors needs boto3: pip install 'tooltrace[archive]'"
                           ) from None
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    # A custom endpoint (MinIO, a test server) is addressed by path, as the archive's DuckDB is.
    config = Config(s3={"addressing_style": "path"}) if endpoint else None
    return boto3.client("s3", endpoint_url=endpoint, region_name=region, config=config)


def _error(exc: Exception, what: str) -> ArchiveError:
    text = ""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        err = response.get("Error") or {}
        text = f"{err.get('Code', '')}: {err.get('Message', '')}".strip(": ")
    if not text:
        lines = str(exc).strip().splitlines()
        text = lines[0] if lines else type(exc).__name__
    return ArchiveError(f"{what}: {scrub(text)[:300]}")


def _code(exc: Exception) -> str:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return str((response.get("Error") or {}).get("Code", ""))
    return ""


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _read_cursor(path: Path) -> int:
    try:
        data = orjson.loads(path.read_bytes())
    except FileNotFoundError:
        return 0
    except orjson.JSONDecodeError:
        raise ArchiveError(f"{path.name} is not what ship-anchors wrote: remove it only if"
                           " the anchors it names are in the bucket") from None
    off = data.get("offset") if isinstance(data, dict) else None
    return off if isinstance(off, int) and off >= 0 else 0


def _write_cursor(path: Path, offset: int, key: str) -> None:
    replace_whole(path, orjson.dumps({"offset": offset, "last_object": key}))


def _batches(data: bytes, start: int) -> list[tuple[int, int]]:
    """Byte ranges of ``data`` (the anchors file) from ``start`` to its last newline, each at
    most ``MAX_OBJECT_BYTES`` (or one line, if a line is longer), cut at line ends."""
    end = data.rfind(b"\n") + 1
    out: list[tuple[int, int]] = []
    pos = start
    while pos < end:
        stop = min(end, pos + MAX_OBJECT_BYTES)
        cut = data.rfind(b"\n", pos, stop) + 1 if stop < end else end
        if cut <= pos:  # a single line longer than the limit
            cut = data.find(b"\n", pos) + 1
        out.append((pos, cut))
        pos = cut
    return out


def ship_anchors(home: str | os.PathLike[str] | None = None, to: str | None = None, *,
                 retention_days: int | None = None) -> AnchorShipResult:
    """Ship the anchors ``home`` appended since the last run to ``to`` (``s3://bucket/prefix``;
    default ``TOOLTRACE_ANCHORS``), each batch one object under a COMPLIANCE lock for
    ``retention_days`` (default ``TOOLTRACE_ANCHOR_RETENTION_DAYS``, else 365).

    Raises ``ConfigurationError`` for a missing or bad target, ``ArchiveError`` (scrubbed)
    when the bucket cannot be written, has no Object Lock, or holds other bytes under the
    name of a batch (the local anchors file was rewritten).
    """
    uri = anchors_uri(to)
    if not uri:
        raise ConfigurationError(f"no anchors target: pass --to or set {TOOLTRACE_ANCHORS}")
    bucket, prefix = _split(uri)
    days = anchor_retention_days(retention_days)
    h = resolve_home(home)
    src = anchors_path(h)
    target = f"s3://{bucket}/{prefix}" if prefix else f"s3://{bucket}"
    with _locked(src.with_name("ship.lock")):
        cursor = src.with_name(_CURSOR)
        offset = _read_cursor(cursor)
        try:
            data = src.read_bytes()
        except FileNotFoundError:
            data = b""
        if len(data) < offset:
            raise ArchiveError(
                f"the anchors file holds {len(data)} bytes but {offset} were shipped: it was cut"
                " or replaced; check the trail with `tooltrace verify --anchors` against the"
                " bucket")
        batches = _batches(data, offset)
        if not batches:
            return AnchorShipResult(target, (), 0, 0, None)
        client = _client()
        until = (dt.datetime.now(dt.UTC) + dt.timedelta(days=days)).replace(microsecond=0)
        put: list[str] = []
        already = anchors = 0
        for lo, hi in batches:
            body = data[lo:hi]
            key = _key(prefix, f"{lo:016d}-{hi:016d}.jsonl")
            if _put_once(client, bucket, key, body, until):
                put.append(key)
            else:
                already += 1
            anchors += body.count(b"\n")
            _write_cursor(cursor, hi, key)
    return AnchorShipResult(target, tuple(put), anchors, already, until)


def _put_once(client: Any, bucket: str, key: str, body: bytes, until: dt.datetime) -> bool:
    """Put ``body`` at ``key`` under a COMPLIANCE lock unless it is there; True if put, False
    if the same bytes were there already. Raises ``ArchiveError`` otherwise."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        client.put_object(Bucket=bucket, Key=key, Body=body, ContentType="application/x-ndjson",
                          ObjectLockMode="COMPLIANCE", ObjectLockRetainUntilDate=until,
                          IfNoneMatch="*")
        return True
    except ClientError as exc:
        if _code(exc) not in ("PreconditionFailed", "412"):
            if _code(exc) == "InvalidRequest":
                raise _error(exc, f"cannot put a locked object in bucket {bucket} (is Object"
                                  " Lock enabled on it?)") from None
            raise _error(exc, f"cannot put anchors into s3://{bucket}/{key}") from None
    except BotoCoreError as exc:
        raise _error(exc, f"cannot reach s3://{bucket}") from None
    # Something is there under this name already: ours from a run killed before it recorded
    # the put, or other bytes.
    try:
        have = client.get_object(Bucket=bucket, Key=key)["Body"].read()
    except (ClientError, BotoCoreError) as exc:
        raise _error(exc, f"cannot read s3://{bucket}/{key}") from None
    if have != body:
        raise ArchiveError(
            f"s3://{bucket}/{key} holds other anchors than the same bytes of the local anchors"
            " file: the local file was rewritten since they were shipped; check the trail with"
            " `tooltrace verify --anchors` against the bucket")
    return False


def fetch_anchors(uri: str) -> ParsedAnchors:
    """Every anchor under ``uri`` (``s3://bucket/prefix``): every version of every object,
    parsed (sources named ``s3://bucket/key``). Objects not under a COMPLIANCE lock, or hidden
    by a delete marker, are noted. Raises ``ConfigurationError`` for a bad URI,
    ``ArchiveError`` (scrubbed) when the bucket cannot be read."""
    from botocore.exceptions import BotoCoreError, ClientError

    bucket, prefix = _split(uri)
    client = _client()
    out = ParsedAnchors()
    try:
        versions: list[dict[str, Any]] = []
        markers: set[str] = set()
        pages = client.get_paginator("list_object_versions").paginate(
            Bucket=bucket, Prefix=f"{prefix}/" if prefix else "")
        for page in pages:
            versions += page.get("Versions") or []
            markers |= {m["Key"] for m in page.get("DeleteMarkers") or [] if m.get("IsLatest")}
        for v in sorted(versions, key=lambda v: (v["Key"], str(v.get("LastModified")))):
            key = v["Key"]
            if not key.endswith(".jsonl"):
                continue
            obj = client.get_object(Bucket=bucket, Key=key, VersionId=v["VersionId"])
            source = f"s3://{bucket}/{key}"
            got = parse_anchors(obj["Body"].read(), source)
            if obj.get("ObjectLockMode") != "COMPLIANCE":
                got.notes.append((source, "anchor object is not under a COMPLIANCE Object Lock:"
                                          " it can be deleted or replaced"))
            if key in markers:
                got.notes.append((source, "anchor object was deleted (a delete marker hides"
                                          " it); its locked version was read"))
            out.extend(got)
    except (ClientError, BotoCoreError) as exc:
        raise _error(exc, f"cannot read the anchors at s3://{bucket}/{prefix}") from None
    return out
