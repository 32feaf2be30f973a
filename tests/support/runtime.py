"""Helpers shared by the runtime, built-in and job tests: /proc scans and polling."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any


def proc_stat(pid: int) -> tuple[str, int, int, int] | None:
    """(state, ppid, pgrp, session) of a process, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read()
    except OSError:
        return None
    rest = raw[raw.rfind(b")") + 2 :].split()
    return rest[0].decode(), int(rest[1]), int(rest[2]), int(rest[3])


def live_in_group(pgid: int) -> list[int]:
    """Pids of live (not zombie) processes whose process group or session is ``pgid``."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        st = proc_stat(int(entry))
        if st is not None and st[0] not in ("Z", "X") and pgid in (st[2], st[3]):
            out.append(int(entry))
    return out


def live_with_marker(marker: str) -> list[int]:
    """Pids of live processes whose environment holds ``TT_TEST_MARK=<marker>``."""
    needle = f"TT_TEST_MARK={marker}".encode()
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                env = fh.read()
        except OSError:
            continue
        if needle in env.split(b"\x00"):
            st = proc_stat(int(entry))
            if st is not None and st[0] not in ("Z", "X"):
                out.append(int(entry))
    return out


def wait_for(pred: Callable[[], Any], timeout_s: float = 10.0, what: str = "condition") -> Any:
    """Poll ``pred`` until it returns something truthy; fail after ``timeout_s``."""
    end = time.monotonic() + timeout_s
    pause = 0.001
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(pause)
        pause = min(pause * 2, 0.02)
