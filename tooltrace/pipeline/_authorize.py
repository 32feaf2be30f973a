"""The policy stage: may this call run, with these arguments, in this mode? And when a rule asks,
the approval.

Path arguments (``ToolDefinition.path_params``) must resolve inside the workspace; a hook that
changed one may only narrow it, within the directory the original named. The policy's rules then
decide on the arguments: the first ``deny`` wins, else the first ``ask`` goes to the approver
(``Approve``, an operation the pipeline yields to its driver), else the call is allowed.

An approval is bound to the digest of the arguments it was asked about (``tooltrace.policy``):
a hook that changes them re-authorises, and the new arguments are asked about again.
"""

from __future__ import annotations

import os
import re
from collections.abc import Generator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from .. import _settings
from .._ids import new_call_id
from ..model import Capability, Entry, Stage, StepName, ToolDefinition, ToolResultEnvelope
from ..policy import (
    ApprovalDecision,
    ApprovalRequest,
    PathPolicyError,
    PolicyDecision,
    PolicyRequest,
    Reusable,
    Verdict,
    arguments_sha256,
    reads_only,
    ttl_seconds,
)
from ..redaction import Redactor
from ..sinks import ApprovalRecord
from ._record import Builder, Made, detached, error_text, redact_args, redact_detail, scrub

if TYPE_CHECKING:
    from ._environment import Environment

__all__ = ["Approve", "Ask", "approve", "authorize"]

# Step names and enum members every call uses, as module constants: a member looked up on its class
# costs 72 ns (CPython 3.11, timeit), against 7 ns for a global.
_POLICY = StepName.POLICY
_HOOK_STAGE, _POLICY_STAGE = Stage.HOOK, Stage.POLICY


@dataclass(slots=True)
class Approve:
    """Ask the approver (the operation the pipeline yields to its driver for approval)."""

    request: ApprovalRequest


class Ask(NamedTuple):
    """A policy rule asked for approval (``t``: when the approval step begins)."""

    decision: PolicyDecision
    reason: str
    decider: str
    t: int


# No path is longer (PATH_MAX); a longer word is only looked at word by word, as a script.
_MAX_PATH_CHARS = 4096
# What separates the words of a shell script, its quotes and redirections included, so
# `cat<.tooltrace/k`, `"$(cat .tooltrace/k)"` and `--key=.tooltrace/k` each yield the path.
_SHELL_SPLIT = re.compile(r"""[\s;&|<>()`'"=$]+""")
_NO_PATHS: dict[str, str] = {}  # shared by calls of tools without path arguments, never mutated
_WHO = re.compile(r"[^A-Za-z0-9@._-]")


def authorize(
    env: Environment,
    b: Builder,
    entry: Entry,
    args: Mapping[str, Any],
    mode: str,
    t: int,
    hook: tuple[str, Mapping[str, Any]] | None,
) -> ToolResultEnvelope | Ask | None:
    """The policy step (begun at ``t``): the mode, resource scope and argument rules. None
    when allowed, the refusal, or ``Ask``. ``hook`` = (name, arguments before) when a hook
    changed the arguments (the mode was checked the first time, and a hook cannot change it).

    A plain function (no generator on the common path): a rule that asks returns ``Ask`` and
    the pipeline then runs ``approve``, which may yield to the approver."""
    d = entry.definition
    if b.depth > env.max_depth:
        why = f"nested {b.depth} calls deep; the maximum is {env.max_depth}"
        detail = {"reason": why, "depth": b.depth, "parent_tool": b.parent_tool}
        b.step(_POLICY, t, "policy:max_depth", "deny", detail)
        return b.reject(Stage.POLICY, f"denied by policy rule max_depth: {why}", d.name)
    if hook is None:
        ok, why = env.policy.mode_allows(d, mode)
        if not ok:
            b.step(_POLICY, t, "policy:mode", "deny", {"reason": why})
            return b.reject(Stage.POLICY, f"not allowed in this mode ({why})", d.name)
    stage = _HOOK_STAGE if hook else _POLICY_STAGE
    resolved = _scope(env, b, d, args, t, stage, hook) if d.path_params else _NO_PATHS
    if resolved is None:
        return b.refused()
    if d.capability == Capability.EXECUTE and env.workspace.protected_roots:
        found = _names_protected(env, args, resolved.get("cwd", ""))
        if found is not None:
            param, why = found
            b.step(_POLICY, t, "policy:protected", "deny", {"param": param, "reason": why})
            return b.reject(stage, f"argument {param} {_WHY_PROTECTED[why]} ({why})", d.name)
    req = PolicyRequest(
        d, args, mode, b.run_id, b.call_id, resolved, b.depth, b.parent_tool, b.principal
    )
    decision, rules = env.policy.evaluate(req)
    rebound = _rebound(env, b, args) if hook is not None else None
    if decision is None:
        if rebound is not None or resolved:
            detail = _detail(rebound, rules=list(rules), paths=resolved)
            b.step(_POLICY, t, "policy", "allow", detail)
        else:
            b.step(_POLICY, t, "policy", "allow", _allowed(env, rules))
        return None
    reason = scrub(env, decision.reason)[:300]
    decider = f"policy:{decision.rule}"
    verdict = decision.verdict
    if verdict is Verdict.OBSERVE_DENY or verdict is Verdict.OBSERVE_ASK:
        # A rule being rolled out: the call goes on; the step says what it would have done.
        detail = _detail(rebound, reason=reason, paths=resolved, rules=list(rules))
        b.step(_POLICY, t, decider, str(verdict), detail)
        return None
    if verdict is Verdict.DENY:
        b.step(_POLICY, t, decider, "deny", _detail(rebound, reason=reason, paths=resolved))
        return b.reject(stage, f"denied by policy rule {decision.rule}: {reason}", d.name)
    t = b.step(_POLICY, t, decider, "ask", {"reason": reason, "paths": resolved})
    return Ask(decision, reason, decider, t)


