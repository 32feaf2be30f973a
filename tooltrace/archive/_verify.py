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
from collections.abc import Sequence
from pathlib import Path

from .._settings import resolve_home
from ..audit import (
    Finding,
    PublicKey,
    VerifyReport,
    audit_dir,
    digest_path,
    list_segments,
    load_key,
    segment_name,
    trust_for,
    verify_audit,
)
from ._connect import ArchiveError, connect, first_line, parse_target
from ._layout import segment_key

__all__ = ["verify_archive"]


def _shipped_lines(archive: str | None) -> tuple[dict[tuple[str, int], list[str]], set[str]]:
    """The shipped lines per (writer, n), and the segment ids the ship ledger lists."""
    import duckdb

    target = parse_target(archive)
    con = connect(target, read_only=True)
    try:
        ledger: set[str] = set()
        if target.kind == "ducklake":
            have = {r[0] for r in con.execute(
                "SELECT table_name FROM duckdb_tables() WHERE database_name = 'lake'").fetchall()}
            src = "lake.lines" if "lines" in have else None
            if "ship_ledger" in have:
                ledger = {r[0] for r in con.execute(
                    "SELECT segment FROM lake.ship_ledger").fetchall()}
        else:
            root = target.location
            pattern = f"{root}/lines/*.parquet"
            n = con.execute("SELECT count(*) FROM glob($p)", {"p": pattern}).fetchone()
            src = ("read_parquet('" + pattern.replace("'", "''") + "')") if n and n[0] else None
            ledger = {str(r[0]).rsplit("/", 1)[-1][: -len(".json")] for r in con.execute(
                "SELECT file FROM glob($p)", {"p": f"{root}/_shipped/*.json"}).fetchall()}
        out: dict[tuple[str, int], list[str]] = collections.defaultdict(list)
        if src is None:
            return out, ledger
        cur = con.execute(f"SELECT writer, n, line FROM {src} ORDER BY writer, n, line_no")
        while batch := cur.fetchmany(65536):
            for writer, n, line in batch:
                out[(writer, int(n))].append(line)
        return out, ledger
    except duckdb.Error as exc:
        raise ArchiveError(f"cannot read the archive {target.display()}: {first_line(exc)}"
                           ) from None
    finally:
        con.close()


def verify_archive(archive: str | None = None,
                   home: str | os.PathLike[str] | None = None, *,
                   expect: str | None = None,
                   pubkeys: Sequence[str | os.PathLike[str] | PublicKey] = (),
                   allow_unsigned: bool = False) -> VerifyReport:
    """Verify every writer's chain over the shipped segments plus the home's local ones.

    The checkpoint key is the home's (``TOOLTRACE_AUDIT_KEY`` or ``<home>/audit.key``): a
    fleet that wants keyed checks of every machine's records shares one key. Signatures must
    verify with ``pubkeys`` (default: the home's public key); other machines' signatures by a
    key not among them are warnings (pass every machine's public key to check them). The
    home's segment digest is checked as by ``verify`` (``expect`` too), for this home's
    writers only: other machines' segments are checked by their chains and the ship ledger
    alone.
    """
    h = resolve_home(home)
    adir = audit_dir(h)
    key = load_key(h, create=False)
    trust = trust_for(h, pubkeys, allow_unsigned=allow_unsigned)
    shipped, ledger = _shipped_lines(archive)
    diverged: list[Finding] = [
        Finding("error", "deleted", f"{seg}.jsonl", None, None,
                "the ship ledger lists this segment but its lines are gone from the archive:"
                " deleted")
        for seg in sorted(ledger - {segment_key(w, n) for w, n in shipped})]
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
        # The home's digest: segments pruned after shipping must be found in the archive (their
        # recorded chain heads must not paper over a segment deleted there), those compacted
        # and pruned before link the chain as locally.
        digest = digest_path(adir)
        if digest.exists():
            os.symlink(digest.absolute(), digest_path(tmp / "audit"))
        report = verify_audit(tmp / "audit", key, expect=expect, in_archive=True, trust=trust)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    report.findings.extend(diverged)
    return report
