"""Runtime: the call context tools see, admission (concurrency caps and a bounded queue), and
the worker pools and event loop tools run on.

The tool layer, not the agent loop, knows each operation best: a tool's definition declares its
default timeout, whether it can be cancelled and whether it has side effects. The runtime turns a
deadline or a cancel request into a *signal* (``CallContext``) and waits a bounded grace period
for the tool to confirm it stopped; what happens then is decided by the registry from the tool's
``effect`` (see ``tooltrace.registry``).

The public names live in private modules: ``CallContext`` in ``tooltrace._context``, admission in
``tooltrace._admission``, the executors (``ToolThreads``, ``Job``, ``LoopThread``) in
``tooltrace._executors``; the command sandbox (``choose_sandbox`` and what it works with) in
``tooltrace._sandbox``, loaded on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._admission import Admission, AdmissionResult
from ._context import CallContext
from ._current import current_context
from ._lazy import lazy_exports
from .exceptions import SandboxUnavailableError

if TYPE_CHECKING:
    from ._sandbox import SANDBOX_MODES as SANDBOX_MODES
    from ._sandbox import CommandSandbox as CommandSandbox
    from ._sandbox import Grants as Grants
    from ._sandbox import Launch as Launch
    from ._sandbox import choose_sandbox as choose_sandbox
    from ._sandbox import landlock_abi as landlock_abi
    from ._sandbox import sandbox_label as sandbox_label

# The executors are importable from here too (not part of ``__all__``).
from ._executors import Job as Job
from ._executors import LoopThread as LoopThread
from ._executors import ToolThreads as ToolThreads
from ._executors import make_pool as make_pool

_SANDBOX = ("SANDBOX_MODES", "CommandSandbox", "Grants", "Launch", "choose_sandbox",
            "landlock_abi", "sandbox_label")
# The sandbox loads ctypes: only commands need it.
__getattr__, __dir__ = lazy_exports("tooltrace", dict.fromkeys(_SANDBOX, "._sandbox"), globals())

__all__ = ["Admission", "AdmissionResult", "CallContext", "SandboxUnavailableError",
           "current_context", *_SANDBOX]
