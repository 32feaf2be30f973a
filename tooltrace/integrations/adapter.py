"""What every framework adapter and hand-written loop shares: the call it builds, the text the
model sees, the cancel contract.

Each adapter turns a framework's tool call into a ``ToolCall`` (``make_call``), runs it through
the registry (``registry.call`` or ``acall``, below) and renders the envelope back for the model
(``model_text``): the redacted, trimmed result when the call succeeded, the envelope's summary
when it did not. Nothing else reaches the model: no raw output, no raw exception text.
"""

from __future__ import annotations

import asyncio
import re
from typing import TYPE_CHECKING, Any

import orjson

from ..model import Capability, Effect, Principal, Status, ToolCall, ToolResultEnvelope, plain

if TYPE_CHECKING:
    from ..registry import ToolRegistry

__all__ = [
    "ADOPTED_CAPABILITY",
    "ADOPTED_EFFECT",
    "ARGUMENTS_ERROR",
    "INTEGRATION",
    "PROVIDER_ID",
    "PROVIDER_NAME",
    "acall",
    "acting_principal",
    "make_call",
    "model_text",
    "plain",
    "result_meta",
]

#: What an adopted framework tool is taken to do unless the caller says otherwise: its code is
#: opaque, so the most guarded kind (hidden in read-only modes; a side effect it cannot confirm
#: ends ``unknown``, never ``cancelled``). Every adapter's ``adopt`` uses these defaults.
ADOPTED_CAPABILITY = Capability.EXECUTE
ADOPTED_EFFECT = Effect.EXTERNAL

#: Attribute naming the tool call's id as the model (or framework) gave it.
PROVIDER_ID = "provider.tool_call_id"
#: Attribute naming the adapter that made the call (``langchain``, ``openai``, ...).
INTEGRATION = "tooltrace.integration"
#: Attribute naming the tool as the model asked for it (kept even when no such tool exists).
PROVIDER_NAME = "provider.tool_name"
#: Attribute set when the provider's arguments could not be parsed: the parser's reason code.
ARGUMENTS_ERROR = "provider.arguments_error"

# What a framework's agent name may not hold in a principal (each run of it becomes "-").
_NOT_IN_NAME = re.compile(r"[^A-Za-z0-9@._:-]+")

_HINTS = {
    "json": " (the arguments were not valid JSON)",
    "too_large": " (the arguments were too large)",
    "too_deep": " (the arguments were nested too deeply)",
}


def acting_principal(principal: Principal | None, agent: object) -> Principal | None:
    """``principal`` with the framework's name of the agent acting filled in.

    ``agent`` (the agent name a framework gives the tool call) goes into ``Principal.agent``
    when ``principal`` names no agent (no principal: one naming only the agent), with every run
    of characters a principal may not hold (``[A-Za-z0-9@._:-]``) replaced by ``-`` and cut
    to 128 characters. A principal that names its agent is kept as it is; so is ``principal``
    when ``agent`` is no usable name.
    """
    if principal is not None and principal.agent is not None:
        return principal
    if not isinstance(agent, str):
        return principal
    value = _NOT_IN_NAME.sub("-", agent.strip())[:128]
    if not value.strip("-"):
        return principal
    if principal is None:
        return Principal(agent=value)
    return Principal(user=principal.user, agent=value, tenant=principal.tenant,
                     roles=principal.roles)


def make_call(
    registry: ToolRegistry,
    name: str,
    arguments: Any,
    *,
    integration: str,
    provider_id: str | None,
    mode: str,
    run_id: str | None = None,
    timeout_s: float | None = None,
    arguments_error: str | None = None,
    requested_name: bool = False,
    principal: Principal | None = None,
    agent: str | None = None,
) -> ToolCall:
    """A ``ToolCall`` for ``registry``, with a call id it made (``registry.new_call_id()``:
    taken without a look-up in the audit trail) and the provider's id kept as an attribute.

    ``arguments`` is passed on as given: anything but a mapping is the registry's to refuse
    (stage ``params``), so even a malformed call is validated, recorded and answered.
    ``requested_name`` records ``name`` too (a reply to an unknown tool must still name it).
    ``principal``: whom the call acts for (checked and bound to its run by the registry);
    ``agent``: the framework's name of the agent making the call, filled into the principal
    when it names no agent (``acting_principal``).
    """
    attributes: dict[str, str | int | bool] = {INTEGRATION: integration}
    if provider_id:
        attributes[PROVIDER_ID] = provider_id
    if requested_name:
        attributes[PROVIDER_NAME] = name
    if arguments_error:
        attributes[ARGUMENTS_ERROR] = arguments_error
    return ToolCall(
        name=name,
        arguments=arguments,
        call_id=registry.new_call_id(),
        run_id=run_id,
        mode=mode,
        timeout_s=timeout_s,
        attributes=attributes,
        principal=principal if agent is None else acting_principal(principal, agent),
    )


async def acall(registry: ToolRegistry, call: ToolCall) -> ToolResultEnvelope:
    """``registry.acall(call)``, keeping the cancel contract when the awaiting task is cancelled.

    The call runs in a task of its own. A cancel of the caller becomes
    ``registry.cancel_call``: the registry signals the tool (or refuses the call if it has not
    started), settles it as ``cancelled`` (or ``unknown`` for a side effect it cannot confirm)
    and records it; this waits for that, within the registry's grace, then lets the
    ``CancelledError`` go on to the framework.
    """
    call_id = call.call_id
    if call_id is None:
        raise ValueError("the call needs its id before it runs (use make_call)")
    task = asyncio.ensure_future(registry.acall(call))
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        registry.cancel_call(call_id, wait=False)
        await asyncio.wait({task}, timeout=registry.cancel_grace_s + 1.0)
        raise


def model_text(env: ToolResultEnvelope) -> str:
    """What the model reads for this call.

    ``ok``: the redacted result (text as is, anything else as JSON), and for an offloaded result
    its preview plus where the full text is. Any other status: ``Error: <summary>``, and whether
    a retry may help.
    """
    if env.status is not Status.OK:
        hint = _HINTS.get(str(env.record.attributes.get(ARGUMENTS_ERROR, "")), "")
        text = f"Error: {env.summary.rstrip('.')}{hint}."
        if env.retry.allowed:
            after = env.retry.after_ms
            text += f" A retry may succeed{f' after {after} ms' if after else ''}."
        return text
    data = env.data
    if data is None:
        text = env.summary
    elif isinstance(data, str):
        text = data
    else:
        text = orjson.dumps(data, default=str).decode()
    art = env.artifact
    if art is not None:
        text += (
            f"\n\n[output truncated: the full result ({art.chars} chars) is in artifact "
            f"{art.path} (sha256 {art.sha256[:16]}), call {env.call_id}]"
        )
    return text


def result_meta(env: ToolResultEnvelope) -> dict[str, Any]:
    """A small JSON-ready summary of the call for the application (never shown to the model)."""
    art = env.artifact
    stage = env.reject_stage
    return {
        "call_id": env.call_id,
        "status": env.status.value,
        "reject_stage": None if stage is None else stage.value,
        "artifact": None
        if art is None
        else {"path": art.path, "chars": art.chars, "sha256": art.sha256},
    }
