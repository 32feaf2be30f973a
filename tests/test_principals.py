"""Principals bound per run: whom a run acts for (user, tenant, roles) is fixed by its first
call naming one; the agent acting may change within the run (a hand-off), each call recording
its own; the trail, ``tooltrace calls`` and ``tooltrace autopsy`` show which agent made a call.
Real registries, a real audit trail, the real CLI."""

from __future__ import annotations

from pathlib import Path

import orjson
from click.testing import CliRunner

from tooltrace import Principal, Status, ToolCall, ToolRegistry, tool
from tooltrace.cli import main
from tooltrace.integrations.adapter import acting_principal, make_call
from tooltrace.telemetry.audit import AuditSink


@tool()
def echo(text: str) -> str:
    """Return the text."""
    return text


def _registry(tmp_path: Path, **kwargs: object) -> ToolRegistry:
    reg = ToolRegistry(workspace=tmp_path, home=tmp_path / "home",
                       sinks=[AuditSink(tmp_path / "home")], **kwargs)  # type: ignore[arg-type]
    reg.register(echo)
    return reg


def _call(reg: ToolRegistry, run: str, p: Principal | None, text: str = "hi") -> Status:
    env = reg.call(ToolCall("echo", {"text": text}, run_id=run, principal=p))
    return env.status


def test_the_agent_may_change_within_a_run_but_whom_it_acts_for_may_not(
    tmp_path: Path,
) -> None:
    reg = _registry(tmp_path)
    try:
        ann = dict(user="ann", tenant="acme", roles=("dev",))
        triage, billing = Principal(agent="triage", **ann), Principal(agent="billing", **ann)
        env = reg.call(ToolCall("echo", {"text": "a"}, run_id="r1", principal=triage))
        assert env.ok and env.record.principal == triage
        env = reg.call(ToolCall("echo", {"text": "b"}, run_id="r1", principal=billing))
        assert env.ok and env.record.principal == billing  # a hand-off: not refused
        # Naming only the agent acts for the run's user, tenant and roles.
        env = reg.call(ToolCall("echo", {"text": "c"}, run_id="r1",
                                principal=Principal(agent="auditor")))
        assert env.ok and env.record.principal == Principal(agent="auditor", **ann)
        # Naming none acts as the principal that bound the run.
        env = reg.call(ToolCall("echo", {"text": "d"}, run_id="r1"))
        assert env.ok and env.record.principal == triage
        # Another user, tenant or roles is refused, whatever the agent.
        for other in (Principal(user="bob", agent="triage", tenant="acme", roles=("dev",)),
                      Principal(user="ann", agent="triage", tenant="evil", roles=("dev",)),
                      Principal(user="ann", agent="triage", tenant="acme", roles=("admin",)),
                      Principal(user="ann", agent="triage")):
            env = reg.call(ToolCall("echo", {"text": "x"}, run_id="r1", principal=other))
            # Refused, with the evidence: the tool, whom it asked to act for, the arguments.
            assert env.status is Status.REJECTED and env.record.principal == other
            assert (env.tool, env.record.source, env.record.args_redacted) == (
                "echo", "user", {"text": "x"})
            assert "user, tenant or roles" in env.summary
        # A run whose first calls name only agents is bound by its first call naming a user.
        assert _call(reg, "r2", Principal(agent="a")) is Status.OK
        assert _call(reg, "r2", Principal(user="ann", agent="b")) is Status.OK
        assert _call(reg, "r2", Principal(user="bob", agent="b")) is Status.REJECTED
        assert _call(reg, "r2", Principal(agent="c")) is Status.OK
    finally:
        reg.shutdown()


def test_the_registrys_principal_binds_its_run_and_agents_may_change(tmp_path: Path) -> None:
    ops = Principal(user="svc-deploy", agent="planner")
    reg = _registry(tmp_path, principal=ops)
    try:
        env = reg.call(ToolCall("echo", {"text": "a"}, principal=Principal(agent="executor")))
        assert env.ok and env.record.principal == Principal(user="svc-deploy", agent="executor")
        env = reg.call(ToolCall("echo", {"text": "a"}, principal=Principal(user="ann")))
        assert env.status is Status.REJECTED
    finally:
        reg.shutdown()


