"""Tamper: random mutations of a sealed audit trail (flip a byte, delete, reorder, duplicate or
insert a line, insert a line re-chained without the key, truncate a file, delete a segment, a
writer's only segment or a whole writer, delete an entry of the segment digest, erase a writer's
newest segments behind a forged final seal, roll the home back to an earlier state), 100 in CI
and 1,000 with ``TOOLTRACE_LONG=1``. ``tooltrace verify --json`` must fail (exit 1) every time
and name the place: the mutated segment file (or the digest) and, for a line mutation, a line
within one of the touched line. A rollback cannot be seen from inside the home: that one is
verified with ``--expect`` and the head the pristine trail had.

``tests/test_audit_verify.py`` pins one hand-made case of each kind; this is the random sweep.
"""

from __future__ import annotations

import os
import random
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner
from support.audit import workload

from tooltrace.audit import verify
from tooltrace.audit._format import chain_hash, seal_line, split_hash
from tooltrace.cli import main as cli
from tooltrace.telemetry import AuditSink

from ._figures import LONG, record, size

MUTATIONS = size(100, 1000)
KINDS = ("flip", "delete", "reorder", "duplicate", "insert", "rechain", "truncate",
         "drop_segment", "drop_lone", "drop_writer", "digest_delete", "cut_newest", "rollback")
DIGEST = "digest.jsonl"


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A sealed trail of two writers, several segments each, checkpoints every 25 records, and
    a third, newest writer with one segment."""
    home = tmp_path_factory.mktemp("pristine")
    recs = list(workload(410, seed=3))
    for part in (recs[:200], recs[200:400], recs[400:]):
        sink = AuditSink(home, checkpoint_every=25, segment_max_bytes=40_000,
                         group_max_records=16)
        for r in part:
            sink.emit(r)
        sink.shutdown()
    rep = verify(home)
    assert rep.ok and rep.records == 410 and not rep.findings, rep.findings[:3]
    assert rep.segments >= 7 and rep.writers == 3
    assert [len(m) == 1 for m in _by_writer(home)].count(True) == 1
    return home


def _segments(home: Path) -> list[Path]:
    return sorted((home / "audit" / "segments").glob("*.jsonl"))


def _by_writer(home: Path) -> list[list[Path]]:
    """Each writer's segments."""
    out: dict[str, list[Path]] = {}
    for p in _segments(home):
        out.setdefault(p.name.split(".")[0], []).append(p)
    return [out[w] for w in sorted(out)]


def _lone(home: Path) -> Path:
    """The newest writer's only segment."""
    (lone,) = next(m for m in _by_writer(home) if len(m) == 1)
    return lone


def _mutate(home: Path, rng: random.Random, kind: str) -> tuple[str, set[int] | None]:
    """Apply one mutation; return (segment file name, touched 1-based lines or None)."""
    segs = _segments(home)
    if kind == "drop_lone":
        # The newest writer's only segment: no chain runs past it.
        lone = _lone(home)
        os.unlink(lone)
        return lone.name, None
    if kind == "drop_writer":
        mine = rng.choice(_by_writer(home))
        for p in mine:
            os.unlink(p)
        return mine[0].name, None
    digest = home / "audit" / DIGEST
    if kind == "digest_delete":
        entries = digest.read_bytes().splitlines(keepends=True)
        i = rng.randrange(len(entries) - 1)  # the newest entry alone is a rollback
        del entries[i]
        digest.write_bytes(b"".join(entries))
        return DIGEST, {i + 1}
    if kind == "rollback":
        # Back to the state before the newest writer: its segment and its digest entries go.
        lone = _lone(home)
        os.unlink(lone)
        entries = digest.read_bytes().splitlines(keepends=True)
        assert all(lone.name.split(".")[0].encode() in e for e in entries[-2:])
        digest.write_bytes(b"".join(entries[:-2]))
        return DIGEST, None
    seg = rng.choice(segs)
    data = seg.read_bytes()
    lines = data.splitlines(keepends=True)
    n = len(lines)
    if kind == "flip":
        pos = rng.randrange(len(data))
        new = bytearray(data)
        new[pos] ^= rng.randint(1, 255)
        seg.write_bytes(bytes(new))
        line = data.count(b"\n", 0, pos) + 1
        return seg.name, {line}
    if kind == "delete":
        i = rng.randrange(n)
        del lines[i]
        seg.write_bytes(b"".join(lines))
        return seg.name, {i, i + 1}
    if kind == "reorder":
        i = rng.randrange(n)
        j = rng.choice([x for x in range(n) if x != i])
        lines[i], lines[j] = lines[j], lines[i]
        seg.write_bytes(b"".join(lines))
        return seg.name, {i + 1, j + 1}
    if kind == "duplicate":
        i = rng.randrange(n)
        j = rng.randrange(n + 1)
        lines.insert(j, lines[i])
        seg.write_bytes(b"".join(lines))
        return seg.name, {j + 1}
    if kind == "insert":
        # A real line of another segment (another writer's record, say) slipped in.
        other = rng.choice([s for s in segs if s != seg]).read_bytes().splitlines(keepends=True)
        j = rng.randrange(1, n + 1)
        lines.insert(j, rng.choice(other))
        seg.write_bytes(b"".join(lines))
        return seg.name, {j + 1}
    if kind == "rechain":
        # A forged record whose hash is chained correctly from the line before it, and every
        # later line re-chained too: only the keyed checkpoints can tell.
        j = rng.randrange(1, n)
        prev = split_hash(lines[j - 1].rstrip(b"\n"))
        assert prev is not None
        template = orjson.loads(lines[j])
        body = dict(template, summary="forged", seq=template.get("seq"))
        out = lines[:j]
        h = prev[1]
        for raw in [orjson.dumps(_without_h(body))] + [
            split_hash(x.rstrip(b"\n"))[0] for x in lines[j + 1 :]  # type: ignore[index]
        ]:
            h = chain_hash(h, raw)
            out.append(seal_line(raw, h))
        seg.write_bytes(b"".join(out))
        return seg.name, None  # found at the next keyed checkpoint, wherever that is
    if kind == "truncate":
        cut = rng.randrange(len(data))
        seg.write_bytes(data[:cut])
        return seg.name, None
    if kind == "cut_newest":
        # Erase a writer's newest segments and make the seal before them say "final",
        # re-chained without the key.
        mine = rng.choice([m for m in _by_writer(home) if len(m) > 1])
        keep = rng.randrange(len(mine) - 1)
        for s in mine[keep + 1 :]:
            os.unlink(s)
        kept = mine[keep]
        klines = kept.read_bytes().splitlines(keepends=True)
        seal = split_hash(klines[-1].rstrip(b"\n"))
        before = split_hash(klines[-2].rstrip(b"\n"))
        assert seal is not None and before is not None
        forged = dict(orjson.loads(seal[0]), final=True, reason="close")
        raw = orjson.dumps(forged)
        klines[-1] = seal_line(raw, chain_hash(before[1], raw))
        kept.write_bytes(b"".join(klines))
        return kept.name, {len(klines)}
    os.unlink(seg)
    return seg.name.replace(".live", ""), None


