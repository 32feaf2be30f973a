"""The documentation's examples, run by the test suite (Sybil), so that none can rot.

Collected pages: ``PAGES``. On them every fenced block in one of these languages runs:

- ``python``: executed, the blocks of a page one after another in one namespace;
- ``toml``: a policy file: ``tooltrace policy check --strict`` must find nothing in it;
- ``cedar``: Cedar policies: they must parse and validate against the built-in tools' schema;
- ``console``: each ``$ tooltrace ...`` line runs (in process); the lines shown under it must
  be what it prints, ``...`` standing for any text;
- ``bash``: each ``tooltrace ...`` line runs and must exit 0 (``<callId>``-style placeholders
  are filled in from the page's set-up).

A block that is not meant to run is marked on the page, invisibly: ``<!-- skip: next -->``.
Each page runs in a scratch directory of its own, with its own home (``TOOLTRACE_HOME``): the
files and audit trail its examples assume are made by ``page`` below, never shown on the page.
This file is no page of the site (``exclude_docs`` in mkdocs.yml).
"""

from __future__ import annotations

import doctest
import os
import shlex
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sybil import Example, Sybil
from sybil.evaluators.python import PythonEvaluator
from sybil.parsers.markdown import CodeBlockParser, SkipParser

#: The pages whose examples run (relative to docs/).
PAGES = (
    "getting-started.md",
    "guide/policy.md",
    "guide/policy-file.md",
    "guide/cedar.md",
    "guide/approvals.md",
    "guide/paths.md",
)


@dataclass
class Page:
    """What a page's examples may use: names for its Python blocks, placeholders for its
    commands, and the tools its policy files may name besides the built-in ones."""

    names: dict[str, Any] = field(default_factory=dict)
    placeholders: dict[str, str] = field(default_factory=dict)
    tools: list[Any] = field(default_factory=list)


# -- what each page assumes --------------------------------------------------------------------


def _getting_started(here: Path) -> Page:
    from tooltrace import create_registry, tool

    (here / "notes").mkdir()
    (here / "notes" / "todo.txt").write_text("- check p95\n")
    (here / "notes" / "a.txt").write_text("one two three\n")

    @tool(capability="execute", effect="external", timeout_s=0.1, cancellable=False)
    def deploy(service: str) -> str:
        """Deploy a service (slower than its deadline: the call ends unknown)."""
        time.sleep(0.5)
        return f"deployed {service}"

    reg = create_registry(here, cancel_grace_s=0.1, tools=[deploy])
    try:
        env = reg.call({"name": "read_text", "arguments": {"path": "notes/todo.txt"}})
        reg.call({"name": "deploy", "arguments": {"service": "api"}})
    finally:
        reg.shutdown(timeout_s=10.0)
    return Page(placeholders={"<callId>": env.call_id})


BROKEN_POLICY = """version = 1

[modes.review]
effects = ["none"]
capabilities = ["read", "writ"]
tools = ["read_text"]

[paths]
deny = ["**/.env"]

[[rules]]
id = "no-curl"
tools = ["run_command"]
args = { argv = "curl[" }
"""

TEAM_POLICY = """[[rules]]
id = "no-curl"
tools = ["run_command"]
args = { command = "curl" }

[[rules]]
id = "writes-outside-notes"
tools = ["write_text"]
paths = ["!notes/**"]
"""

EGRESS = """[[rules]]
id = "egress-allow-list"
capabilities = ["network", "execute"]
url_hosts = { allow = ["pypi.org", "*.github.com"] }
"""


