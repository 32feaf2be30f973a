"""Files written whole (``tooltrace._files``): a file is created or replaced complete or not at
all, and no temporary file is left behind either way."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tooltrace._files import create_whole, replace_whole, replace_written


def test_replace_whole_replaces_the_file_and_leaves_nothing_beside_it(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    replace_whole(path, b"one")
    replace_whole(path, b"two" * 100_000, mode=0o600)
    assert path.read_bytes() == b"two" * 100_000
    assert path.stat().st_mode & 0o777 == 0o600 & ~_umask()
    assert os.listdir(tmp_path) == ["state.json"]


def test_a_writer_that_fails_leaves_the_old_file_and_no_temporary_one(tmp_path: Path) -> None:
    path = tmp_path / "table.parquet"
    path.write_bytes(b"old")

    def half(tmp: Path) -> None:
        tmp.write_bytes(b"ne")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        replace_written(path, half)
    assert path.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["table.parquet"]


def test_replace_written_renames_what_the_writer_made(tmp_path: Path) -> None:
    path = tmp_path / "out.json"
    replace_written(path, lambda tmp: tmp.write_text("{}"))
    assert path.read_text() == "{}"
    assert os.listdir(tmp_path) == ["out.json"]


def test_create_whole_keeps_the_first_creators_content(tmp_path: Path) -> None:
    path = tmp_path / "key"
    assert create_whole(path, b"first", 0o600)
    assert not create_whole(path, b"second", 0o600)
    assert path.read_bytes() == b"first"
    assert os.listdir(tmp_path) == ["key"]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
