"""Runtime: the call context tools see, admission (concurrency caps and a bounded queue), and
the worker pools and event loop tools run on.

The tool layer, not the agent loop, knows each operation best: a tool's definition declares its
default timeout, whether it can be cancelled and whether it has side effects. The runtime turns a
deadline or a cancel request into a *signal* (``CallContext``) and waits a bounded grace period
for the tool to confirm it stopped; what happens then is decided by the registry from the tool's
``effect`` (see ``tooltrace.registry``).

The public names live in private modules: ``CallContext`` in ``_context``, admission in
``_admission``, the executors (``ToolThreads``, ``Job``, ``LoopThread``) in ``_executors``; the
command sandbox (``choose_sandbox`` and what it works with) in ``_sandbox``, loaded on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from .._lazy import lazy_exports
from ..exceptions import SandboxUnavailableError
from ._admission import Admission, AdmissionResult
from ._context import CallContext
from ._current import current_context

if TYPE_CHECKING:
    from ._sandbox import CommandSandbox as CommandSandbox
    from ._sandbox import Grants as Grants
    from ._sandbox import Launch as Launch
    from ._sandbox import choose_sandbox as choose_sandbox
    from ._sandbox import landlock_abi as landlock_abi
    from ._sandbox import sandbox_label as sandbox_label

# What the pipeline uses of the runtime (not part of ``__all__``).
from ._context import MAX_MARKS as MAX_MARKS
from ._context import MESSAGE_CHARS as MESSAGE_CHARS
from ._context import CallHost as CallHost
from ._context import keep_marks as keep_marks
from ._current import CURRENT_CONTEXT as CURRENT_CONTEXT
from ._executors import Job as Job
from ._executors import LoopThread as LoopThread
from ._executors import RenewablePool as RenewablePool
from ._executors import ToolThreads as ToolThreads
from ._executors import make_pool as make_pool
from ._executors import release_quietly as release_quietly
from ._executors import resolve_future as resolve_future

#: The command sandbox's modes (``[commands] sandbox``, ``CommandConfig.sandbox``).
SANDBOX_MODES: Final = ("auto", "landlock", "bwrap", "off")

_SANDBOX = ("CommandSandbox", "Grants", "Launch", "choose_sandbox",
            "landlock_abi", "sandbox_label")
# The sandbox loads ctypes: only commands need it.
__getattr__, __dir__ = lazy_exports(__name__, dict.fromkeys(_SANDBOX, "._sandbox"), globals())

__all__ = ["SANDBOX_MODES", "Admission", "AdmissionResult", "CallContext",
           "SandboxUnavailableError", "current_context", *_SANDBOX]