def _policy_file(here: Path) -> Page:
    from tooltrace import ToolRegistry, create_registry, tool

    (here / "tooltrace.toml").write_text(BROKEN_POLICY)
    (here / "team.toml").write_text(TEAM_POLICY)
    (here / "observe.toml").write_text(EGRESS + 'mode = "observe"\n')
    (here / "enforce.toml").write_text(EGRESS)
    reg = create_registry(here, policy_file=here / "observe.toml")
    try:
        for url in ("https://pypi.org/simple", "https://paste.example/x", "https://github.com"):
            reg.call({"name": "run_command", "arguments": {"argv": ["echo", url]}})
    finally:
        reg.shutdown(timeout_s=10.0)

    @tool()
    def search(query: str) -> str:
        """Search the orders."""
        return f"found {query}"

    @tool(capability="write", effect="external")
    def refund(order: str) -> str:
        """Refund an order."""
        return f"refunded {order}"

    registry = ToolRegistry(workspace=here)
    registry.register(search)
    registry.register(refund)
    return Page(names={"registry": registry})


VALID_CEDAR = """@id("no-secret-files")
forbid (principal, action in Tooltrace::Action::"call", resource)
when { context has path && context.path like "*.env" };
"""
ACME_CEDAR = """@id("acme-writes-ask") @decision("ask")
forbid (principal in Tooltrace::Tenant::"acme", action, resource)
when { resource.effect == "local" };
"""
BROKEN_CEDAR = """// what `tooltrace policy check` finds in a draft
@id("no-env") forbid (principal, action, resource)
when { context has path && context.path like "*.env" };

@id("broken")
forbid (principal, action, resource)
when { resource.name == };

@id("colour")
forbid (principal, action, resource)
when {
  resource.capability == "execute" &&
  resource.colour == "red"
};

@id("robots") forbid (principal in Tooltrace::Robot::"r2", action, resource);
"""


def _cedar(here: Path) -> Page:
    (here / "agents.cedar").write_text(VALID_CEDAR)
    (here / "tenants").mkdir()
    (here / "tenants" / "acme.cedar").write_text(ACME_CEDAR)
    (here / "draft.cedar").write_text(BROKEN_CEDAR)
    return Page()


def _approvals(here: Path) -> Page:
    from tooltrace import (
        ApprovalDecision,
        ApprovalRequest,
        Policy,
        Principal,
        RequireApproval,
        ToolCall,
        create_registry,
        tool,
    )

    @tool(capability="network", effect="external")
    def deploy(service: str, region: str = "eu-west-1") -> str:
        """Deploy a service."""
        return f"deployed {service} to {region}"

    def approver(req: ApprovalRequest) -> ApprovalDecision:
        if req.arguments.get("service") == "api":
            return ApprovalDecision(True, who="alice", reason="release window",
                                    ttl=timedelta(minutes=30))
        return ApprovalDecision(False, who="alice", reason="not this one")

    reg = create_registry(here, approver=approver, tools=[deploy],
                          policy=Policy([RequireApproval(tools=frozenset({"deploy"}))]))
    ann = Principal(user="ann", tenant="acme")
    try:
        for service in ("api", "api", "db"):
            reg.call(ToolCall("deploy", {"service": service}, principal=ann))
    finally:
        reg.shutdown(timeout_s=10.0)
    return Page()


PREPARE: dict[str, Callable[[Path], Page]] = {
    "getting-started.md": _getting_started,
    "policy-file.md": _policy_file,
    "cedar.md": _cedar,
    "approvals.md": _approvals,
}


@pytest.fixture(scope="module")
def page(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
         ) -> Iterator[Page]:
    """A scratch directory and home for one page, with what its examples assume."""
    name = Path(str(request.path)).name
    here = tmp_path_factory.mktemp(name.removesuffix(".md"))
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(here)
        mp.setenv("TOOLTRACE_HOME", str(here / ".home"))
        mp.delenv("TOOLTRACE_POLICY", raising=False)
        mp.setenv("COLUMNS", "100")
        mp.setenv("NO_COLOR", "1")
        prepared = PREPARE.get(name, lambda _here: Page())(here)
        yield prepared
        for value in prepared.names.values():
            shutdown = getattr(value, "shutdown", None)
            if callable(shutdown):
                shutdown(timeout_s=5.0)


