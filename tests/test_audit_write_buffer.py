"""The audit writer's one reused write buffer: batches larger than the buffer, lines larger than
the buffer and a batch whose records fail half-way all leave a chain that verifies, with the
same bytes a line built on its own would have, and the buffer is never reallocated."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from tooltrace.audit import _writer, verify
from tooltrace.audit._format import chain_hash, load_key, seal_line, split_hash
from tooltrace.audit._writer import SegmentWriter


def _writer_in(home: Path, **kw: object) -> SegmentWriter:
    key = load_key(home, create=True)
    assert key is not None
    return SegmentWriter(home / "audit", key, **kw)  # type: ignore[arg-type]


def _lines(home: Path) -> list[bytes]:
    out: list[bytes] = []
    for p in sorted((home / "audit" / "segments").glob("*.jsonl")):
        out += p.read_bytes().splitlines()
    return out


def _rec(i: int, pad: int = 40) -> bytes:
    return orjson.dumps({"k": "c", "call_id": f"c{i:06d}", "pad": "x" * pad})


@pytest.fixture
def small_buffer(monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(_writer, "WRITE_BUFFER", 4096)
    return 4096


def test_batches_and_lines_larger_than_the_buffer_chain_and_verify(
    tmp_path: Path, small_buffer: int
) -> None:
    w = _writer_in(tmp_path, checkpoint_every=50)
    # A batch of ~40 buffers' worth, with lines of 3x the buffer in the middle of it.
    recs = [_rec(i, pad=small_buffer * 3 if i % 97 == 5 else 60) for i in range(2000)]
    with w.lock:
        w.append(iter(recs), [f"c{i:06d}" for i in range(2000)], durable=False)
        w.close()
    lines = _lines(tmp_path)
    calls = [orjson.loads(x) for x in lines if x.startswith(b'{"k":"c"')]
    assert [c["call_id"] for c in calls] == [f"c{i:06d}" for i in range(2000)]
    assert [c["seq"] for c in calls] == sorted(c["seq"] for c in calls)
    assert len([x for x in lines if x.startswith(b'{"k":"ckpt"')]) == 2000 // 50
    # Each line is exactly what seal_line(chain_hash(...)) builds from the previous hash.
    prev = None
    for raw in lines:
        parts = split_hash(raw)
        assert parts is not None
        body, h = parts
        if prev is not None:
            assert seal_line(body, chain_hash(prev, body)) == raw + b"\n"
        prev = h
    rep = verify(tmp_path)
    assert rep.ok and rep.records == 2000, rep.findings


def test_a_batch_failing_half_way_leaves_nothing_of_it_on_disk(
    tmp_path: Path, small_buffer: int
) -> None:
    w = _writer_in(tmp_path)
    with w.lock:
        w.append([_rec(i) for i in range(10)], [f"c{i:06d}" for i in range(10)], durable=True)
    seg = next((tmp_path / "audit" / "segments").glob("*.jsonl"))
    size, seq = seg.stat().st_size, w.seq

    def failing() -> Iterator[bytes]:
        for i in range(10, 1000):
            if i == 600:  # well past several buffer writes
                raise ValueError("record could not be encoded")
            yield _rec(i)

    with w.lock, pytest.raises(ValueError):
        w.append(failing(), [f"c{i:06d}" for i in range(10, 1000)], durable=False)
    assert seg.stat().st_size == size and w.seq == seq
    with w.lock:
        w.append([_rec(i) for i in range(1000, 1010)], [f"c{i:06d}" for i in range(1000, 1010)],
                 durable=False)
        w.close()
    ids = [orjson.loads(x)["call_id"] for x in _lines(tmp_path) if x.startswith(b'{"k":"c"')]
    assert ids == [f"c{i:06d}" for i in (*range(10), *range(1000, 1010))]
    rep = verify(tmp_path)
    assert rep.ok and rep.records == 20, rep.findings


def test_the_write_buffer_is_allocated_once_and_reused(tmp_path: Path) -> None:
    w = _writer_in(tmp_path)
    with w.lock:
        w.append([_rec(0)], ["c000000"], durable=False)
    buf = w._buf
    assert buf is not None and len(buf) == _writer.WRITE_BUFFER
    for k in range(5):
        batch = [_rec(i, pad=900) for i in range(k * 3000, (k + 1) * 3000)]  # ~3 MiB each
        with w.lock:
            w.append(batch, [f"c{i:06d}" for i in range(k * 3000, (k + 1) * 3000)],
                     durable=False)
        assert w._buf is buf and len(buf) == _writer.WRITE_BUFFER
    with w.lock:
        w.close()
    rep = verify(tmp_path)
    assert rep.ok and rep.records == 15001, rep.findings


def test_every_write_ends_at_the_end_of_a_line(
    tmp_path: Path, small_buffer: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    writes: list[bytes] = []
    real = _writer.write_all

    def recording(fd: int, data: bytes | bytearray | memoryview) -> None:
        writes.append(bytes(data))
        real(fd, data)

    monkeypatch.setattr(_writer, "write_all", recording)
    w = _writer_in(tmp_path)
    recs = [_rec(i, pad=small_buffer * 2 if i % 50 == 7 else (i * 37) % 700) for i in range(600)]
    with w.lock:
        w.append(recs, [f"c{i:06d}" for i in range(600)], durable=False)
        w.close()
    assert len(writes) > 20  # the batch went out in many buffer-sized writes
    assert all(d.endswith(b"\n") for d in writes)
    assert all(len(d) <= small_buffer for d in writes if d.count(b"\n") > 1)
    rep = verify(tmp_path)
    assert rep.ok and rep.records == 600, rep.findings
