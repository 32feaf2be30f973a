"""The official MCP conformance suite (npm ``@modelcontextprotocol/conformance`` 0.2.0-alpha.11)
run against the suite's own reference server directly and through the proxy: every scenario
that passes directly passes through the proxy, with the reference server as an HTTP upstream
and, through ``tests/mcp_servers/reference_stdio.ts``, as a stdio upstream; both the default
suite (the 2025-11-25 wire) and ``--requirements 2026-07-28``.

A scenario passes when none of its checks is a ``FAILURE`` (warnings and skips do not fail it,
as in the suite's own summary). Check by check, too, every check that succeeds directly succeeds
through the proxy, but for the few named in ``KNOWN`` with the reason, and the checks of the
tasks extension (``tasks-*``), which the proxy does not carry.

The suite, Node 22 and the reference server (vendored unchanged in
``tests/mcp_servers/reference/``) are installed by ``.ci/setup.d/42-mcp-conformance.sh``. One
reference server serves the whole module; each suite runs once per mode.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.components import missing
from support.otlp import free_port
from test_mcp_proxy import REPO

CACHE = REPO / ".ci" / "cache"
SUITE_DIR = CACHE / "mcp-conformance"
NODE = SUITE_DIR / "node_modules" / ".bin" / "node"
SUITE = SUITE_DIR / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
REFERENCE = CACHE / "mcp-reference"
TSX = REFERENCE / "node_modules" / "tsx" / "dist" / "cli.mjs"
SUITES = {"default": [], "2026-07-28": ["--requirements", "2026-07-28"]}

Results = dict[str, dict[str, dict[str, str]]]  # suite -> scenario -> check -> status
#: Checks that succeed directly and not through the proxy, and why.
KNOWN = {
    "sep-2575-server-sends-tools-list-changed-on-subscription":
        "the scenario changes the list through a tool the server does not list "
        "(test_trigger_tool_change): the proxy calls only the tools a server lists",
    "sep-2575-server-sends-prompts-list-changed-on-subscription":
        "as above (test_trigger_prompt_change)",
}


def _installed() -> None:
    for path in (NODE, SUITE, TSX, REFERENCE / "everything-server.ts",
                 REFERENCE / "reference_stdio.ts"):
        if not path.exists():
            missing(f"the MCP conformance suite or its reference server is not installed "
                    f"({path.name} missing); run bash .ci/setup.d/42-mcp-conformance.sh")


def _wait_listening(url: str, proc: subprocess.Popen[bytes]) -> None:
    for _ in range(600):
        if proc.poll() is not None:
            raise AssertionError(f"the server exited ({proc.returncode}) before listening")
        try:
            urllib.request.urlopen(url, timeout=2).close()
            return
        except urllib.error.HTTPError:
            return  # it answers (a GET without a session is refused): it listens
        except OSError:
            time.sleep(0.1)
    raise AssertionError("the server did not listen within 60 s")


def _serve(cmd: list[str], env: dict[str, str], url: str, cwd: Path) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_listening(url, proc)
    except BaseException:
        _stop(proc)
        raise
    return proc


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=30)


def _run_suites(url: str, out: Path) -> Results:
    results: Results = {}
    for suite, args in SUITES.items():
        where = out / suite
        subprocess.run([str(NODE), str(SUITE), "server", "--url", url, *args, "-o", str(where)],
                       cwd=SUITE_DIR, capture_output=True, timeout=600, check=False)
        scenarios: dict[str, dict[str, str]] = {}
        for f in sorted(where.glob("*/checks.json")):
            scenario = re.sub(r"-\d{4}-\d\d-\d\dT.*$", "", f.parent.name.removeprefix("server-"))
            scenarios[scenario] = {str(c["id"]): str(c["status"])
                                   for c in json.loads(f.read_text())}
        assert scenarios, f"the {suite} suite wrote no results"
        results[suite] = scenarios
    return results


def _passed(scenarios: dict[str, dict[str, str]]) -> set[str]:
    return {s for s, checks in scenarios.items() if "FAILURE" not in checks.values()}


def _succeeded(scenarios: dict[str, dict[str, str]]) -> set[tuple[str, str]]:
    return {(s, c) for s, checks in scenarios.items() for c, status in checks.items()
            if status == "SUCCESS" and not s.startswith("tasks-")}


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The reference server over streamable HTTP: its URL."""
    _installed()
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    server = _serve([str(NODE), str(TSX), "everything-server.ts"],
                    {**os.environ, "PORT": str(port)}, url, REFERENCE)
    try:
        yield url
    finally:
        _stop(server)


@pytest.fixture(scope="module")
def direct(reference: str, tmp_path_factory: pytest.TempPathFactory) -> Results:
    """Both suites run against the reference server itself."""
    return _run_suites(reference, tmp_path_factory.mktemp("direct"))


def _proxied(upstream: str, reference: str, tmp: Path) -> Results:
    if upstream == "http":
        server = f'url = "{reference}"'
    else:
        server = (f'command = {json.dumps(str(NODE))}\n'
                  f'args = [{json.dumps(str(TSX))}, "reference_stdio.ts"]\n'
                  f'cwd = {json.dumps(str(REFERENCE))}')
    config = tmp / "proxy.toml"
    config.write_text(f"[servers.ref]\n{server}\n")
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    proxy = _serve([sys.executable, "-m", "tooltrace.mcp", "proxy", "--home", str(tmp / "home"),
                    "--http", f"127.0.0.1:{port}", "--config", str(config)],
                   {**os.environ, "PYTHONPATH": str(REPO), "TOOLTRACE_LOG_LEVEL": "error"},
                   url, tmp)
    try:
        return _run_suites(url, tmp / "out")
    finally:
        _stop(proxy)


@pytest.mark.parametrize("upstream", ["http", "stdio"])
def test_every_scenario_that_passes_directly_passes_through_the_proxy(
        upstream: str, reference: str, direct: Results, tmp_path: Path) -> None:
    proxied = _proxied(upstream, reference, tmp_path)
    lost: dict[str, list[str]] = {}
    for suite, scenarios in direct.items():
        passed_direct, passed_proxy = _passed(scenarios), _passed(proxied[suite])
        print(f"\n{suite} suite, {upstream} upstream: {len(scenarios)} scenarios, "
              f"{len(passed_direct)} pass directly, {len(passed_proxy)} through the proxy "
              f"(gained: {sorted(passed_proxy - passed_direct)})")
        if passed_direct - passed_proxy:
            lost[suite] = sorted(passed_direct - passed_proxy)
        checks = {c for _s, c in _succeeded(scenarios) - _succeeded(proxied[suite])}
        if checks - KNOWN.keys():
            lost[f"{suite} checks"] = sorted(checks - KNOWN.keys())
    assert not lost, lost
    # The reference server implements what the scenarios call: most pass directly.
    assert len(_passed(direct["default"])) >= 30
    assert len(_passed(direct["2026-07-28"])) >= 30
