"""``tooltrace mcp``: run the MCP proxy, report what it exposes, re-pin changed tools."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from ..exceptions import ConfigurationError
from ._common import EXIT_FAIL, EXIT_USAGE, OutputGuard, json_option, print_json, wide_option
from ._common import table as print_table

__all__ = ["mcp"]


def _config(config_path: Path | None, name: str | None, command: tuple[str, ...],
            overrides: dict[str, Any]) -> Any:
    from ..mcp import ProxyConfig, ServerConfig, load_config

    try:
        cfg = load_config(config_path) if config_path is not None else ProxyConfig()
        servers = list(cfg.servers)
        if command:
            if not name:
                raise ConfigurationError("name the server with --name when giving a command")
            timeout = overrides.pop("timeout_s", None)
            extra = {"timeout_s": timeout} if timeout is not None else {}
            servers.append(ServerConfig(label=name, command=command[0], args=tuple(command[1:]),
                                        **extra))
        elif name:
            raise ConfigurationError("--name needs a command after '--'")
        overrides.pop("timeout_s", None)
        if not servers:
            raise ConfigurationError("no upstream servers: pass --config or --name NAME -- CMD")
        kw = {k: v for k, v in overrides.items() if v not in (None, (), frozenset())}
        for key in ("hooks",):
            if key in kw:
                kw[key] = tuple(cfg.hooks) + tuple(kw[key])
        for key in ("deny", "ask"):
            if key in kw:
                kw[key] = frozenset(getattr(cfg, key)) | frozenset(kw[key])
        return dataclasses.replace(cfg, servers=tuple(servers), **kw)
    except ConfigurationError as exc:
        raise click.UsageError(str(exc)) from None


def _server_options(f: Any) -> Any:
    f = click.argument("command", nargs=-1, type=click.UNPROCESSED)(f)
    f = click.option("--name", help="Label of the one server given after '--'.")(f)
    f = click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path),
                     help="TOML file naming the upstream servers and the proxy's settings.")(f)
    f = click.option("--home", type=click.Path(file_okay=False), default=None,
                     help="tooltrace home (audit, artifacts, pins).")(f)
    return f


def _loop_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The proxy's event loop: uvloop's (``auto`` when it is installed, ``uvloop``), else the
    standard library's (None). uvloop runs the loop's own work in C: 3-7% less CPU per
    proxied call in the bench (docs/performance/figures.md)."""
    if name == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if name == "uvloop":
            raise click.UsageError("--loop uvloop: uvloop is not installed (it comes with "
                                   "pip install 'tooltrace[mcp]' off Windows)") from None
        return None
    return uvloop.new_event_loop


@click.group()
def mcp() -> None:
    """The MCP proxy: upstream MCP servers behind tooltrace's audited pipeline."""


@mcp.command(context_settings={"ignore_unknown_options": True})
@_server_options
@click.option("--workspace", type=click.Path(file_okay=False), default=None,
              help="Workspace directory for path policy (default: the current directory).")
@click.option("--hook", "hooks", multiple=True, help="A hook as module:function or entry point.")
@click.option("--deny", multiple=True, help="Deny this (exposed) tool name.")
@click.option("--ask", multiple=True, help="Require approval for this tool name.")
@click.option("--approval", default=None,
              help="deny | allow | queue[:<seconds>] (the home's approval queue) |"
              " module:function approver.")
@click.option("--rug-pull", "rug_pull", type=click.Choice(["ask", "deny", "allow"]),
              default=None, help="What calls of a tool that changed since it was pinned get.")
@click.option("--collisions", type=click.Choice(["prefix", "priority"]), default=None)
@click.option("--timeout", "timeout_s", type=float, default=None,
              help="Default deadline of the one server's calls, seconds.")
@click.option("--http", "http", default=None, metavar="HOST:PORT",
              help="Serve streamable HTTP on loopback instead of stdio.")
@click.option("--policy", "policy_file", type=click.Path(dir_okay=False), default=None,
              help="Policy file whose rules follow the proxy's own (default:"
                   " $TOOLTRACE_POLICY, else ./tooltrace.toml when it exists).")
@click.option("--idle-timeout", "idle_timeout_s", type=float, default=None, metavar="SECONDS",
              help="With --http: end a client session idle this long and close its upstream "
                   "connections (default 600, or idle_timeout_s in the config file).")
@click.option("--loop", "loop_name", type=click.Choice(["auto", "uvloop", "asyncio"]),
              default="auto", show_default=True,
              help="The event loop: uvloop when installed (auto), or the standard library's.")
