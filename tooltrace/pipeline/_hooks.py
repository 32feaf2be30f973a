"""The hook stages: pre-hooks before admission, post-hooks on the finished result.

A hook's output is untrusted like model output. Hooks see redacted arguments; a pre-hook may
continue, warn, block or modify, and a modification is re-validated against the schema and
re-authorised (a path may only narrow); it can never swap the tool or switch the mode. A
post-hook may withhold or replace an ``ok`` result, or annotate. A required hook that fails or
times out blocks; any other only warns. Each hook runs through the driver (``RunHook``).
"""

from __future__ import annotations

import time
from collections.abc import Generator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from ..hooks import Hook, HookAction, HookDecision, HookView
from ..model import Entry, Stage, Status, StepName, ToolDefinition, ToolResultEnvelope
from ._authorize import Approve, approve, authorize
from ._record import Builder, detached, error_text, redact_args, redact_detail, scrub

if TYPE_CHECKING:
    from ._environment import Environment

__all__ = ["RunHook", "arguments_diff", "post_hooks", "pre_hooks"]


@dataclass(slots=True)
class RunHook:
    """Run one hook on a view of the call (the operation the pipeline yields to its driver)."""

    hook: Hook
    view: HookView


def pre_hooks(
    env: Environment, b: Builder, entry: Entry, args: dict[str, Any], mode: str
) -> Generator[RunHook | Approve, Any, dict[str, Any] | None]:
    """Each pre-hook that applies, in order; the arguments to run with, None if refused."""
    d = entry.definition
    hook_args: Any = None  # the redacted arguments hooks see, made once per version of them
    for h in env.pre_hooks:
        if not h.applies_to(d.name):
            continue
        if hook_args is None:
            hook_args = redact_args(env, args)
        view = _view(b, d, hook_args)
        t = time.perf_counter_ns()
        kind, res = yield RunHook(h, view)
        decider = f"hook:{h.name}"
        if kind != "ok":
            what = "timed out" if kind == "timeout" else "raised an error"
            detail = {"required": h.required, "error": error_text(env, res) if res else what}
            if h.required:
                b.step(StepName.PRE_HOOK, t, decider, "block", detail)
                b.reject(Stage.HOOK, f"required hook {h.name} {what}", d.name)
                return None
            b.step(StepName.PRE_HOOK, t, decider, "warn", detail)
            continue
        dec: HookDecision = res
        reason = scrub(env, dec.reason)[:300]
        if _overreach(b, d, h, dec, mode, reason, t) is not None:
            return None
        if dec.action is not HookAction.MODIFY or dec.arguments is None:
            shown = {"reason": reason} if reason else None
            b.step(StepName.PRE_HOOK, t, decider, dec.action.value, shown)
            continue
        checked = yield from _modify(env, b, entry, h, args, view, dec.arguments, mode, reason, t)
        if checked is None:
            return None
        args = checked
        b.args_redacted = hook_args = redact_args(env, args)
    return args


def _overreach(
    b: Builder,
    d: ToolDefinition,
    h: Hook,
    dec: HookDecision,
    mode: str,
    reason: str,
    t: int,
) -> ToolResultEnvelope | None:
    """The refusal when a pre-hook blocks, or tries to swap the tool or switch the mode."""
    decider = f"hook:{h.name}"
    if dec.tool is not None and dec.tool != d.name:
        b.step(StepName.PRE_HOOK, t, decider, "block", {"reason": "tried to change the tool"})
        return b.reject(Stage.HOOK, f"hook {h.name} tried to change the tool", d.name)
    if dec.mode is not None and dec.mode != mode:
        b.step(StepName.PRE_HOOK, t, decider, "block", {"reason": "tried to switch mode"})
        return b.reject(Stage.HOOK, f"hook {h.name} tried to switch the mode", d.name)
    if dec.action is HookAction.BLOCK:
        b.step(StepName.PRE_HOOK, t, decider, "block", {"reason": reason})
        return b.reject(Stage.HOOK, f"blocked by hook {h.name}: {reason}", d.name)
    return None


