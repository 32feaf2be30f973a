"""The call context of the running tool call (kept in Python: its docstring is the API's)."""

from __future__ import annotations

import contextvars
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from . import CallContext

__all__ = ["current_context"]

CURRENT_CONTEXT: contextvars.ContextVar[CallContext | None] = contextvars.ContextVar(
    "tooltrace_call_context", default=None
)


def current_context() -> CallContext | None:
    """The ``CallContext`` of the tool call running in this context, if any."""
    return CURRENT_CONTEXT.get()
