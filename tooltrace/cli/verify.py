"""``tooltrace verify``: check the audit trail's hash chains, keyed checkpoints and digest."""

from __future__ import annotations

from pathlib import Path

import click

from ._common import (
    EXIT_FAIL,
    OutputGuard,
    fail,
    print_json,
    trail_options,
)
from ._common import table as print_table


def _head(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is None:
        return None
    from ..audit import parse_head

    try:
        parse_head(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    return value.strip()


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
@trail_options
def verify(recover: bool, expect: str | None, rederive: bool, home: Path | None, as_json: bool,
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
    """
    from .._settings import resolve_home
    from ..audit import audit_dir, load_key, recover_dead_segments, verify_audit

    guard = OutputGuard(home)
    h = resolve_home(home)
    adir = audit_dir(h)
    if not adir.is_dir() and not archive:
        fail(f"no audit trail under {guard(str(h))} (set --home or TOOLTRACE_HOME)")
    key = load_key(h, create=False)
    recovered = recover_dead_segments(adir, key) if recover and key is not None else []
    if archive:
        from .audit import verify_archive_report

        report = verify_archive_report(archive, h, guard, expect)
    else:
        report = verify_audit(adir, key, expect=expect, rederive=rederive)
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
        click.echo(f"{verdict}: {report.writers} writers, {report.segments} segments, "
                   f"{report.records} records, {report.checkpoints} checkpoints"
                   + (f", {report.lookups} lookup files" if report.lookups else "")
                   + ("" if report.keyed else " (no key: checkpoints not checked)"))
        if report.findings:
            print_table(None, ["severity", "kind", "segment", "line", "seq", "message"],
                        [[f.severity, f.kind, f.segment, f.line, f.seq, f.message]
                         for f in report.findings], guard, limit=200, wide=wide,
                        priority=("kind", "segment", "line", "message"))
        click.echo(f"head: {report.head}")
    if not report.ok:
        raise SystemExit(EXIT_FAIL)
