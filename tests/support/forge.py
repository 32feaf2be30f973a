"""What an attacker on the host can do to a trail: write a small trail with approvals, and
rewrite a trail whole with the audit key (and, if given, a signing key of their own), so that
every hash chain, keyed MAC, signature and digest entry holds again. Holds no tests itself."""

from __future__ import annotations

import collections
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from support.audit import workload
from tooltrace._ids import new_call_id
from tooltrace.audit import Signer, append_digest, list_segments, read_digest, signing_key_path
from tooltrace.audit._format import chain_hash, checkpoint_mac, genesis_hash, seal_line, split_hash
from tooltrace.audit._manifest import digest_path
from tooltrace.sinks import ApprovalRecord
from tooltrace.telemetry import AuditSink

__all__ = ["approval", "install_key", "reforge", "write_trail"]


def approval(i: int) -> ApprovalRecord:
    """An approver's answer (the audit sink writes it as a signed line of its own)."""
    now = time.time_ns() // 1000
    return ApprovalRecord(approval_id=new_call_id(), call_id=new_call_id(), run_id="run-a",
                          tool="write_text", rule="ask_writes", approved=i % 2 == 0,
                          who="alice", reason="looks fine", args_sha256="ab" * 32, at_us=now,
                          expires_at_us=now + 60_000_000, arguments={"path": f"f{i}.txt"})


def write_trail(home: Path, writers: int = 3, n: int = 60, *, approvals: int = 2,
                seg_bytes: int = 25_000) -> list[str]:
    """Write ``writers`` writers' trails (one after the other, as separate processes would)
    with small segments and frequent checkpoints; return the writer ids."""
    ids = []
    for w in range(writers):
        sink = AuditSink(home, checkpoint_every=10, segment_max_bytes=seg_bytes,
                         group_max_records=8)
        for i, r in enumerate(workload(n, seed=100 + w)):
            sink.emit(r)
            if i % 25 == 3 and approvals:
                sink.emit_approval(approval(i))
        sink.shutdown()
        assert sink.writer_id is not None and sink.dropped == 0
        ids.append(sink.writer_id)
    return ids


Edit = Callable[[str, int, dict[str, Any]], dict[str, Any]]


def reforge(home: Path, key: bytes, signer: Signer | None, edit: Edit | None = None) -> None:
    """Rewrite every segment of ``home`` (``edit(writer, seq, fields)`` may change any line),
    re-chain every writer's lines, recompute every checkpoint's MAC with ``key`` and re-sign
    every signed line with ``signer`` (None: keep the old signatures, which no longer hold),
    then rebuild the digest to match, chained and keyed (and signed)."""
    adir = home / "audit"
    by_writer = collections.defaultdict(list)
    for info in list_segments(adir):
        by_writer[info.writer].append(info)
    last_h: dict[tuple[str, int], str] = {}
    for writer, infos in by_writer.items():
        prev = genesis_hash(writer)
        for info in sorted(infos, key=lambda i: i.n):
            out = []
            for raw in info.path.read_bytes().splitlines():
                sp = split_hash(raw)
                assert sp is not None
                obj = orjson.loads(sp[0])
                seq = obj["seq"]
                if edit is not None:
                    obj = edit(writer, seq, obj)
                k = obj.get("k")
                if k in ("ckpt", "seal", "a"):
                    obj["head"] = prev
                    if signer is not None:
                        obj.pop("sig", None)
                        obj.pop("mac", None)
                        signer.sign_line(writer, info.n, seq, obj)
                    if k != "a":
                        obj["mac"] = checkpoint_mac(key, writer, info.n, seq, prev, obj)
                body = orjson.dumps(obj)
                prev = chain_hash(prev, body)
                out.append(seal_line(body, prev))
            info.path.write_bytes(b"".join(out))
            last_h[(writer, info.n)] = prev
    entries = []
    for ln in read_digest(adir).lines:
        e = {k: v for k, v in ln.obj.items() if k not in ("ts", "mac", "sig", "kid", "seq", "h")}
        if "last_h" in e and (ln.writer, ln.n) in last_h:
            e["last_h"] = last_h[(ln.writer, ln.n)]
        entries.append(e)
    os.unlink(digest_path(adir))
    append_digest(adir, key, entries, signer=signer)


def install_key(home: Path, other: Path) -> None:
    """Put ``other`` home's signing key (private key and ``.pub``) in place of ``home``'s."""
    src, dst = signing_key_path(other), signing_key_path(home)
    for a, b in ((src, dst), (src.with_name(src.name + ".pub"), dst.with_name(dst.name + ".pub"))):
        b.write_bytes(a.read_bytes())
