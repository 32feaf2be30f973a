"""A tooltrace tool's progress reaches an MCP client that asked for it (``progressToken``):
the real MCP client and the proxy's real MCP server, connected in memory."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import anyio
from mcp import ClientSession
from mcp.shared.memory import create_client_server_memory_streams

from tooltrace import CallContext, ToolRegistry, tool
from tooltrace.mcp import McpProxy, ProxyConfig, build_server
from tooltrace.mcp._progress import QUEUE_SIZE

SECRET = "sk-" + "0badcafe" * 5


@tool()
async def crunch(ctx: CallContext, n: int) -> str:
    """Works through n items, reporting each."""
    for i in range(n):
        ctx.progress(i + 1, n, f"item {i} {SECRET}")
        await asyncio.sleep(0.005)
    return f"crunched {n}"


async def _session_calls(reg: ToolRegistry, calls: list[tuple[str, dict[str, Any], bool]]
                         ) -> list[tuple[Any, list[tuple[float, float | None, str | None]]]]:
    proxy = McpProxy(ProxyConfig(), registry=reg)
    server = build_server(proxy, "stdio")
    out = []
    async with create_client_server_memory_streams() as (client, srv), \
            anyio.create_task_group() as tg:
        tg.start_soon(lambda: server.run(srv[0], srv[1], server.create_initialization_options()))
        async with ClientSession(client[0], client[1]) as session:
            await session.initialize()
            for name, args, ask in calls:
                got: list[tuple[float, float | None, str | None]] = []

                async def on_progress(p: float, total: float | None, msg: str | None,
                                      got: list[Any] = got) -> None:
                    got.append((p, total, msg))

                res = await session.call_tool(name, args,
                                              progress_callback=on_progress if ask else None)
                out.append((res, got))
        tg.cancel_scope.cancel()
    return out


def test_progress_notifications_reach_the_client_that_asked(tmp_path: Path) -> None:
    reg = ToolRegistry(workspace=tmp_path, home=tmp_path / "home", progress_interval_s=0.0)
    reg.register(crunch)
    (asked, got), (plain, none) = asyncio.run(_session_calls(
        reg, [("crunch", {"n": 5}, True), ("crunch", {"n": 3}, False)]))
    reg.shutdown()
    assert not asked.is_error and not plain.is_error
    assert [(p, t) for p, t, _m in got] == [(1, 5), (2, 5), (3, 5), (4, 5), (5, 5)]
    assert all(m is not None and m.startswith("item ") and SECRET not in m for _p, _t, m in got)
    assert none == []


# -- an upstream's progress, through the proxy -------------------------------------------------

WIRE = str(Path(__file__).parent / "mcp_servers" / "wire.py")


class _Tap:
    """The client's read stream, recording every message it reads (raw, before the SDK types
    it) and reading nothing while ``gate`` is clear: a client that fell behind."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.seen: list[Any] = []
        self.gate = asyncio.Event()
        self.gate.set()

    async def __aenter__(self) -> _Tap:
        await self.inner.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> Any:
        return await self.inner.__aexit__(*exc)

    def __aiter__(self) -> _Tap:
        return self

    async def __anext__(self) -> Any:
        await self.gate.wait()
        item = await self.inner.__anext__()
        self.seen.append(getattr(item, "message", None))
        return item

    @property
    def last_context(self) -> Any:
        return getattr(self.inner, "last_context", None)

    async def aclose(self) -> None:
        await self.inner.aclose()


def _progress_of(tap: _Tap) -> list[dict[str, Any]]:
    return [m.params for m in tap.seen
            if getattr(m, "method", None) == "notifications/progress"]