def _allowed(env: Environment, rules: tuple[str, ...]) -> Mapping[str, Any]:
    """The allow step's detail: the rules that passed, their names redacted once for each
    set of rules while the redactor's rules stand (every call that passes them names them)."""
    red = env.redactor
    memo = env.allowed_rules
    hit = memo.get(rules)
    if hit is not None and hit[0] is red and hit[1] == red.generation:
        return hit[2]
    gen = red.generation  # read first: a value registered meanwhile makes the entry stale
    detail: Mapping[str, Any] = Made(redact_detail(env, {"rules": list(rules)}))
    if type(red) is not Redactor:  # a subclass's redaction may depend on more than the text
        return detail
    if len(memo) >= 256:
        memo.clear()
    hit = memo[rules] = (red, gen, detail)
    # Shared by the calls that pass the same rules: records are read-only downstream.
    return hit[2]


def _detail(rebound: str | None, **fields: Any) -> dict[str, Any]:
    """A policy step's detail: ``fields``, then the digest of arguments a hook changed after
    they were approved (``_rebound``), when there is one."""
    if rebound is not None:
        fields["args_sha256"] = rebound
    return fields


def _rebound(env: Environment, b: Builder, args: Mapping[str, Any]) -> str | None:
    """After a hook changed the arguments of a call already approved: the new arguments'
    digest, recorded in the policy step so the earlier approval (bound to the old digest) is
    not counted as covering the call (the ``approvals`` view); else None."""
    if not any(s.step == "approval" and s.decision == "approve" for s in b.steps):
        return None
    return arguments_sha256(redact_args(env, args))


def _scope(
    env: Environment,
    b: Builder,
    d: ToolDefinition,
    args: Mapping[str, Any],
    t: int,
    stage: Stage,
    hook: tuple[str, Mapping[str, Any]] | None,
) -> dict[str, str] | None:
    """Each path argument resolved in the workspace (relative); None if refused."""
    resolved: dict[str, str] = {}
    for p in d.path_params:
        value = args.get(p)
        if value is None:
            continue
        if not isinstance(value, str):
            b.step(_POLICY, t, "policy:path_scope", "deny", {"param": p})
            b.reject(stage, f"argument {p} must be a path string", d.name)
            return None
        try:
            rp = env.workspace.resolve(value, must_exist=False)
        except PathPolicyError as exc:
            detail = {"param": p, "reason": exc.reason}
            b.step(_POLICY, t, "policy:path_scope", "deny", detail)
            b.reject(stage, f"path not allowed ({exc.reason}): {exc}", d.name)
            return None
        if rp.read_only and not reads_only(d):
            b.step(_POLICY, t, "policy:path_scope", "deny",
                   {"param": p, "reason": "read_only"})
            b.reject(stage, f"path not allowed (read_only): {p} is in a read-only root", d.name)
            return None
        resolved[p] = rp.relative
        if hook is not None:
            before = hook[1].get(p)
            if (
                isinstance(before, str)
                and before != value
                and not narrows(env, before, rp.relative)
            ):
                detail = {"param": p, "reason": "widened path scope", "hook": hook[0]}
                b.step(_POLICY, t, "policy:hook_scope", "deny", detail)
                b.reject(Stage.HOOK, f"hook {hook[0]} tried to widen a path's scope", d.name)
                return None
    return resolved


#: What a refusal of a command's word says, by its reason.
_WHY_PROTECTED = {
    "protected": "names tooltrace's own files",
    "symlink_race": "changed while checked",
    "not_unicode": "is not valid Unicode text",
}


