"""Runtime: the call context tools see, admission (concurrency caps and a bounded queue), and
the worker pools and event loop tools run on.

The tool layer, not the agent loop, knows each operation best: a tool's definition declares its
default timeout, whether it can be cancelled and whether it has side effects. The runtime turns a
deadline or a cancel request into a *signal* (``CallContext``) and waits a bounded grace period
for the tool to confirm it stopped; what happens then is decided by the registry from the tool's
``effect`` (see ``tooltrace.registry``).

The public names live in private modules: ``CallContext`` in ``tooltrace._context``, admission in
``tooltrace._admission``, the executors (``ToolThreads``, ``Job``, ``LoopThread``) in
``tooltrace._executors``.
"""

from __future__ import annotations

from ._admission import Admission, AdmissionResult
from ._context import CallContext
from ._current import current_context

# The executors are importable from here too (not part of ``__all__``).
from ._executors import Job as Job
from ._executors import LoopThread as LoopThread
from ._executors import ToolThreads as ToolThreads
from ._executors import make_pool as make_pool

__all__ = ["Admission", "AdmissionResult", "CallContext", "current_context"]
