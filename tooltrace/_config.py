"""Settings: an explicit argument wins over a ``TOOLTRACE_*`` environment variable, which wins
over the default. Every variable tooltrace reads is a documented constant here; values are read
when an object is built, never at import time.
"""

from __future__ import annotations

import os
from pathlib import Path

from .exceptions import ConfigurationError

__all__ = [
    "TOOLTRACE_APPROVAL",
    "TOOLTRACE_HOME",
    "TOOLTRACE_MAX_TIMEOUT_S",
    "TOOLTRACE_RUN_ID",
    "env_float",
    "resolve_home",
]

#: Directory for audit segments, artifacts and keys. Default: ``.tooltrace`` under the cwd.
TOOLTRACE_HOME = "TOOLTRACE_HOME"
#: Run id stamped on calls that do not carry one. Default: a fresh UUIDv7 per registry.
TOOLTRACE_RUN_ID = "TOOLTRACE_RUN_ID"
#: Upper bound, in seconds, on any per-call deadline override. Default: 600.
TOOLTRACE_MAX_TIMEOUT_S = "TOOLTRACE_MAX_TIMEOUT_S"
#: ``deny`` (default) or ``allow``: what an ``ask`` policy verdict becomes with no approver.
TOOLTRACE_APPROVAL = "TOOLTRACE_APPROVAL"


def resolve_home(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The tooltrace home: explicit argument > ``TOOLTRACE_HOME`` > ``./.tooltrace``."""
    if explicit is not None:
        return Path(explicit)
    env = os.environ.get(TOOLTRACE_HOME)
    return Path(env) if env else Path.cwd() / ".tooltrace"


def env_float(name: str, explicit: float | None, default: float) -> float:
    """A positive float setting: explicit argument > environment variable ``name`` > default."""
    if explicit is not None:
        value = explicit
    else:
        raw = os.environ.get(name)
        if raw is None or raw == "":
            return default
        try:
            value = float(raw)
        except ValueError:
            raise ConfigurationError(
                f"{name} must be a number of seconds, got {raw[:40]!r}"
            ) from None
    if not value > 0:
        raise ConfigurationError(f"{name} must be positive, got {value}")
    return value
