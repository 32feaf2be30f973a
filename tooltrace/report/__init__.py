"""Post-mortem reports of a call or a run, as one self-contained HTML page or as Markdown.

``build_call_report(store, call_id)`` / ``build_run_report(store, run_id)`` gather a ``Report``
from the audit trail (an ``AuditStore``): a timeline of the steps drawn to scale, who decided
each step, what each hook changed in the arguments, artifacts with their sha256, the other
calls of the run, and a link to the trace built from ``TOOLTRACE_TRACE_URL``. Every text that
came from a call goes through the default redactor once more. ``render_html`` lays it out as a
page that loads nothing (inline style and SVG, no script, a Content Security Policy of
``default-src 'none'``); ``render_markdown`` as text to paste. ``tooltrace report`` is the CLI.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._html import render_html
    from ._markdown import render_markdown
    from ._model import (
        ArtifactRow,
        CallReport,
        HookRow,
        NeighbourRow,
        Report,
        StepRow,
        build_call_report,
        build_run_report,
        trace_link,
    )

__all__ = [
    "ArtifactRow",
    "CallReport",
    "HookRow",
    "NeighbourRow",
    "Report",
    "StepRow",
    "build_call_report",
    "build_run_report",
    "render_html",
    "render_markdown",
    "trace_link",
]

from .._lazy import lazy_exports

_LAZY = {
    "ArtifactRow": "_model",
    "CallReport": "_model",
    "HookRow": "_model",
    "NeighbourRow": "_model",
    "Report": "_model",
    "StepRow": "_model",
    "build_call_report": "_model",
    "build_run_report": "_model",
    "trace_link": "_model",
    "render_html": "_html",
    "render_markdown": "_markdown",
}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