def _successor(name: str) -> str:
    if name == DIGEST:
        return name
    writer, n, rest = name.split(".", 2)
    return f"{writer}.{int(n) + 1:06d}.{rest}"


def _without_h(obj: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k != "h"}


def test_every_mutation_is_detected_and_located(pristine: Path, tmp_path: Path) -> None:
    rng = random.Random(int(os.environ.get("TOOLTRACE_TAMPER_SEED", "777")))
    runner = CliRunner()
    head = verify(pristine).head
    detected = 0
    located = 0
    misses: list[tuple[str, str, Any]] = []
    by_kind: Counter[str] = Counter()
    for i in range(MUTATIONS):
        kind = KINDS[i % len(KINDS)]
        home = tmp_path / f"m{i}"
        shutil.copytree(pristine, home)
        seg, touched = _mutate(home, rng, kind)
        expect = ["--expect", head] if kind == "rollback" else []
        res = runner.invoke(cli, ["verify", "--json", "--home", str(home), *expect],
                            catch_exceptions=False)
        report = orjson.loads(res.output)
        errors = [f for f in report["findings"] if f["severity"] == "error"]
        by_kind[kind] += 1
        if res.exit_code == 1 and errors:
            detected += 1
        else:
            misses.append((kind, seg, touched))
            continue
        here = [f for f in errors if f["segment"] == seg]
        # A changed last line breaks the link to the next segment: naming that boundary (the
        # successor's line 1) names the place too.
        nxt = _successor(seg)
        boundary = [f for f in errors if f["segment"] == nxt and f["line"] == 1]
        if (here or boundary) and (touched is None or boundary or any(
            f["line"] is not None and min(abs(f["line"] - t) for t in touched) <= 1
            for f in here
        )):
            located += 1
        else:
            misses.append((kind, seg, [(f["kind"], f["segment"], f["line"]) for f in errors]))
        shutil.rmtree(home)
    record("tamper", mutations=MUTATIONS, detected=detected, located=located,
           detected_pct=round(100 * detected / MUTATIONS, 2), **dict(by_kind))
    assert not misses, misses[:10]
    assert detected == located == MUTATIONS
    assert LONG or MUTATIONS >= 100


def test_newest_segments_erased_behind_a_forged_final_seal_are_caught(pristine: Path,
                                                                      tmp_path: Path) -> None:
    """Regression: checkpoint MACs cover the checkpoint's own fields, not only the chain head,
    so a seal turned ``final`` without the key cannot hide the segments deleted after it."""
    home = tmp_path / "cut"
    shutil.copytree(pristine, home)
    seg, _ = _mutate(home, random.Random(1), "cut_newest")
    erased = sorted({p.name for p in _segments(pristine)} - {p.name for p in _segments(home)})
    rep = verify(home)
    assert not rep.ok and erased
    # The forged seal, and each erased segment by name (the digest records them).
    assert [(f.kind, f.segment) for f in rep.findings if f.severity == "error"] == [
        ("rewritten", seg), *(("deleted", name) for name in erased)
    ]


def test_a_rollback_passes_from_inside_and_fails_against_the_kept_head(pristine: Path,
                                                                      tmp_path: Path) -> None:
    """What cannot be seen from inside the home: the newest writer's segment and digest
    entries removed together look like the state before that writer started."""
    home = tmp_path / "rolled"
    shutil.copytree(pristine, home)
    head = verify(pristine).head
    _mutate(home, random.Random(1), "rollback")
    assert verify(home).ok
    rep = verify(home, expect=head)
    assert [(f.kind, f.segment) for f in rep.findings] == [("rolledback", DIGEST)]
