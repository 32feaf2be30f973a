"""``tooltrace approvals`` in a real subprocess over a real trail: who, when, tool, digest
prefix, reason (redacted), expiry and the calls covered; ``--json``, ``--tool``, ``--since``;
80 columns."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from tooltrace import (
    ApprovalDecision,
    ApprovalRequest,
    Policy,
    Principal,
    RequireApproval,
    Status,
    ToolCall,
    create_registry,
    tool,
)
from tooltrace.cli import main

TOOLTRACE = Path(sys.executable).parent / "tooltrace"
SECRET = "sk-ant-api03-" + "Zq8Xv3Lm5Np7Rt9Wy2Bc4Df6Gh8Jk0Mn2Pq4St6Uv8Wx0Yz"


@tool(capability="network", effect="external")
def deploy(service: str) -> str:
    """Pretend to deploy a service."""
    return f"deployed {service}"


@tool(capability="network", effect="external")
def page(who: str) -> str:
    """Pretend to page someone."""
    return f"paged {who}"


@pytest.fixture(scope="module")
def trail(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    base = tmp_path_factory.mktemp("approvals")
    (base / "ws").mkdir()

    def approver(req: ApprovalRequest) -> ApprovalDecision:
        if req.tool == "page":
            return ApprovalDecision(False, who="bob", reason="not at night")
        return ApprovalDecision(True, who="alice@example.com", ttl=timedelta(hours=1),
                                reason=f"release window; key {SECRET}")

    reg = create_registry(base / "ws", home=base / "home", tracing=False, metrics=False,
                          logging=False, builtins=False, approver=approver,
                          policy=Policy([RequireApproval(tools=frozenset({"deploy", "page"}))]))
    reg.register(deploy)
    reg.register(page)
    ann = Principal(user="ann", tenant="acme", roles=("ops",))
    envs = [reg.call(ToolCall("deploy", {"service": "api"}, principal=ann)) for _ in range(3)]
    envs.append(reg.call(ToolCall("page", {"who": "carol"}, principal=ann)))
    reg.shutdown()
    assert [e.status for e in envs] == [Status.OK] * 3 + [Status.REJECTED]
    detail = next(s.detail for s in envs[0].steps if s.step == "approval")
    return base / "home", {"deploy": [e.call_id for e in envs[:3]], "page": envs[3].call_id,
                           "approval_id": detail["approval_id"],
                           "sha256": detail["args_sha256"]}


def _shortest(cid: str, every: list[str]) -> str:
    """``cid``'s shortest prefix, 13 characters at least, that no other id starts with."""
    return next(cid[:n] for n in range(13, len(cid) + 1)
                if not any(o.startswith(cid[:n]) for o in every if o != cid))


def _covered(facts: dict[str, Any]) -> str:
    """The calls cell of the deploy approval: the first two covered calls' prefixes unique in
    the trail (its four calls), then how many more."""
    every = [*facts["deploy"], facts["page"]]
    return f"{_shortest(facts['deploy'][0], every)},{_shortest(facts['deploy'][1], every)},+1"


def run(home: Path, *args: str, columns: int = 80) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": str(columns)}
    return subprocess.run([str(TOOLTRACE), "approvals", "--home", str(home), *args],
                          capture_output=True, text=True, env=env, timeout=120)


def test_lists_who_when_tool_digest_and_calls_at_80_columns(
        trail: tuple[Path, dict[str, Any]]) -> None:
    home, facts = trail
    res = run(home)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines and max(map(len, lines)) <= 80
    # Too narrow for the table: one block per approval, the reason and the expiry (and for
    # whom) before the ids.
    deploy_block = res.stdout.split("\n\n")[1].splitlines()  # newest first: page, deploy
    assert deploy_block[0].endswith("approve  deploy  by alice@example.com")
    labels = [ln.split()[0] for ln in deploy_block[1:] if ln.startswith("  ") and
              not ln.startswith("   ")]
    assert labels == ["reason", "expires", "principal", "calls", "sha256"]
    text = res.stdout
    assert "release window" in text and "user ann, tenant acme, roles ops" in text
    assert "alice@example.com" in text and "bob" in text
    assert facts["sha256"][:10] in text
    assert _covered(facts) in text
    assert "deploy" in text and "page" in text and "deny" in text
    assert SECRET not in text and "sk-ant" not in text
    for out in (run(home, "--wide", columns=80).stdout, run(home, columns=250).stdout):
        table = [ln for ln in out.splitlines() if ln[:1] in "┏┃┡│└"]
        assert table and table[1].split("┃")[1:-1] == [
            f" {c:<{len(h) - 2}} " for c, h in zip(
                ("when", "who", "decision", "tool", "reason", "expires", "principal",
                 "sha256", "calls"), table[1].split("┃")[1:-1], strict=True)]
        assert _covered(facts) in out
        assert "user ann, tenant acme, roles ops" in out


def test_json_has_the_full_record_and_every_covered_call(
        trail: tuple[Path, dict[str, Any]]) -> None:
    home, facts = trail
    res = run(home, "--json")
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)
    assert len(rows) == 2 and SECRET not in res.stdout
    (dep,) = [r for r in rows if r["tool"] == "deploy"]
    assert dep["approval_id"] == facts["approval_id"] and dep["args_sha256"] == facts["sha256"]
    assert sorted(dep["covered_calls"]) == sorted(facts["deploy"]) and dep["uses"] == 3
    assert dep["decision"] == "approve" and dep["expires_at"].endswith("Z")
    assert dep["approver"] == "alice@example.com" and "release window" in dep["reason"]
    assert (dep["principal_user"], dep["principal_tenant"], dep["principal_roles"]) == (
        "ann", "acme", ["ops"])
    (pg,) = [r for r in rows if r["tool"] == "page"]
    assert pg["decision"] == "deny" and pg["covered_calls"] == [] and pg["expires_at"] is None
    assert pg["call_id"] == facts["page"] and pg["reason"] == "not at night"


def test_filters_by_tool_and_since(trail: tuple[Path, dict[str, Any]]) -> None:
    home, _facts = trail

    def cli(*args: str) -> Result:
        return CliRunner().invoke(main, ["approvals", "--home", str(home), *args])

    only = json.loads(cli("--json", "--tool", "page").output)
    assert [r["tool"] for r in only] == ["page"]
    assert len(json.loads(cli("--json", "--since", "7d").output)) == 2
    future = cli("--since", "2999-01-01T00:00:00")
    assert future.exit_code == 0 and "no approvals match" in future.output
    assert cli("--since", "soon").exit_code == 2
    missing = run(home.parent / "nothing")  # the real command, exit code and message
    assert missing.returncode == 1 and "no audit trail" in missing.stderr


def test_autopsy_names_the_approval_a_call_reused_and_its_digest(
        trail: tuple[Path, dict[str, Any]]) -> None:
    home, facts = trail
    res = CliRunner().invoke(main, ["autopsy", facts["deploy"][2], "--home", str(home)],
                             env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert res.exit_code == 0, res.output
    line = next(ln for ln in res.output.splitlines() if ln.startswith("approval "))
    assert f"approve by approval:{facts['approval_id']}" in line
    assert f"arguments sha256 {facts['sha256'][:12]}" in line
