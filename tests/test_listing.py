"""Tool groups and lazy schemas: a mode's tool list with groups collapsed to one line each,
`load_tools` (a call like any other: policed, audited) to open one, the same bytes for the same
request in separate processes, hidden tools and groups with their reasons, the provider formats,
and what each mode and group costs the model (`tooltrace tools`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from tooltrace import Capability, Effect, ToolCall, ToolDefinition, ToolRegistry, tool
from tooltrace.builtins import default_registry, register_registry_tools
from tooltrace.exceptions import RegistrationError
from tooltrace.integrations import providers
from tooltrace.integrations.providers import CHARS_PER_TOKEN, schema_size, schema_sizes
from tooltrace.policy import Mode, Policy, PolicyDecision, Verdict

TOOLTRACE = Path(sys.executable).parent / "tooltrace"
FORMATS = ("openai", "openai-responses", "anthropic", "gemini", "mcp")


@tool(group="git", description="Show the working tree status")
def git_status(short: bool = True) -> str:
    return "clean"


@tool(group="git", capability=Capability.WRITE, effect=Effect.LOCAL,
      description="Record changes to the repository")
def git_commit(message: str) -> str:
    return "committed"


@tool(group="deploy", capability=Capability.EXECUTE, effect=Effect.EXTERNAL,
      description="Ship a build")
def ship(env: str) -> str:
    return "shipped"


@tool(description="Say hello")
def hello(name: str) -> str:
    return f"hello {name}"


def _upstream_tool(name: str) -> ToolDefinition:
    return ToolDefinition(name, f"{name} of the time server",
                          {"type": "object", "properties": {"tz": {"type": "string"}}},
                          source="mcp:time")


def make_registry(tmp: Path, order: int = 1, **kwargs: Any) -> ToolRegistry:
    """Tools registered in one order or the reverse: listings must not care."""
    reg = ToolRegistry(workspace=tmp, home=tmp / ".home", **kwargs)
    items: list[Any] = [git_status, git_commit, ship, hello,
                        (_upstream_tool("get_time"), lambda tz="UTC": "12:00"),
                        (_upstream_tool("convert_time"), lambda tz="UTC": "13:00")]
    for item in items[::order]:
        if isinstance(item, tuple):
            reg.register(*item)
        else:
            reg.register(item)
    register_registry_tools(reg)
    reg.describe_group("git", "Version control of the workspace")
    return reg


def test_groups_collapse_to_one_line_each_and_load_tools_lists_them(tmp_path: Path) -> None:
    with make_registry(tmp_path) as reg:
        listing = reg.tool_listing("default")
    assert [(g.name, g.description, g.tools) for g in listing.groups] == [
        ("deploy", "Tools: ship", 1),
        ("files", "Read and write text files in the workspace, and undo a write", 1),
        ("git", "Version control of the workspace", 2),
        ("time", "Tools: convert_time, get_time", 2),  # an MCP server is a group
    ]
    assert [d.name for d in listing.tools] == ["hello", "load_tools"]
    loader = listing.tools[1]
    assert "- git (2 tools): Version control of the workspace" in loader.description
    assert "- deploy (1 tool): Tools: ship" in loader.description
    assert loader.parameters["properties"]["group"]["enum"] == ["deploy", "files", "git", "time"]
    assert listing.hidden == () and listing.hidden_groups == ()


def test_expand_shows_a_group_in_full(tmp_path: Path) -> None:
    with make_registry(tmp_path) as reg:
        listing = reg.tool_listing("default", expand=["git"])
    assert [d.name for d in listing.tools] == ["git_commit", "git_status", "hello", "load_tools"]
    assert [g.name for g in listing.groups] == ["deploy", "files", "time"]


def test_hidden_tools_and_groups_come_with_their_reason(tmp_path: Path) -> None:
    with make_registry(tmp_path) as reg:
        listing = reg.tool_listing("plan")
        env = reg.call(ToolCall("load_tools", {"group": "deploy"}, mode="plan"))
        unknown = reg.call(ToolCall("load_tools", {"group": "nope"}, mode="plan"))
    hidden = dict(listing.hidden)
    assert hidden["ship"] == "capability execute is not allowed in mode 'plan'"
    assert hidden["git_commit"] == "capability write is not allowed in mode 'plan'"
    # git still shows one tool; deploy shows none, so it is hidden as a whole.
    assert [(g.name, g.tools) for g in listing.groups] == [("git", 1), ("time", 2)]
    assert dict(listing.hidden_groups) == {
        "deploy": "capability execute is not allowed in mode 'plan'",
        "files": "capability write is not allowed in mode 'plan'",
    }
    assert "restore" in hidden
    assert env.status.value == "failed"
    assert "group 'deploy' is hidden: capability execute" in env.summary
    assert "no group 'nope' in this mode (groups: git, time)" in unknown.summary


def test_load_tools_returns_the_expanded_schemas_through_the_registry(tmp_path: Path) -> None:
    with make_registry(tmp_path) as reg:
        env = reg.call(ToolCall("load_tools", {"group": "git"}, mode="plan"))
        full = reg.tool_listing("default", expand=["git"]).to_dict()["tools"]
        loaded = reg.call(ToolCall("load_tools", {"group": "git"}))
    assert env.ok
    # Only what the mode shows: git_commit writes, so plan does not get its schema.
    assert [t["name"] for t in env.data["tools"]] == ["git_status"]
    assert loaded.data["tools"] == [t for t in full if t["name"].startswith("git_")]
    steps = [s.step for s in env.record.steps]
    assert "policy" in steps and "execute" in steps  # policed like any other call


def test_policy_can_refuse_load_tools(tmp_path: Path) -> None:
    class NoDeployGroup:
        name = "no_deploy_group"

        def __call__(self, req: Any) -> PolicyDecision | None:
            if req.tool.name == "load_tools" and req.arguments.get("group") == "deploy":
                return PolicyDecision(Verdict.DENY, self.name, "deploy tools are off limits")
            return None

    with make_registry(tmp_path, policy=Policy(rules=[NoDeployGroup()])) as reg:
        env = reg.call(ToolCall("load_tools", {"group": "deploy"}))
    assert env.status.value == "rejected" and env.reject_stage is not None
    assert env.reject_stage.value == "policy"


def test_collapsing_needs_load_tools(tmp_path: Path) -> None:
    reg = ToolRegistry(workspace=tmp_path, home=tmp_path / ".home",
                       policy=Policy(modes=[Mode("default"), Mode("narrow", tools=frozenset(
                           {"git_status"}))]))
    with reg:
        reg.register(git_status)
        with pytest.raises(RegistrationError, match="no load_tools tool"):
            reg.tool_listing("default")
        register_registry_tools(reg)
        with pytest.raises(RegistrationError, match="not in the tool list of mode 'narrow'"):
            reg.tool_listing("narrow")
        assert [d.name for d in reg.tool_listing("narrow", expand=["git"]).tools] == [
            "git_status"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_provider_formats_collapse_too(tmp_path: Path, fmt: str) -> None:
    with make_registry(tmp_path) as reg:
        specs = providers.tool_specs(reg, "default", fmt, collapse=True)
        expanded = providers.tool_specs(reg, "default", fmt, collapse=True, expand=["git"])
        plain = providers.tool_specs(reg, "default", fmt)
    text = orjson.dumps(specs).decode()
    assert "git_status" not in text and "Version control of the workspace" in text
    assert len(specs) == 2 and len(expanded) == 4 and len(plain) == 8
    assert orjson.dumps(expanded).count(b"git_") >= 2


def test_schema_sizes_count_characters_and_estimate_tokens(tmp_path: Path) -> None:
    with make_registry(tmp_path) as reg:
        sizes = schema_sizes(reg, "default", "anthropic")
        git_specs = [s for s in providers.tool_specs(reg, "default", "anthropic")
                     if s["name"].startswith("git_")]
    full, collapsed, git = sizes["full"], sizes["collapsed"], sizes["group:git"]
    assert full is not None and collapsed is not None and git is not None
    assert collapsed.chars < full.chars
    assert git == schema_size(git_specs)
    assert git.chars == len(orjson.dumps(git_specs))
    assert git.tokens == -(-git.chars // CHARS_PER_TOKEN)


def test_a_group_name_and_writes_are_checked() -> None:
    def touch(path: str) -> str:
        return path

    with pytest.raises(RegistrationError, match="group must match"):
        tool(group="bad group")(touch)
    with pytest.raises(RegistrationError, match="must be one of path_params"):
        tool(writes=("path",))(touch)
    assert tool(path_params=("path",), writes=("path",))(touch).definition.writes == ("path",)


_SCRIPT = """
import sys
from pathlib import Path
sys.path.insert(0, {tests!r})
from test_listing import make_registry
reg = make_registry(Path({tmp!r}), order=int(sys.argv[1]))
out = reg.tool_listing(sys.argv[2], expand=sys.argv[3:]).to_json()
reg.shutdown()
sys.stdout.buffer.write(out)
"""


def _listing_in_process(tmp: Path, order: int, mode: str, *expand: str) -> bytes:
    script = _SCRIPT.format(tests=str(Path(__file__).parent), tmp=str(tmp))
    env = {**os.environ, "PYTHONHASHSEED": str(order % 1000 + 1000)}
    res = subprocess.run([sys.executable, "-c", script, str(order), mode, *expand],
                         capture_output=True, timeout=120, env=env)
    assert res.returncode == 0, res.stderr
    return res.stdout


def test_the_same_request_gives_the_same_bytes_across_processes(tmp_path: Path) -> None:
    # Two processes, different hash seeds, tools registered in opposite orders.
    a = _listing_in_process(tmp_path, 1, "plan", "time")
    b = _listing_in_process(tmp_path, -1, "plan", "time")
    assert a == b and b'"hidden_groups"' in a
    # The CLI's listing in a provider format, likewise.
    outs = [subprocess.run([str(TOOLTRACE), "tools", "--listing", "--format", "anthropic",
                            "--expand", "files", "--home", str(tmp_path / "h")],
                           capture_output=True, timeout=120,
                           env={**os.environ, "PYTHONHASHSEED": seed}, cwd=tmp_path)
            for seed in ("1", "2")]
    assert outs[0].returncode == 0, outs[0].stderr
    assert outs[0].stdout == outs[1].stdout
    specs = orjson.loads(outs[0].stdout)
    assert [s["name"] for s in specs] == ["load_tools", "read_text", "restore", "write_text"]


def test_tools_cli_reports_schema_sizes(tmp_path: Path) -> None:
    res = subprocess.run([str(TOOLTRACE), "tools", "--json", "--home", str(tmp_path / "h")],
                         capture_output=True, timeout=120, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    out = orjson.loads(res.stdout)
    by_name = {r["name"]: r for r in out["tools"]}
    assert by_name["write_text"]["group"] == "files" and by_name["load_tools"]["group"] is None
    sizes = {(r["mode"], r["part"]): r for r in out["schema_sizes"]["sizes"]}
    assert "characters / 4" in out["schema_sizes"]["estimate"]
    with default_registry(tmp_path, home=tmp_path / "h2") as reg:
        for mode in ("default", "plan"):
            want = schema_size(providers.tool_specs(reg, mode, "openai"))
            assert (sizes[(mode, "full")]["chars"], sizes[(mode, "full")]["tokens"]) == (
                want.chars, want.tokens)
            assert sizes[(mode, "collapsed")]["chars"] < want.chars
        assert {p for m, p in sizes if m == "default"} == {
            "full", "collapsed", "group:files", "group:shell"}


def test_a_real_mcp_servers_tools_are_a_group_named_for_it(tmp_path: Path) -> None:
    import asyncio
    import json

    from support.components import require_binary

    from tooltrace.mcp import McpProxy, load_config

    server = require_binary("mcp-server-time", "pip install mcp-server-time",
                            path=Path(sys.executable).parent / "mcp-server-time")
    config = tmp_path / "servers.toml"
    config.write_text(f'[proxy]\nhome = "home"\n\n[servers.clock]\n'
                      f'command = {json.dumps(server)}\nargs = ["--local-timezone", "UTC"]\n')

    async def listing() -> tuple[Any, Any, Any]:
        reg = ToolRegistry(workspace=tmp_path, home=tmp_path / "home")
        register_registry_tools(reg)
        proxy = McpProxy(load_config(config), registry=reg)
        await proxy.start()
        try:
            requests = [reg.definition(f"mcp.clock.{k}")
                        for k in ("sampling", "elicitation", "roots")]
            assert all(d is not None and not d.listed for d in requests)
            for mode in ("default", "plan"):
                vis = reg.visible_tools(mode)
                shown = [d.name for d in vis.visible] + [n for n, _ in vis.hidden]
                assert not any(n.endswith((".sampling", ".elicitation", ".roots"))
                               for n in shown), shown
            return (reg.tool_listing("default"),
                    await reg.acall(ToolCall("load_tools", {"group": "clock"})),
                    reg.definition("get_current_time"))
        finally:
            await proxy.aclose()
            reg.shutdown()

    result, loaded, upstream = asyncio.run(listing())
    assert upstream is not None and upstream.source == "mcp:clock"
    # The server's tools, and the registry entries through which its resources and prompts are
    # read (policed and audited like calls; the proxy's own tools/list leaves those out). Its
    # sampling, elicitation and roots requests are registered too, but are not tools: no
    # listing shows them, not even as hidden.
    server_tools = ["convert_time", "get_current_time"]
    protocol = ["mcp.clock.get_prompt", "mcp.clock.read_resource"]
    clock = next(g for g in result.groups if g.name == "clock")
    names = sorted([*server_tools, *protocol])
    assert clock.tools == len(names) and clock.description == "Tools: " + ", ".join(names)
    assert "get_current_time" not in [d.name for d in result.tools]
    assert loaded.ok
    assert [t["name"] for t in loaded.data["tools"]] == names