def proxy(config_path: Path | None, home: str | None, name: str | None,
          command: tuple[str, ...], workspace: str | None, hooks: tuple[str, ...],
          deny: tuple[str, ...], ask: tuple[str, ...], approval: str | None,
          rug_pull: str | None, collisions: str | None, timeout_s: float | None,
          http: str | None, policy_file: str | None, idle_timeout_s: float | None,
          loop_name: str) -> None:
    """Serve upstream MCP servers' tools through the pipeline (an MCP server on stdio).

    \b
    tooltrace mcp proxy --config servers.toml
    tooltrace mcp proxy --name git -- mcp-server-git --repository .
    """
    cfg = _config(config_path, name, command, {
        "home": home, "workspace": workspace, "hooks": hooks, "deny": deny, "ask": ask,
        "approval": approval, "rug_pull": rug_pull, "collisions": collisions,
        "timeout_s": timeout_s, "policy_file": policy_file, "idle_timeout_s": idle_timeout_s})
    endpoint = None
    if http:
        host, _, port = http.rpartition(":")
        if not host or not port.isdigit():
            raise click.UsageError("--http takes HOST:PORT, e.g. 127.0.0.1:8765")
        endpoint = (host.strip("[]"), int(port))
        from ..mcp import check_loopback

        try:
            check_loopback(endpoint[0])
        except ConfigurationError as exc:
            raise click.UsageError(str(exc)) from None
    factory = _loop_factory(loop_name)
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    _proxy_log_level()
    from ..mcp import run_proxy

    try:
        with asyncio.Runner(loop_factory=factory) as runner:
            runner.run(run_proxy(cfg, http=endpoint))
    except ConfigurationError as exc:
        click.echo(f"tooltrace mcp proxy: {exc}", err=True)
        sys.exit(EXIT_USAGE)
    except (KeyboardInterrupt, asyncio.CancelledError):
        pass


def _proxy_log_level() -> None:
    """The proxy's own log lines follow ``TOOLTRACE_LOG_LEVEL`` (other libraries' stay at
    warning: the MCP SDK's debug lines would carry messages)."""
    from .._settings import log_level

    level = log_level()
    try:
        logging.getLogger("tooltrace.mcp").setLevel(
            level.upper() if isinstance(level, str) else level)
    except (TypeError, ValueError):
        pass  # the log sink says what is wrong with it


async def _started(cfg: Any, *, pin_new: bool) -> Any:
    from ..mcp import McpProxy
    from ..registry import ToolRegistry

    # A bare registry: a report runs no calls, so it needs no sinks.
    reg = ToolRegistry(home=cfg.home)
    p = McpProxy(cfg, registry=reg, pin_new=pin_new)
    await p.start(strict=False)
    return p


@mcp.command(context_settings={"ignore_unknown_options": True})
@_server_options
@json_option
@wide_option
def report(config_path: Path | None, home: str | None, name: str | None,
           command: tuple[str, ...], as_json: bool, wide: bool) -> None:
    """Start the upstreams, list their tools, and show names, collisions and pin changes.

    Nothing is pinned by a report. Exits 1 when a server failed to start or a name conflict
    stops the proxy from starting.
    """
    cfg = _config(config_path, name, command, {"home": home})
    guard = OutputGuard(Path(home) if home else None)

    async def go() -> Any:
        p = await _started(cfg, pin_new=False)
        try:
            return p.report()
        finally:
            await p.aclose()

    rep = asyncio.run(go())
    if as_json:
        print_json(rep.to_dict(), guard)
    else:
        print_table("servers", ["server", "state", "tools", "restarts", "error"],
                    [[s.label, s.state, s.tools, s.restarts, s.error or ""] for s in rep.servers],
                    guard, wide=wide)
        print_table("tools", ["name", "server", "upstream", "state", "pin", "reason"],
                    [[t.name, t.server, t.upstream_name, t.state, t.pin, t.reason]
                     for t in rep.tools], guard, wide=wide)
        if rep.collisions:
            print_table("collisions", ["tool", "servers", "rule", "resolution"],
                        [[c.upstream_name, ", ".join(c.servers), c.rule, c.resolution]
                         for c in rep.collisions], guard, wide=wide)
        print_table("shadow report", ["name", "active", "priority", "shadowed"],
                    [[r.name, r.active_source, r.active_priority,
                      ", ".join(f"{s} ({p})" for s, p in r.shadowed)] for r in rep.resolution],
                    guard, wide=wide)
        for c in rep.conflicts:
            click.echo(f"conflict: {c}")
    if rep.conflicts or any(s.state == "failed" for s in rep.servers):
        sys.exit(EXIT_FAIL)


@mcp.command(context_settings={"ignore_unknown_options": True})
@_server_options
@click.option("--server", default=None, help="Only this server's tools.")
@click.option("--tool", "tools", multiple=True, help="Only this tool (exposed or upstream name).")
def accept(config_path: Path | None, home: str | None, name: str | None,
           command: tuple[str, ...], server: str | None, tools: tuple[str, ...]) -> None:
    """Re-pin tools to what their servers describe now (after reviewing a change)."""
    cfg = _config(config_path, name, command, {"home": home})

    async def go() -> list[str]:
        p = await _started(cfg, pin_new=True)
        try:
            done: list[str] = p.accept(server, list(tools) or None)
            return done
        finally:
            await p.aclose()

    done = asyncio.run(go())
    for d in done:
        click.echo(f"re-pinned {d}")
    if not done:
        click.echo("nothing to re-pin")