def test_a_frameworks_agent_name_fills_in_a_principal_naming_none() -> None:
    ann = Principal(user="ann", tenant="acme")
    assert acting_principal(ann, "Senior Research Analyst") == Principal(
        user="ann", agent="Senior-Research-Analyst", tenant="acme")
    assert acting_principal(None, "triage") == Principal(agent="triage")
    named = Principal(user="ann", agent="mine")
    assert acting_principal(named, "theirs") is named  # the caller's own agent wins
    assert acting_principal(ann, None) is ann and acting_principal(ann, "  ") is ann
    assert acting_principal(None, "x" * 300) == Principal(agent="x" * 128)
    reg = ToolRegistry()
    try:
        call = make_call(reg, "echo", {"text": "a"}, integration="t", provider_id=None,
                         mode="default", principal=ann, agent="triage")
    finally:
        reg.shutdown()
    assert call.principal == Principal(user="ann", agent="triage", tenant="acme")


def test_calls_and_autopsy_show_the_agent_of_each_call(tmp_path: Path) -> None:
    reg = _registry(tmp_path)
    ids = {}
    try:
        for agent in ("triage", "billing"):
            env = reg.call(ToolCall("echo", {"text": agent}, run_id="r",
                                    principal=Principal(user="ann", agent=agent, roles=("dev",))))
            ids[agent] = env.call_id
    finally:
        reg.shutdown()
    home = str(tmp_path / "home")
    runner = CliRunner()
    res = runner.invoke(main, ["calls", "--home", home, "--json"])
    assert res.exit_code == 0, res.output
    rows = orjson.loads(res.output)
    assert {(r["call_id"], r["user"], r["agent"]) for r in rows} == {
        (ids["triage"], "ann", "triage"), (ids["billing"], "ann", "billing")}
    res = runner.invoke(main, ["calls", "--home", home, "--agent", "billing", "--json"])
    assert [r["call_id"] for r in orjson.loads(res.output)] == [ids["billing"]]
    res = runner.invoke(main, ["calls", "--home", home, "--user", "bob", "--json"])
    assert orjson.loads(res.output) == []
    res = runner.invoke(main, ["calls", "--home", home, "--wide"], env={"COLUMNS": "200"})
    assert "agent" in res.output and "billing" in res.output
    res = runner.invoke(main, ["autopsy", ids["billing"], "--home", home])
    assert res.exit_code == 0, res.output
    line = next(ln for ln in res.output.splitlines() if ln.startswith("principal"))
    assert line.split(None, 1)[1] == 'user ann, agent billing, roles ["dev"]'


def test_a_refused_switch_keeps_its_evidence_in_the_trail(tmp_path: Path) -> None:
    key = "AKIA" + "R4ZQ8EXAMPLE2XWY"  # a fake credential: recorded redacted
    reg = _registry(tmp_path)
    try:
        ann = Principal(user="ann", tenant="acme")
        assert _call(reg, "r", ann) is Status.OK
        bob = Principal(user="bob", agent="mallory", tenant="acme")
        env = reg.call(ToolCall("echo", {"text": f"send {key}"}, run_id="r", principal=bob))
        stray = reg.call(ToolCall("no_such_tool", {"x": 1}, run_id="r", principal=bob))
    finally:
        reg.shutdown()
    assert env.status is stray.status is Status.REJECTED
    home = str(tmp_path / "home")
    res = CliRunner().invoke(main, ["calls", "--home", home, "--user", "bob", "--json"])
    rows = {r["call_id"]: r for r in orjson.loads(res.output)}
    assert (rows[env.call_id]["tool"], rows[env.call_id]["agent"]) == ("echo", "mallory")
    assert rows[stray.call_id]["tool"] == "_unregistered"
    res = CliRunner().invoke(main, ["autopsy", env.call_id, "--home", home, "--json"])
    got = orjson.loads(res.output)
    call = got["call"]
    assert (call["source"], call["reject_stage"]) == ("user", "params")
    assert call["args_redacted"]["text"].startswith("send [REDACTED:")
    assert key not in res.output
    (step,) = got["steps"]
    assert step["detail"] == {"reason": "principal_mismatch",
                              "run_principal": {"user": "ann", "tenant": "acme", "roles": []}}
    res = CliRunner().invoke(main, ["autopsy", stray.call_id, "--home", home, "--json"])
    assert orjson.loads(res.output)["steps"][0]["detail"]["requested"] == "no_such_tool"
