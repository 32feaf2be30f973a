"""Verify hash chains across the archive and the local home, as one trail per writer.

The archive keeps every shipped line as written (the ``lines`` table). Verification lays the
shipped segments out as segment files beside the local segments not yet shipped and runs the
same checks as ``tooltrace verify``: a segment deleted from the archive, a line edited or moved
there, or a re-chained range under the keyed checkpoints, is found exactly as it is locally.
A local segment that differs from its shipped copy is reported as ``diverged``.
"""

from __future__ import annotations

import collections
import os
import shutil
import tempfile
from pathlib import Path

from .._config import resolve_home
from ..telemetry.audit._format import load_key
from ..telemetry.audit._manifest import manifest_path
from ..telemetry.audit._segments import audit_dir, list_segments, segment_name
from ..telemetry.audit._verify import Finding, VerifyReport, verify_audit
from ._connect import ArchiveError, connect, first_line, parse_target

__all__ = ["verify_archive"]


def _shipped_lines(archive: str | None) -> dict[tuple[str, int], list[str]]:
    import duckdb

    target = parse_target(archive)
    con = connect(target, read_only=True)
    try:
        if target.kind == "ducklake":
            have = con.execute("SELECT count(*) FROM duckdb_tables() WHERE database_name = 'lake'"
                               " AND table_name = 'lines'").fetchone()
            src = "lake.lines" if have and have[0] else None
        else:
            pattern = f"{target.location}/lines/*.parquet"
            n = con.execute("SELECT count(*) FROM glob($p)", {"p": pattern}).fetchone()
            src = ("read_parquet('" + pattern.replace("'", "''") + "')") if n and n[0] else None
        out: dict[tuple[str, int], list[str]] = collections.defaultdict(list)
        if src is None:
            return out
        cur = con.execute(f"SELECT writer, n, line FROM {src} ORDER BY writer, n, line_no")
        while batch := cur.fetchmany(65536):
            for writer, n, line in batch:
                out[(writer, int(n))].append(line)
        return out
    except duckdb.Error as exc:
        raise ArchiveError(f"cannot read the archive {target.display()}: {first_line(exc)}"
                           ) from None
    finally:
        con.close()


def verify_archive(archive: str | None = None,
                   home: str | os.PathLike[str] | None = None) -> VerifyReport:
    """Verify every writer's chain over the shipped segments plus the home's local ones.

    The checkpoint key is the home's (``TOOLTRACE_AUDIT_KEY`` or ``<home>/audit.key``): a
    fleet that wants keyed checks of every machine's records shares one key.
    """
    h = resolve_home(home)
    adir = audit_dir(h)
    key = load_key(h, create=False)
    shipped = _shipped_lines(archive)
    diverged: list[Finding] = []
    tmp = Path(tempfile.mkdtemp(prefix="tooltrace-verify-"))
    try:
        segdir = tmp / "audit" / "segments"
        segdir.mkdir(parents=True)
        for (writer, n), lines in shipped.items():
            data = ("\n".join(lines) + "\n").encode()
            (segdir / segment_name(writer, n, live=False)).write_bytes(data)
        for info in list_segments(adir):
            if (info.writer, info.n) in shipped:
                if not info.live:
                    try:
                        local = info.path.read_bytes()
                    except FileNotFoundError:
                        continue
                    dest = segdir / segment_name(info.writer, info.n, live=False)
                    if local != dest.read_bytes():
                        diverged.append(Finding(
                            "error", "diverged", info.name, None, None,
                            "the local segment differs from its shipped copy (one was altered"
                            " after shipping)"))
                continue
            # Not shipped yet: check it in place (a link keeps the writer's lock visible).
            os.symlink(info.path.absolute(), segdir / info.name)
        mp = manifest_path(adir)
        if mp.exists():
            dest = manifest_path(tmp / "audit")
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(mp, dest)
        report = verify_audit(tmp / "audit", key)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    report.findings.extend(diverged)
    return report