def _names_protected(
    env: Environment, args: Mapping[str, Any], cwd: str
) -> tuple[str, str] | None:
    """(argument, reason) for the first argument of a command whose words name a path in a
    protected root (the home), taken from the command's ``cwd``; None when no word does. A
    command's program can open any path it is handed, so its words are checked beside the path
    arguments: each word, the value of an ``--option=value`` word and each word of a shell
    script, with symlinks resolved. A word whose links change while they are resolved is
    refused too (reason ``symlink_race``), and so is one that is not valid Unicode text (a lone
    surrogate, reason ``not_unicode``), which no file name can hold: fail closed."""
    ws = env.workspace
    base = os.path.join(ws.root, cwd)
    for name, value in args.items():
        for word in value if isinstance(value, list) else [value]:
            if not isinstance(word, str) or "\x00" in word:
                continue
            for candidate in (word, *_SHELL_SPLIT.split(word)):
                if not candidate or len(candidate) > _MAX_PATH_CHARS:
                    continue
                try:
                    real = os.path.realpath(os.path.join(base, candidate))
                except OSError:
                    return str(name), "symlink_race"
                except UnicodeEncodeError:  # no file name can hold it: fail closed
                    return str(name), "not_unicode"
                if ws.is_protected(real):
                    return str(name), "protected"
    return None


def narrows(env: Environment, before: str, after_relative: str) -> bool:
    """A hook may move a path only within the directory the original path named."""
    try:
        orig = env.workspace.resolve(before, must_exist=False).relative
    except PathPolicyError:
        return False
    scope = orig.rsplit("/", 1)[0] if "/" in orig else ""
    if orig == after_relative:
        return True
    return (scope == "" and "/" not in after_relative) or after_relative.startswith(scope + "/")


def approve(
    env: Environment, b: Builder, d: ToolDefinition, args: Mapping[str, Any], ask: Ask
) -> Generator[Approve, Any, ToolResultEnvelope | None]:
    """Ask the approver about exactly these arguments (or apply TOOLTRACE_APPROVAL when there
    is none); None if approved. An unexpired approval of the same tool, principal and argument
    digest is reused without asking; a new answer becomes an ``ApprovalRecord``."""
    decision, reason, decider, t = ask
    redacted = redact_args(env, args)
    digest = arguments_sha256(redacted)
    if env.approver is None:
        allow = _settings.approval_allows()
        detail: dict[str, Any] = {"reason": "no approver configured", "args_sha256": digest}
        b.step(StepName.APPROVAL, t, decider, "approve" if allow else "deny", detail)
        if not allow:
            return b.reject(
                Stage.APPROVAL, "approval required and no approver is configured", d.name
            )
        return None
    hit = env.approvals.find(d.name, b.principal, digest, env.approvals.now_us())
    if hit is not None:
        detail = {
            "rule": decision.rule, "approval_id": hit.approval_id, "args_sha256": digest,
            "expires_at_us": hit.expires_at_us, "reused": True}
        b.step(StepName.APPROVAL, t, f"approval:{hit.approval_id}", "approve", detail)
        return None
    kept = detached(redacted)  # what the record keeps: shares nothing the approver or tool holds
    areq = ApprovalRequest(
        b.call_id, b.run_id, d.name, redacted, decision.rule, reason, digest, b.principal
    )
    kind, res = yield Approve(areq)
    if kind != "ok" or not isinstance(res, ApprovalDecision):
        error = error_text(env, res) if isinstance(res, BaseException) else "no answer"
        detail = {"error": error, "args_sha256": digest}
        b.step(StepName.APPROVAL, t, "user:unknown", "deny", detail)
        return b.reject(Stage.APPROVAL, "the approver failed to answer", d.name)
    rec = _record(env, b, d, decision, res, kept, digest)
    detail = {"reason": rec.reason, "rule": decision.rule, "approval_id": rec.approval_id,
              "args_sha256": digest}
    if rec.expires_at_us is not None:
        detail["expires_at_us"] = rec.expires_at_us
    b.step(StepName.APPROVAL, t, f"user:{rec.who}", "approve" if res.approved else "deny", detail)
    if not res.approved:
        return b.reject(Stage.APPROVAL, f"denied by {rec.who}", d.name)
    return None


def _record(
    env: Environment,
    b: Builder,
    d: ToolDefinition,
    decision: PolicyDecision,
    res: ApprovalDecision,
    redacted: Any,
    digest: str,
) -> ApprovalRecord:
    """The approver's answer as a record, handed to every ``ApprovalSink``; an approval with a
    time to live (the answer's, else the rule's) is kept for later calls to reuse."""
    at = env.approvals.now_us()
    try:
        ttl = ttl_seconds(res.ttl) if res.ttl is not None else ttl_seconds(decision.approval_ttl_s)
        expires = at + int(ttl * 1_000_000) if (ttl and res.approved) else None
    except (TypeError, ValueError, OverflowError):
        # An approver's malformed ttl (not a number, too large, infinite): the approval covers
        # this call only.
        expires = None
    principal = b.principal.to_dict() if b.principal is not None else None
    rec = ApprovalRecord(
        new_call_id(), b.call_id, b.run_id, d.name, decision.rule, bool(res.approved),
        _WHO.sub("_", res.who or "unknown")[:64], scrub(env, res.reason)[:300], digest, at,
        expires, principal, redacted,
    )
    env.emitter.emit_approval(rec)
    if expires is not None:
        env.approvals.keep(
            d.name, b.principal, digest, Reusable(rec.approval_id, decision.rule, expires), at
        )
    return rec