def _modify(
    env: Environment,
    b: Builder,
    entry: Entry,
    h: Hook,
    args: dict[str, Any],
    view: HookView,
    new: Mapping[str, Any],
    mode: str,
    reason: str,
    t: int,
) -> Generator[Approve, Any, dict[str, Any] | None]:
    """A pre-hook's new arguments, re-validated and re-authorised (a rule may ask again);
    None if refused."""
    d = entry.definition
    new_args = _merge(args, view.arguments, new)
    diff = arguments_diff(view.arguments, redact_args(env, new_args))
    detail = {"reason": reason, "diff": detached(diff)}
    b.step(StepName.PRE_HOOK, t, f"hook:{h.name}", "modify", detail)
    b.hook_modified = True
    t = time.perf_counter_ns()
    checked, err = entry.schema.validate(new_args)
    if err is not None:
        b.step(StepName.REVALIDATE, t, "schema", "reject", {"error": err.message})
        b.reject(Stage.HOOK, f"hook {h.name} produced invalid arguments: {err.message}", d.name)
        return None
    b.step(StepName.REVALIDATE, t, "schema", "accept", None)
    verdict = authorize(env, b, entry, checked, mode, t, (h.name, args))
    if verdict is not None:
        if isinstance(verdict, ToolResultEnvelope):
            return None
        refused = yield from approve(env, b, d, checked, verdict)
        if refused is not None:
            return None
    return checked


def post_hooks(
    env: Environment, b: Builder, entry: Entry, envelope: ToolResultEnvelope
) -> Generator[RunHook, Any, ToolResultEnvelope]:
    """Each post-hook that applies, on the finished envelope; emit the final one."""
    d = entry.definition
    posts = [h for h in env.post_hooks if h.applies_to(d.name)]
    if not posts:
        return b.emit(envelope)
    data, status, summary = envelope.data, envelope.status, envelope.summary
    error_type = b.error_type
    for h in posts:
        view = _view(b, d, b.args_redacted or {}, "post", status.value, data)
        t = time.perf_counter_ns()
        kind, res = yield RunHook(h, view)
        decider = f"hook:{h.name}"
        ok = status is Status.OK
        if kind != "ok":
            what = "timed out" if kind == "timeout" else "raised an error"
            if h.required and ok:
                b.step(StepName.POST_HOOK, t, decider, "block", {"error": what})
                status, data, error_type = Status.FAILED, None, "post_hook_error"
                summary = (
                    f"{d.name} ran, but its result was withheld: required hook {h.name} {what}"
                )
            else:
                b.step(StepName.POST_HOOK, t, decider, "warn", {"error": what})
            continue
        dec: HookDecision = res
        reason = scrub(env, dec.reason)[:300]
        if dec.action is HookAction.BLOCK and ok:
            b.step(StepName.POST_HOOK, t, decider, "block", {"reason": reason})
            status, data, error_type = Status.FAILED, None, "post_hook_block"
            summary = f"{d.name} ran, but hook {h.name} withheld its result: {reason}"
        elif dec.action is HookAction.MODIFY and ok:
            data, _ = env.redactor.redact(dec.result)
            b.step(StepName.POST_HOOK, t, decider, "modify", {"reason": reason})
            b.hook_modified = True
        else:
            ann = redact_detail(env, dict(dec.annotations)) if dec.annotations else None
            detail = {"reason": reason, "annotations": ann} if (reason or ann) else None
            b.step(StepName.POST_HOOK, t, decider, dec.action.value, detail)
    b.error_type = error_type
    rec = envelope.record
    envelope = b.envelope(
        status, summary, data, envelope.artifact, rec.reject_stage, rec.result_preview,
        retry=envelope.retry,
    )
    return b.emit(envelope)


def _merge(
    raw: Mapping[str, Any], shown: Mapping[str, Any], new: Mapping[str, Any]
) -> dict[str, Any]:
    """Hooks see redacted arguments; values they hand back unchanged keep the raw original."""
    out: dict[str, Any] = {}
    for k, v in new.items():
        out[k] = raw[k] if k in raw and k in shown and shown[k] == v else v
    return out


def arguments_diff(before: Any, after: Any) -> dict[str, Any]:
    """A small argument diff (both sides already redacted)."""
    if not isinstance(before, Mapping) or not isinstance(after, Mapping):
        return {"before": before, "after": after}
    changed = {k: [before[k], after[k]] for k in before if k in after and before[k] != after[k]}
    added = {k: after[k] for k in after if k not in before}
    removed = [k for k in before if k not in after]
    out: dict[str, Any] = {}
    if changed:
        out["changed"] = changed
    if added:
        out["added"] = added
    if removed:
        out["removed"] = removed
    return out


def _view(
    b: Builder,
    d: ToolDefinition,
    arguments: Mapping[str, Any],
    phase: Literal["pre", "post"] = "pre",
    status: str | None = None,
    result: Any = None,
) -> HookView:
    """What a hook sees of the call (arguments already redacted)."""
    return HookView(
        b.call_id,
        b.run_id,
        d.name,
        d.source,
        d.capability.value,
        d.effect.value,
        b.mode,
        arguments,
        phase,
        status,
        result,
    )
