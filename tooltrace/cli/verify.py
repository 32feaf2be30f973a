"""``tooltrace verify``: check the audit trail's hash chains and keyed checkpoints."""

from __future__ import annotations

from pathlib import Path

import click

from ._common import (
    EXIT_FAIL,
    OutputGuard,
    archive_option,
    fail,
    home_option,
    json_option,
    print_json,
)
from ._common import table as print_table


@click.command()
@click.option("--recover", is_flag=True,
              help="First seal segments of crashed writers (torn tails go to quarantine/).")
@home_option
@json_option
@archive_option
def verify(recover: bool, home: Path | None, as_json: bool, archive: str | None) -> None:
    """Detect edited, deleted, reordered or inserted records and truncated segments.

    Findings name the segment file, line and seq. Exit 0 when no error was found (warnings,
    such as a crashed writer's torn tail, are reported), 1 otherwise.
    """
    from .._config import resolve_home
    from ..telemetry.audit._format import load_key
    from ..telemetry.audit._recover import recover_dead_segments
    from ..telemetry.audit._segments import audit_dir
    from ..telemetry.audit._verify import verify_audit

    guard = OutputGuard(home)
    h = resolve_home(home)
    adir = audit_dir(h)
    if not adir.is_dir() and not archive:
        fail(f"no audit trail under {guard(str(h))} (set --home or TOOLTRACE_HOME)")
    key = load_key(h, create=False)
    recovered = recover_dead_segments(adir, key) if recover and key is not None else []
    if archive:
        from .audit import verify_archive_report

        report = verify_archive_report(archive, h, guard)
    else:
        report = verify_audit(adir, key)
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
                   + ("" if report.keyed else " (no key: checkpoints not checked)"))
        if report.findings:
            print_table(None, ["severity", "kind", "segment", "line", "seq", "message"],
                        [[f.severity, f.kind, f.segment, f.line, f.seq, f.message]
                         for f in report.findings], guard, limit=200,
                        no_wrap=("segment",))
    if not report.ok:
        raise SystemExit(EXIT_FAIL)
