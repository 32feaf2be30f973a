"""Identifiers: time-ordered call ids (UUIDv7) and W3C trace ids."""

from __future__ import annotations

import uuid_utils

from . import _settings

__all__ = ["CLOCK_SKEW_S", "id_prefix", "id_time_ms", "new_call_id", "new_run_id"]

#: How far the clock of whoever made a call id may run ahead of this host's: time-based
#: shortcuts about an id (skipping old segments, trusting memory for new ids) allow this much.
CLOCK_SKEW_S = 300.0


def new_call_id() -> str:
    """A UUIDv7 string: time-ordered, so lookups among millions prune by range."""
    return str(uuid_utils.uuid7())


def new_run_id() -> str:
    """A run id: ``TOOLTRACE_RUN_ID`` when set, else a fresh UUIDv7."""
    return _settings.run_id() or str(uuid_utils.uuid7())


def id_time_ms(call_id: str) -> int | None:
    """The milliseconds a UUIDv7 call id (lowercase string) was made at; None for any other
    kind of UUID."""
    if len(call_id) != 36 or call_id[14] != "7":
        return None
    try:
        return int(call_id[:8] + call_id[9:13], 16)
    except ValueError:
        return None


def id_prefix(seconds: float) -> str:
    """The first 13 characters of a UUIDv7 string made at ``seconds`` (Unix time): call ids
    compare with it as their times do."""
    ms = f"{int(seconds * 1000):012x}"
    return f"{ms[:8]}-{ms[8:]}"