# -- the evaluators ---------------------------------------------------------------------------


def _page(example: Example) -> Page:
    found = example.namespace["page"]
    assert isinstance(found, Page)
    return found


_python = PythonEvaluator()


def run_python(example: Example) -> None:
    """A Python block, with the names the page's set-up provides."""
    ns = example.namespace
    if not ns.get("_page_names"):
        ns.update(_page(example).names)
        ns["_page_names"] = True
    _python(example)


def _definitions(page: Page) -> dict[str, Any]:
    from tooltrace import ToolRegistry
    from tooltrace.builtins import register_builtins

    reg = register_builtins(ToolRegistry())
    try:
        for t in page.tools:
            reg.register(t)
        return {n: d for n in reg.tool_names() if (d := reg.definition(n)) is not None}
    finally:
        reg.shutdown()


def _checked(example: Example, name: str) -> None:
    from tooltrace.policy.file import check_policy

    path = Path(name)
    path.write_text(str(example.parsed))
    found = check_policy(path, tools=_definitions(_page(example)), warnings=True)
    assert not found, "\n".join(str(p) for p in found)


def check_toml(example: Example) -> None:
    """A policy file: no problem and no warning (``tooltrace policy check --strict``)."""
    _checked(example, "example.toml")


def check_cedar(example: Example) -> None:
    """Cedar policies: they parse and validate against the built-in tools' schema."""
    _checked(example, "example.cedar")


def _run(line: str, page: Page) -> Any:
    from click.testing import CliRunner

    from tooltrace.cli import main

    for key, value in page.placeholders.items():
        line = line.replace(key, value)
    words = shlex.split(line, comments=True)
    if words and words[0].endswith("/tooltrace"):  # .venv/bin/tooltrace
        words[0] = "tooltrace"
    if not words or words[0] != "tooltrace":
        raise ValueError(f"{line!r} is no tooltrace command: mark the block <!-- skip: next -->")
    return CliRunner().invoke(main, words[1:], env=dict(os.environ))


def run_console(example: Example) -> None:
    """``$ tooltrace ...`` lines: each one's output must be what the block shows under it."""
    page = _page(example)
    checker = doctest.OutputChecker()
    blocks: list[tuple[str, list[str]]] = []
    for line in str(example.parsed).splitlines():
        if line.startswith("$ "):
            blocks.append((line[2:], []))
        elif blocks:
            blocks[-1][1].append(line)
    assert blocks, "a console block without a $ command"
    for command, shown in blocks:
        res = _run(command, page)
        want = "\n".join(shown).strip("\n")
        got = res.output
        if not want:
            assert res.exit_code == 0, f"$ {command} exited {res.exit_code}:\n{got}"
            continue
        flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
        assert checker.check_output(want + "\n", got, flags), (
            f"$ {command} printed (exit {res.exit_code}):\n{got}\nthe page shows:\n{want}")


def run_bash(example: Example) -> None:
    """Each ``tooltrace ...`` line must exit 0."""
    page = _page(example)
    for line in str(example.parsed).splitlines():
        if not shlex.split(line, comments=True):
            continue
        res = _run(line, page)
        assert res.exit_code == 0, f"{line} exited {res.exit_code}:\n{res.output}"


def _shut_down(namespace: dict[str, Any]) -> None:
    """Shut down the registries a page's examples made (their sinks flush)."""
    from tooltrace import ToolRegistry

    for value in list(namespace.values()):
        if isinstance(value, ToolRegistry):
            value.shutdown(timeout_s=5.0)


pytest_collect_file = Sybil(
    parsers=[
        SkipParser(),
        CodeBlockParser("python", run_python),
        CodeBlockParser("toml", check_toml),
        CodeBlockParser("cedar", check_cedar),
        CodeBlockParser("console", run_console),
        CodeBlockParser("bash", run_bash),
    ],
    patterns=list(PAGES),
    fixtures=["page"],
    teardown=_shut_down,
).pytest()
