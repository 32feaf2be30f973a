"""Shared fixtures: a scratch workspace with real files and a registry over it, the path-race
fixtures of ``support.paths`` (``tree``, ``racing``, ``flipper``) and the archive servers."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from support.paths import flipper, racing, tree  # noqa: F401 (fixtures for every test module)

from tooltrace import ToolRegistry
from tooltrace.builtins import register_builtins
from tooltrace.testing import RecordingSink

if TYPE_CHECKING:
    from support.archive import MotoS3, Postgres


def pytest_configure(config: pytest.Config) -> None:
    """Default homes (``tooltrace._settings.default_home``) go to a scratch state directory for
    the whole run, subprocesses included, never to the user's own ``~/.local/state``."""
    os.environ["XDG_STATE_HOME"] = tempfile.mkdtemp(prefix="tooltrace-test-state-")


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A workspace directory (``<tmp>/ws``) with a few files, and a secret file beside it."""
    ws = tmp_path / "ws"
    (ws / "notes").mkdir(parents=True)
    (ws / "notes" / "a.txt").write_text("alpha\n")
    (ws / "hello.txt").write_text("hello world\n")
    (tmp_path / "secret.txt").write_text("TOP SECRET outside the workspace\n")
    return ws


@pytest.fixture
def sink() -> RecordingSink:
    """An in-memory sink."""
    return RecordingSink()


@pytest.fixture
def registry(workspace: Path, tmp_path: Path, sink: RecordingSink) -> Iterator[ToolRegistry]:
    """A registry with the built-in tools over ``workspace``, recording into ``sink``."""
    reg = ToolRegistry(workspace=workspace, home=tmp_path / "home", sinks=[sink],
                       cancel_grace_s=0.3)
    register_builtins(reg)
    yield reg
    reg.shutdown(timeout_s=2.0)


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[MotoS3, Postgres]]:
    """A real S3 (moto) and PostgreSQL on loopback for one archive test module."""
    from support.archive import MotoS3, Postgres

    s3 = MotoS3().start()
    pg = Postgres().start()
    yield s3, pg
    pg.stop()
    s3.stop()
