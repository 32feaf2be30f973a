"""Today's call path with a feature's code taken out: what the events section compares with.

Call events and progress, snapshots before writes and nested calls each touch every call, even
one that uses none of them: a check that nobody listens, that the tool declares no ``writes``,
that the call has no parent; a few fields set on the call's context and builder. ``EDITS``
lists each of those places as the text that stands in tooltrace's source today and what
replaces it (usually nothing). ``strip(features)`` recompiles every function that any edit
touches from its current source, with the chosen features' edits applied, and installs the
result in this process (a bench worker's): the functions' modules and every module that
imported them, the classes for methods. So a contender runs the code of this checkout minus
exactly those lines, and ``strip(())`` (all the same functions recompiled, nothing removed) is
the control that shows what recompiling alone does.

An edit whose text is no longer in the source raises ``Stale``: the section then says the
feature was not measured, rather than measuring something else. Tool groups have no edit:
nothing on the call path reads a tool's group (the listing does, when asked for).

Only for Python source (the compiled call path cannot be recompiled here), and only in a
process of its own: the installed functions replace tooltrace's for the rest of the process.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import textwrap
from dataclasses import dataclass
from typing import Any

__all__ = ["EDITS", "FEATURES", "Edit", "Stale", "strip"]

#: The features whose call-path code can be taken out, and what each is called in tables.
FEATURES = {
    "events": "call events and progress",
    "snapshots": "snapshots before writes",
    "nested": "nested calls",
}


class Stale(Exception):
    """An edit's text is no longer in tooltrace's source (the code changed: update ``EDITS``)."""


@dataclass(frozen=True)
class Edit:
    """Replace ``old`` (exact text of the function's source, indentation included) by ``new``
    in ``target`` (``module:function`` or ``module:Class.method``) when ``feature`` is
    stripped. Edits of different features never overlap, so any set applies in any order."""

    feature: str
    target: str
    old: str
    new: str = ""


_S, _C, _R = "tooltrace.pipeline._stages", "tooltrace.runtime._context", "tooltrace.pipeline._record"
_D, _A, _F = "tooltrace.pipeline._drivers", "tooltrace.pipeline._authorize", "tooltrace.pipeline._result"
_H = "tooltrace.pipeline._eventhub"

EDITS: tuple[Edit, ...] = (
    # -- call events and progress: the hub's "does anyone listen" checks, the progress
    # report held back by the rate limit, and the context's progress fields.
    Edit("events", f"{_S}:pipeline",
         "    if ctx._pseq:  # the tool reported progress\n"
         "        keep_progress(b, ctx)\n"),
    Edit("events", f"{_S}:start", "        reg._hub,\n"),
    Edit("events", f"{_S}:start",
         "    if reg._hub.started:\n"
         "        reg._hub.call_started(ctx)\n"),
    Edit("events", f"{_C}:CallContext.__init__", "        hub: EventHub | None = None,\n"),
    Edit("events", f"{_C}:CallContext.__init__", "        self._hub = hub\n"),
    Edit("events", f"{_C}:CallContext.__init__",
         "        #: The progress reports kept for the record (bounded; None until the first).\n"
         "        self.marks: list[ProgressMark] | None = None\n"
         "        # How many reports the tool made; the rate limit's fields (``_pnext``, "
         "``_pending``)\n"
         "        # are set by the first report, so a call that reports none pays for them not "
         "at all.\n"
         "        self._pseq = 0\n"),
    Edit("events", f"{_R}:Builder.__init__",
         "        #: The progress marks the tool reported (set when it returns).\n"
         "        self.progress: tuple[ProgressMark, ...] = ()\n"),
    Edit("events", f"{_R}:Builder.envelope", "            self.progress,\n",
         "            (),\n"),
    Edit("events", f"{_S}:pipeline",
         "WatchedBuilder(reg, t_wall, t0) if reg._hub.step else Builder(reg, t_wall, t0)",
         "Builder(reg, t_wall, t0)"),
    Edit("events", f"{_R}:Builder.emit",
         "        if reg._hub.finished:\n"
         "            reg._hub.call_finished(rec)\n"),
    # -- snapshots before writes: the check that the tool declares no ``writes``, the refusal
    # when a file cannot be kept, the after-read, and the context's field.
    Edit("snapshots", f"{_S}:pipeline",
         ", args)\n"
         "        if ctx is None:  # a file it writes could not be snapshotted safely\n"
         "            return b.refused()\n", ")\n"),
    Edit("snapshots", f"{_S}:start", "    args: Mapping[str, Any] | None = None,\n"),
    Edit("snapshots", f"{_S}:start",
         "    if d.writes and args is not None:\n"
         "        taken = snapshot_before(reg, b, d, args)\n"
         "        if taken is None:\n"
         "            return None\n"
         "        if taken:\n"
         "            ctx.snapshots = {s.param: s for s in taken}\n"
         "        ctx.start_clock()  # the deadline counts from after the snapshot, as for any "
         "tool\n"),
    Edit("snapshots", f"{_F}:finish",
         "    if ctx.snapshots:\n"
         "        snapshot_after(reg, b, d.name, tuple(ctx.snapshots.values()), "
         "out.kind != \"abandoned\")\n"),
    Edit("snapshots", f"{_C}:CallContext.__init__",
         "        #: The files the registry snapshotted before the call, by argument (set by the\n"
         "        #: registry for a tool that declares ``writes``): a writer checks it replaces "
         "the\n"
         "        #: very file that was snapshotted.\n"
         "        self.snapshots: Mapping[str, FileSnapshot] | None = None\n"),
    # -- nested calls: the parent threaded through the drivers and the pipeline, the depth
    # check, the parent's deadline and cancel, and the fields of the builder and context.
    Edit("nested", f"{_D}:boxed", "    parent: CallContext | None = None,\n"),
    Edit("nested", f"{_D}:boxed", "pipeline(reg, raw, True, parent)", "pipeline(reg, raw, True)"),
    Edit("nested", f"{_D}:run", ", parent: CallContext | None = None\n        )", ")"),
    Edit("nested", f"{_D}:run", "boxed(reg, raw, box, parent)", "boxed(reg, raw, box)"),
    Edit("nested", f"{_D}:arun", ", parent: CallContext | None = None\n               )", ")"),
    Edit("nested", f"{_D}:arun", "pipeline(reg, raw, False, parent)",
         "pipeline(reg, raw, False)"),
    Edit("nested", f"{_S}:pipeline", ", parent: CallContext | None = None\n", "\n"),
    Edit("nested", f"{_S}:pipeline",
         "    entry = resolve(reg, b, untyped.name) if not parent else "
         "nested(reg, b, parent, untyped.name)\n",
         "    entry = resolve(reg, b, untyped.name)\n"),
    Edit("nested", f"{_S}:pipeline", "d.background, parent", "d.background"),
    Edit("nested", f"{_S}:start", "    parent: CallContext | None = None,\n"),
    Edit("nested", f"{_S}:start",
         "    if parent is not None:\n"
         "        nest(ctx, parent, b)\n"),
    Edit("nested", f"{_S}:start", "        b.mode,\n"),
    Edit("nested", f"{_S}:start", "    ctx._span = span\n"),
    Edit("nested", f"{_A}:authorize",
         "    if b.depth > reg.max_depth:\n"
         "        why = f\"nested {b.depth} calls deep; the maximum is {reg.max_depth}\"\n"
         "        detail = {\"reason\": why, \"depth\": b.depth, \"parent_tool\": b.parent_tool}\n"
         "        b.step(StepName.POLICY, t, \"policy:max_depth\", \"deny\", detail)\n"
         "        return b.reject(Stage.POLICY, f\"denied by policy rule max_depth: {why}\", "
         "d.name)\n"),
    Edit("nested", f"{_A}:authorize", "resolved, b.depth, b.parent_tool, b.principal",
         "resolved, 0, None, b.principal"),
    Edit("nested", f"{_C}:CallContext.__init__",
         "        mode: str = \"default\",\n"
         "        depth: int = 0,\n"
         "        parent_call_id: str | None = None,\n"),
    Edit("nested", f"{_C}:CallContext.__init__",
         "        #: The mode the call runs in (a nested call runs in the same one).\n"
         "        self.mode = mode\n"
         "        #: 0 for a call from outside any tool, 1 for a call a tool made, and so on.\n"
         "        self.depth = depth\n"
         "        #: The call whose tool made this one (``call``/``acall``), or None.\n"
         "        self.parent_call_id = parent_call_id\n"),
    Edit("nested", f"{_C}:CallContext.__init__",
         "        #: The call's span, made current around a nested call's start (set by the "
         "registry).\n"
         "        self._span: OpenSpan | None = None\n"),
    Edit("nested", f"{_R}:Builder.__init__",
         "        #: Nesting: 0 and None unless a tool made this call through its context.\n"
         "        self.depth = 0\n"
         "        self.parent_call_id: str | None = None\n"
         "        self.parent_tool: str | None = None\n"),
    # (Off the path of a call nobody listens to: keeps a subscriber working without them.)
    Edit("nested", f"{_H}:EventHub.call_started",
         "ctx.mode,\n            ctx.parent_call_id, ctx.depth))", "\"default\", None, 0))"),
    Edit("nested", f"{_R}:Builder.envelope",
         "            self.parent_call_id,\n"
         "            self.depth,\n",
         "            None,\n"
         "            0,\n"),
)

# Recompiled as their modules were: annotations stay unevaluated strings.
_FLAGS = importlib.import_module("__future__").annotations.compiler_flag


def _locate(target: str) -> tuple[Any, type | None, str, Any]:
    """(module, class or None, name, current function) of ``module:function`` or
    ``module:Class.method``."""
    mod_name, _, qual = target.partition(":")
    mod = importlib.import_module(mod_name)
    cls_name, _, name = qual.rpartition(".")
    owner: Any = getattr(mod, cls_name) if cls_name else mod
    fn = owner.__dict__[name] if cls_name else getattr(mod, name)
    if not hasattr(fn, "__code__"):
        raise Stale(f"{target} is compiled: strip() needs the call path's Python source")
    return mod, owner if cls_name else None, name, fn


def edited_sources(features: tuple[str, ...] | frozenset[str]) -> dict[str, str]:
    """Each touched function's current source with the chosen features' edits applied."""
    unknown = set(features) - set(FEATURES)
    if unknown:
        raise ValueError(f"unknown features: {sorted(unknown)}; known: {sorted(FEATURES)}")
    out: dict[str, str] = {}
    for e in EDITS:
        if e.target not in out:
            out[e.target] = inspect.getsource(_locate(e.target)[3])
    for e in EDITS:
        if e.feature not in features:
            continue
        src = out[e.target]
        hits = src.count(e.old)
        if hits != 1:
            raise Stale(f"{e.feature}: {e.target} holds {hits} copies of {e.old!r} (want 1)")
        out[e.target] = src.replace(e.old, e.new)
    return out


def strip(features: tuple[str, ...] | frozenset[str]) -> dict[str, str]:
    """Install, in this process, every touched function recompiled with ``features``' code
    taken out (none: the control); return the sources installed, by target."""
    sources = edited_sources(features)
    swaps: dict[int, Any] = {}
    for target, src in sources.items():
        mod, cls, name, old = _locate(target)
        # Tracebacks point at the function's place in its file (lines after an edit shift).
        padded = "\n" * (inspect.getsourcelines(old)[1] - 1) + textwrap.dedent(src)
        code = compile(padded, mod.__file__, "exec", flags=_FLAGS, dont_inherit=True)
        ns: dict[str, Any] = {}
        exec(code, mod.__dict__, ns)  # the module's globals: later swaps are seen too
        new = ns[name]
        if cls is not None:
            setattr(cls, name, new)
        else:
            swaps[id(old)] = (old, new)
    # A module-level function is also bound in every module that imported it by name.
    for mod in list(sys.modules.values()):
        if not (getattr(mod, "__name__", "") or "").startswith("tooltrace"):
            continue
        d = vars(mod)
        for key, value in list(d.items()):
            hit = swaps.get(id(value))
            if hit is not None and hit[0] is value:
                d[key] = hit[1]
    return sources