async def _through_proxy(tmp: Path, steps: int, *, token: str | None, behind: bool = False
                         ) -> tuple[Any, list[dict[str, Any]], float]:
    """Call the wire server's ``slow`` tool (``steps`` progress marks at once) through the
    proxy's front. When ``behind``, the client reads nothing until the proxy has the
    upstream's answer (the registry says the call finished: every mark came before it).
    Returns the result, the progress the client got, and the value of
    ``tooltrace_mcp_progress_coalesced_total``."""
    from prometheus_client import CollectorRegistry

    from tooltrace.mcp import ServerConfig
    from tooltrace.telemetry import MetricsSink

    metrics = MetricsSink(CollectorRegistry())
    reg = ToolRegistry(workspace=tmp, home=tmp / "home", sinks=[metrics])
    config = ProxyConfig(servers=(ServerConfig(
        label="wire", command=sys.executable, args=(WIRE,),
        env={"WIRE_LOG": str(tmp / "wire.log")}),))
    proxy = McpProxy(config, registry=reg)
    await proxy.start()
    server = build_server(proxy, "stdio")
    finished = asyncio.Event()

    async def on_finished(_ev: Any) -> None:
        finished.set()

    sub = reg.subscribe(on_finished, kinds=["finished"])
    try:
        async with create_client_server_memory_streams() as (client, srv), \
                anyio.create_task_group() as tg:
            tg.start_soon(lambda: server.run(srv[0], srv[1],
                                             server.create_initialization_options()))
            tap = _Tap(client[0])
            reading: Any = tap
            async with ClientSession(reading, client[1]) as session:
                await session.initialize()
                if behind:
                    tap.gate.clear()
                meta = {"progressToken": token} if token is not None else None
                call = asyncio.ensure_future(session.call_tool(
                    "slow", {"steps": steps, "gap": 0}, meta=meta))  # type: ignore[arg-type]
                if behind:
                    await finished.wait()
                    tap.gate.set()
                res = await call
            tg.cancel_scope.cancel()
    finally:
        sub.close()
        await proxy.aclose()
    value = metrics.registry.get_sample_value("tooltrace_mcp_progress_coalesced_total")
    reg.shutdown()
    return res, _progress_of(tap), value or 0.0


def test_upstream_progress_reaches_the_client_as_sent(tmp_path: Path) -> None:
    res, got, coalesced = asyncio.run(_through_proxy(tmp_path, 40, token="client-tok-7"))
    assert not res.is_error
    # Every mark, under the client's own token, the numbers as the upstream wrote them.
    assert len(got) == 40 and coalesced == 0
    assert [(p["progressToken"], p["progress"], p["total"]) for p in got] == [
        ("client-tok-7", i, 40) for i in range(1, 41)]
    assert all(type(p["progress"]) is int and type(p["total"]) is int for p in got)
    assert [p["message"] for p in got][:2] == ["step 1", "step 2"]
    # The upstream was asked under the client's token, not one of the proxy's.
    sent = [json.loads(line) for line in (tmp_path / "wire.log").read_text().splitlines()]
    call = next(m for m in sent if m.get("method") == "tools/call")
    assert call["params"]["_meta"]["progressToken"] == "client-tok-7"


def test_no_progress_token_is_sent_upstream_when_the_client_asked_for_none(tmp_path: Path
                                                                           ) -> None:
    res, got, _ = asyncio.run(_through_proxy(tmp_path, 5, token=None))
    assert not res.is_error and got == []
    sent = [json.loads(line) for line in (tmp_path / "wire.log").read_text().splitlines()]
    call = next(m for m in sent if m.get("method") == "tools/call")
    assert "progressToken" not in call["params"].get("_meta", {})


def test_progress_is_coalesced_only_when_the_client_falls_behind(tmp_path: Path) -> None:
    steps = 3 * QUEUE_SIZE
    res, got, coalesced = asyncio.run(_through_proxy(tmp_path, steps, token="t", behind=True))
    assert not res.is_error
    # The queue filled while the client read nothing: the newest report stood for the ones
    # it replaced, each counted; every mark was either sent or counted, and the last is there.
    assert coalesced > 0
    assert len(got) + coalesced == steps
    assert got[-1]["progress"] == steps
    assert [p["progress"] for p in got] == sorted(p["progress"] for p in got)
