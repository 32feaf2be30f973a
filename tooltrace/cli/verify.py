"""``tooltrace verify``: check the audit trail's hash chains, signed checkpoints and digest,
and (``--anchors``) that it still holds every anchored record."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ._common import (
    EXIT_FAIL,
    EXIT_USAGE,
    OutputGuard,
    fail,
    print_json,
    trail_options,
)
from ._common import table as print_table

if TYPE_CHECKING:
    from ..audit import ParsedAnchors, PublicKey, Recovered, VerifyReport


def _head(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is None:
        return None
    from ..audit import parse_head

    try:
        parse_head(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    return value.strip()


def _pubkeys(ctx: click.Context, param: click.Parameter, value: Sequence[str]
             ) -> list[PublicKey]:
    from ..audit import PublicKey
    from ..exceptions import ConfigurationError

    try:
        return [PublicKey.parse(v) for v in value]
    except ConfigurationError as exc:
        raise click.BadParameter(str(exc)) from None


def _read_anchors(source: str, guard: OutputGuard) -> ParsedAnchors:
    """The anchors at ``source`` (a file, or ``s3://bucket/prefix``); exit 2 when they cannot
    be read."""
    from ..audit import parse_anchors

    if source.startswith(("s3://", "s3a://")):
        from ..archive import ArchiveError, fetch_anchors
        from ..exceptions import ConfigurationError

        try:
            return fetch_anchors(source)
        except (ArchiveError, ConfigurationError) as exc:
            fail(str(exc), EXIT_USAGE, guard)
    if "://" in source:
        fail(f"anchors are read from a file or s3://bucket/prefix, not {source[:80]!r}",
             EXIT_USAGE, guard)
    try:
        data = Path(source).read_bytes()
    except OSError as exc:
        fail(f"cannot read the anchors {source}: {exc.strerror or type(exc).__name__}",
             EXIT_USAGE, guard)
    return parse_anchors(data, Path(source).name)


def _print_gaps(report: VerifyReport, source: str, guard: OutputGuard, wide: bool) -> None:
    click.echo(f"anchors: {report.anchors} anchors of {report.anchored_writers} writers checked"
               f" against {guard(source)}"
               + (f"; {len(report.gaps)} gap{'s' if len(report.gaps) > 1 else ''}"
                  if report.gaps else "; every anchored record is here"))
    if report.gaps:
        print_table(None, ["writer", "kind", "segments", "seq", "records", "message"],
                    [[g.writer, g.kind, ",".join(map(str, g.segments)),
                      f"{g.first_seq if g.first_seq is not None else '?'}..{g.last_seq}",
                      g.records, g.message] for g in report.gaps], guard, limit=200,
                    wide=wide, priority=("writer", "kind", "seq", "message"))


@click.command()
@click.option("--recover", is_flag=True,
              help="First seal segments of crashed writers (torn tails go to quarantine/).")
@click.option("--expect", metavar="HEAD", callback=_head,
              help="A head printed by an earlier verify: fail unless the trail still holds it"
                   " (unchanged, perhaps grown since). Keep heads outside the home.")
@click.option("--rederive", is_flag=True,
              help="Also re-derive every lookup file from its Parquet file and compare them"
                   " (as slow as compaction; by default each lookup file's keyed MACs are"
                   " checked).")
@click.option("--pubkey", "pubkeys", multiple=True, metavar="KEY", callback=_pubkeys,
              help="Public key every signature must verify with: 64 hex digits or a key file"
                   " (default: the home's keys/signing.ed25519.pub). Keep a copy outside the"
                   " home; repeat for other machines' keys with --archive.")
@click.option("--allow-unsigned", is_flag=True,
              help="Report lines without a signature (a trail written before signatures) as"
                   " warnings, not errors.")
@click.option("--anchors", "anchors", metavar="SOURCE",
              help="Also prove the trail still holds every anchored record: an anchors file,"
                   " or s3://bucket/prefix where ship-anchors put them (exit 2 if unreadable).")
@trail_options
def verify(recover: bool, expect: str | None, rederive: bool, pubkeys: list[PublicKey],
           allow_unsigned: bool, anchors: str | None, home: Path | None, as_json: bool,
           wide: bool, archive: str | None) -> None:
    """Detect edited, deleted, reordered or inserted records, truncated segments, and deleted
    segments and writers.

    Every segment a writer opens, seals, and compaction or shipping removes is recorded in a
    keyed, chained digest (audit/digest.jsonl); a segment or writer it names that is gone
    without such a record fails. Findings name the segment file, line and seq. Exit 0 when no
    error was found (warnings, such as a crashed writer's torn tail, are reported), 1
    otherwise.

    The head printed last digests every writer and segment so far. What cannot be seen from
    inside the home: the digest's newest entries removed together with the segments they name
    (a rollback), the whole home removed or replaced by an older copy, and changes made by
    someone holding the audit key. Save the head elsewhere and pass it back with --expect to
    catch the first two; keep the key outside the home (TOOLTRACE_AUDIT_KEY) for the third.

    The lookup files beside the compacted Parquet (what autopsy reads) must be whole and match
    their keyed MACs; --rederive also rebuilds each from its Parquet file and compares.

    Every checkpoint, seal, approval and digest entry must carry an Ed25519 signature that
    verifies with the public key: that is what holds against someone who has the audit key. A
    copied trail verifies with --pubkey alone. With --anchors, every signed checkpoint head
    shipped under Object Lock (or kept elsewhere) must still be in the trail: a deleted trail or
    writer, a cut tail or a rewritten stretch fails with the writer and seqs that are gone.
    """
    from .._settings import resolve_home
    from ..audit import (
        audit_dir,
        check_anchors,
        load_key,
        load_signer,
        recover_dead_segments,
        trust_for,
        verify_audit,
    )

    guard = OutputGuard(home)
    h = resolve_home(home)
    adir = audit_dir(h)
    if not adir.is_dir() and not archive and not anchors:
        fail(f"no audit trail under {guard(str(h))} (set --home or TOOLTRACE_HOME)")
    parsed = _read_anchors(anchors, guard) if anchors else None
    key = load_key(h, create=False)
    trust = trust_for(h, pubkeys, allow_unsigned=allow_unsigned)
    recovered = (recover_dead_segments(adir, key, load_signer(h, create=False))
                 if recover and key is not None else [])
    if archive:
        from .audit import verify_archive_report

        report = verify_archive_report(archive, h, guard, expect, pubkeys=pubkeys,
                                       allow_unsigned=allow_unsigned)
    else:
        report = verify_audit(adir, key, expect=expect, rederive=rederive, trust=trust)
    if parsed is not None:
        check_anchors(adir, parsed, list(trust.keys.values()), report)
    _print(report, recovered, anchors, guard, as_json=as_json, wide=wide)
    if not report.ok:
        raise SystemExit(EXIT_FAIL)


def _print(report: VerifyReport, recovered: Sequence[Recovered], anchors: str | None,
           guard: OutputGuard, *, as_json: bool, wide: bool) -> None:
    if as_json:
        data = report.to_dict()
        data["recovered"] = [
            {"segment": r.segment, "lines": r.lines, "torn_bytes": r.torn_bytes,
             "quarantined": r.quarantined} for r in recovered]
        print_json(data, guard)
    else:
        for r in recovered:
            click.echo(f"recovered {r.segment}: {r.lines} lines kept, {r.torn_bytes} torn bytes"
                       + (f" set aside in {r.quarantined}" if r.quarantined else ""))
        verdict = "OK" if report.ok else "FAILED"
        signed = (f", {report.signatures} signatures (key {', '.join(report.key_ids)})"
                  if report.key_ids else " (no public key: signatures not checked)")
        click.echo(f"{verdict}: {report.writers} writers, {report.segments} segments, "
                   f"{report.records} records, {report.checkpoints} checkpoints"
                   + (f", {report.lookups} lookup files" if report.lookups else "")
                   + signed
                   + ("" if report.keyed else " (no audit key: MACs not checked)"))
        if report.findings:
            print_table(None, ["severity", "kind", "segment", "line", "seq", "message"],
                        [[f.severity, f.kind, f.segment, f.line, f.seq, f.message]
                         for f in report.findings], guard, limit=200, wide=wide,
                        priority=("kind", "segment", "line", "message"))
        if anchors:
            _print_gaps(report, anchors, guard, wide)
        click.echo(f"head: {report.head}")
