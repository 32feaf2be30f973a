"""``tooltrace audit ship``: move sealed audit segments into the archive, exactly once; and
what the readers (``autopsy``, ``calls``, ``stats``, ``query``, ``verify``) use with
``--archive``."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

import click

from .._settings import TOOLTRACE_ANCHORS, TOOLTRACE_ARCHIVE, TOOLTRACE_ARCHIVE_DATA_PATH
from ._common import EXIT_FAIL, EXIT_USAGE, OutputGuard, fail, home_option, json_option
from ._common import print_json as _print_json

if TYPE_CHECKING:
    from ..archive import ArchiveStore
    from ..audit import PublicKey, VerifyReport


@click.group()
def audit() -> None:
    """Audit trail maintenance beyond one machine (the archive, the anchors)."""


@audit.command()
@click.option("--archive", envvar=TOOLTRACE_ARCHIVE, metavar="URI",
              help="ducklake:postgres:<conninfo>, s3://bucket/prefix or a directory"
                   " (default: $TOOLTRACE_ARCHIVE).")
@click.option("--data-path", envvar=TOOLTRACE_ARCHIVE_DATA_PATH, metavar="URI",
              help="Where a new DuckLake catalog keeps its Parquet (s3://bucket/prefix/);"
                   " default $TOOLTRACE_ARCHIVE_DATA_PATH.")
@click.option("--prune", is_flag=True, help="Delete local segments once they are archived.")
@click.option("--segments-per-commit", type=click.IntRange(1, 100_000), default=64,
              show_default=True, help="Segments per DuckLake transaction.")
@click.option("--follow", is_flag=True,
              help="Keep shipping every --interval seconds until SIGTERM or Ctrl-C.")
@click.option("--interval", type=click.FloatRange(0.1, 86_400), default=30.0,
              show_default=True, help="Seconds between rounds with --follow.")
@click.option("--anchors", "anchors_to", envvar=TOOLTRACE_ANCHORS, metavar="URI",
              help="Also ship the anchors, first, to this s3://bucket/prefix with Object Lock"
                   " (as ship-anchors; default: $TOOLTRACE_ANCHORS, else not shipped).")
@home_option
@json_option
def ship(archive: str | None, data_path: str | None, prune: bool, segments_per_commit: int,
         follow: bool, interval: float, anchors_to: str | None, home: Path | None,
         as_json: bool) -> None:
    """Ship sealed segments not yet in the archive; a re-run skips what landed. With an
    anchors target, each round ships the new anchors there first.

    A ship killed at any point neither loses nor duplicates a record. Exit 1 when the archive
    (or the anchors' bucket) cannot be reached or written (nothing secret is printed), 2 for a
    bad URI.
    """
    from ..archive import ArchiveError
    from ..archive import ship as do_ship
    from ..archive import ship_anchors as do_ship_anchors
    from ..exceptions import ConfigurationError

    guard = OutputGuard(home)
    stop = threading.Event()
    if follow:
        def _stop(signum: int, frame: FrameType | None) -> None:
            stop.set()

        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, _stop)
    while True:
        started = time.monotonic()
        try:
            # Anchors first: a segment pruned below stays vouched for outside the host.
            anchored = do_ship_anchors(home, anchors_to) if anchors_to else None
            res = do_ship(home, archive, data_path=data_path,
                          segments_per_commit=segments_per_commit, prune=prune)
        except ConfigurationError as exc:
            fail(str(exc), EXIT_USAGE, guard)
        except ArchiveError as exc:
            if not follow:
                fail(str(exc), EXIT_FAIL, guard)
            click.echo(f"error: {guard(str(exc))} (retrying)", err=True)
        else:
            if as_json:
                _print_json({**res.to_dict(), "anchors": anchored.to_dict() if anchored else None},
                            guard)
            else:
                if anchored is not None:
                    click.echo(f"shipped {anchored.anchors} anchors to {anchored.target}")
                click.echo(f"shipped {len(res.shipped)} segments ({res.calls} calls, {res.steps}"
                           f" steps) to {res.archive}; {res.already} already there, {res.live}"
                           " still being written" + (f", {res.pruned} pruned locally"
                                                     if res.pruned else ""))
                for name in res.lost_before_ship:
                    click.echo(f"warning: segment {name} was pruned locally before it was"
                               " shipped: its records are only in the local Parquet", err=True)
        if not follow or stop.wait(max(0.0, interval - (time.monotonic() - started))):
            return


@audit.command("ship-anchors")
@click.option("--to", envvar=TOOLTRACE_ANCHORS, metavar="URI",
              help="s3://bucket/prefix of a bucket with Object Lock enabled (default:"
                   " $TOOLTRACE_ANCHORS).")
@click.option("--retention-days", type=click.IntRange(1, 36_500), default=None,
              help="Days each object stays under its COMPLIANCE lock (default:"
                   " $TOOLTRACE_ANCHOR_RETENTION_DAYS, else 365).")
@home_option
@json_option
def ship_anchors(to: str | None, retention_days: int | None, home: Path | None,
                 as_json: bool) -> None:
    """Ship the signed checkpoint heads (anchors) appended since the last run to S3, one
    object per batch under a COMPLIANCE Object Lock, never overwritten.

    Then `tooltrace verify --anchors s3://bucket/prefix` proves the trail still holds every
    anchored record. Exit 1 when the bucket cannot be written or has no Object Lock (nothing
    secret is printed), 2 for a bad or missing target.
    """
    from ..archive import ArchiveError
    from ..archive import ship_anchors as do_ship
    from ..exceptions import ConfigurationError

    guard = OutputGuard(home)
    try:
        res = do_ship(home, to, retention_days=retention_days)
    except ConfigurationError as exc:
        fail(str(exc), EXIT_USAGE, guard)
    except ArchiveError as exc:
        fail(str(exc), EXIT_FAIL, guard)
    if as_json:
        _print_json(res.to_dict(), guard)
        return
    until = res.to_dict()["retain_until"]
    click.echo(f"shipped {res.anchors} anchors in {len(res.objects)} objects to {res.target}"
               + (f", locked until {until}" if res.objects else "")
               + (f"; {res.already} already there" if res.already else ""))


# -- what the readers use with --archive (see _common.open_store and verify) ------------------


@contextmanager
def open_archive_store(archive: str, guard: OutputGuard, *,
                       missing: int = EXIT_FAIL) -> Iterator[ArchiveStore]:
    """Open the archive for the readers; exit ``missing`` (1 unless the command says
    otherwise; 2 for a bad URI) with a secret-free message."""
    from ..archive import ArchiveError, ArchiveStore
    from ..exceptions import ConfigurationError

    try:
        store = ArchiveStore(archive)
    except ConfigurationError as exc:
        fail(str(exc), EXIT_USAGE, guard)
    except ArchiveError as exc:
        fail(str(exc), missing, guard)
    try:
        yield store
    finally:
        store.close()


def verify_archive_report(archive: str, home: Path, guard: OutputGuard,
                          expect: str | None = None, *, pubkeys: Sequence[PublicKey] = (),
                          allow_unsigned: bool = False) -> VerifyReport:
    """``verify --archive``: the chains over shipped and local segments, or exit 1 / 2."""
    from ..archive import ArchiveError, verify_archive
    from ..exceptions import ConfigurationError

    try:
        return verify_archive(archive, home, expect=expect, pubkeys=pubkeys,
                              allow_unsigned=allow_unsigned)
    except ConfigurationError as exc:
        fail(str(exc), EXIT_USAGE, guard)
    except ArchiveError as exc:
        fail(str(exc), EXIT_FAIL, guard)
