"""Identifiers: time-ordered call ids (UUIDv7) and W3C trace ids."""

from __future__ import annotations

import uuid_utils

from . import _settings

__all__ = ["new_call_id", "new_run_id"]


def new_call_id() -> str:
    """A UUIDv7 string: time-ordered, so lookups among millions prune by range."""
    return str(uuid_utils.uuid7())


def new_run_id() -> str:
    """A run id: ``TOOLTRACE_RUN_ID`` when set, else a fresh UUIDv7."""
    return _settings.run_id() or str(uuid_utils.uuid7())
