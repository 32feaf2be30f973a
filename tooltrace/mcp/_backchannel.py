"""Server-to-client requests through the proxy: sampling, elicitation and roots.

An upstream server may ask its client to sample an LLM (``sampling/createMessage``), to ask
the user (``elicitation/create``) or for its roots (``roots/list``) while it runs a tool. The
upstream's ``ClientSession`` gets the callbacks built here; each forwards the request to the
proxy's client through the downstream ``ServerSession`` of the ``tools/call`` the proxy is
serving for that upstream (the newest, when several are in flight), tied to that request so
that over streamable HTTP it rides the call's stream. The client's answer goes back as the
upstream's answer. With no call in flight for the upstream, or a client that did not declare
the capability, the upstream gets the error the SDK's client gives when it has no callback.
Only the method and how it ended are logged, never the messages or the answers.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import mcp.types as mt

__all__ = ["Backchannel"]

log = logging.getLogger("tooltrace.mcp")


@dataclass(frozen=True, slots=True)
class _Serving:
    session: Any
    request_id: Any


class Backchannel:
    """The client requests in flight per upstream, and the upstreams' callbacks to reach them."""

    def __init__(self) -> None:
        self._serving: dict[str, list[_Serving]] = {}

    @contextlib.contextmanager
    def serving(self, label: str, session: Any, request_id: Any) -> Iterator[None]:
        """While the block runs, requests from upstream ``label`` go to ``session``."""
        entry = _Serving(session, request_id)
        stack = self._serving.setdefault(label, [])
        stack.append(entry)
        try:
            yield
        finally:
            stack.remove(entry)

    def callbacks(self, label: str) -> dict[str, Any]:
        """``ClientSession`` keyword arguments that forward upstream ``label``'s requests."""

        async def sampling(context: Any, params: mt.CreateMessageRequestParams) -> Any:
            return await self._forward(label, "sampling/createMessage", "sampling",
                                       lambda s: _sample(s.session, params, s.request_id))

        async def elicitation(context: Any, params: mt.ElicitRequestParams) -> Any:
            return await self._forward(label, "elicitation/create", "elicitation",
                                       lambda s: _elicit(s.session, params, s.request_id))

        async def list_roots(context: Any) -> Any:
            return await self._forward(label, "roots/list", "roots",
                                       lambda s: _list_roots(s.session))

        return {"sampling_callback": sampling, "elicitation_callback": elicitation,
                "list_roots_callback": list_roots}

    async def _forward(self, label: str, method: str, capability: str, send: Any) -> Any:
        import mcp.types as mt
        from mcp.shared.exceptions import MCPError

        stack = self._serving.get(label)
        target = stack[-1] if stack else None
        if target is None or not _declared(target.session, capability):
            why = "no client call in flight" if target is None else "client lacks capability"
            log.warning("mcp upstream %s: %s refused (%s)", label, method, why)
            return mt.ErrorData(code=mt.INVALID_REQUEST, message=_UNSUPPORTED[capability])
        try:
            result = await send(target)
        except MCPError as exc:
            log.info("mcp upstream %s: %s answered by the client with error %s", label, method,
                     exc.error.code)
            return exc.error
        except Exception as exc:
            log.warning("mcp upstream %s: %s could not be forwarded (%s)", label, method,
                        type(exc).__name__)
            return mt.ErrorData(code=mt.INTERNAL_ERROR,
                                message=f"the proxy could not forward {method} to its client")
        log.info("mcp upstream %s: %s answered by the client", label, method)
        return result


# The SDK client's answers when it has no callback for the request.
_UNSUPPORTED = {"sampling": "Sampling not supported", "elicitation": "Elicitation not supported",
                "roots": "List roots not supported"}


def _declared(session: Any, capability: str) -> bool:
    caps = getattr(session, "client_capabilities", None)
    return caps is not None and getattr(caps, capability, None) is not None


async def _sample(session: Any, p: mt.CreateMessageRequestParams, request_id: Any) -> Any:
    return await session.create_message(
        p.messages, max_tokens=p.max_tokens, system_prompt=p.system_prompt,
        include_context=p.include_context, temperature=p.temperature,
        stop_sequences=p.stop_sequences, metadata=p.metadata,
        model_preferences=p.model_preferences, tools=p.tools, tool_choice=p.tool_choice,
        related_request_id=request_id)


async def _elicit(session: Any, p: mt.ElicitRequestParams, request_id: Any) -> Any:
    import mcp.types as mt

    if isinstance(p, mt.ElicitRequestURLParams):
        return await session.elicit_url(p.message, p.url, p.elicitation_id,
                                        related_request_id=request_id)
    return await session.elicit_form(p.message, p.requested_schema,
                                     related_request_id=request_id)


async def _list_roots(session: Any) -> Any:
    from mcp.shared.exceptions import MCPDeprecationWarning

    with warnings.catch_warnings():
        # roots are deprecated by the newest protocol, and still forwarded for the servers
        # and clients that use them.
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        return await session.list_roots()
