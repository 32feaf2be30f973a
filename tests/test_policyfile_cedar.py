"""Cedar policies (real cedarpy): the same cases as the TOML rules, through real calls; bad Cedar
files placed at file:line:column; the generated schema; observe mode and what-if."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner
from support.components import extra, require_module

from tooltrace import create_registry
from tooltrace.cli import main
from tooltrace.demo import run_demo
from tooltrace.model import Principal, Status, ToolCall
from tooltrace.policy.file import PolicyFileError, check_policy
from tooltrace.telemetry.metrics import MetricsSink, serve_metrics

cedarpy = require_module("cedarpy", extra("cedar"))

POLICIES = """// The same cases as the TOML policy file's tests.
@id("no-job-kill")
forbid (principal, action == Tooltrace::Action::"job_kill", resource);

@id("no-external") @reason("external effects are off in review")
forbid (principal, action, resource)
when { resource.effect == "external" && context.mode == "review" };

@id("no-secrets")
forbid (principal, action in Tooltrace::Action::"call", resource)
when { context has path && (context.path like "*.env" || context.path like "*.pem") };

@id("interns-no-commands")
forbid (principal in Tooltrace::Role::"intern", action, resource)
when { resource.capability == "execute" };

@id("acme-writes-ask") @decision("ask")
forbid (principal in Tooltrace::Tenant::"acme", action, resource)
when { resource.effect == "local" };

@id("no-curl") @mode("observe")
forbid (principal, action == Tooltrace::Action::"run_command", resource)
when { context.args has argv && context.args.argv.contains("curl") };
"""
TOML = """
[modes.review]
capabilities = ["read", "execute"]

[cedar]
policies = ["agents.cedar"]
"""


def _policy(tmp_path: Path, cedar: str, toml: str | None = TOML) -> Path:
    (tmp_path / "agents.cedar").write_text(cedar)
    if toml is None:
        return tmp_path / "agents.cedar"
    f = tmp_path / "tooltrace.toml"
    f.write_text(toml)
    return f


def _reg(tmp_path: Path, policy: Path, **kw: object):  # type: ignore[no-untyped-def]
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    (ws / "a.txt").write_text("a")
    (ws / ".env").write_text("X=1")
    return create_registry(ws, home=tmp_path / "h", policy_file=policy, logging=False, **kw)


def _decider(env) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    st = [s for s in env.steps if s.step == "policy"][-1]
    return st.decider, st.decision


def test_cedar_policies_decide_and_name_themselves(tmp_path: Path) -> None:
    reg = _reg(tmp_path, _policy(tmp_path, POLICIES), metrics=False)
    try:
        call = reg.call
        env = call(ToolCall("job_kill", {"job_id": "x"}))
        assert (env.status, _decider(env)) == (Status.REJECTED, ("policy:no-job-kill", "deny"))
        env = call(ToolCall("run_command", {"argv": ["echo", "hi"]}, mode="review"))
        assert _decider(env) == ("policy:no-external", "deny")
        assert "external effects are off in review" in env.summary
        assert env.ok is False and call(ToolCall("run_command", {"argv": ["echo"]})).ok
        assert _decider(call(ToolCall("read_text", {"path": ".env"}))) == (
            "policy:no-secrets", "deny")
        assert call(ToolCall("read_text", {"path": "a.txt"})).ok
        intern = Principal(user="ann", roles=("dev", "intern"))
        env = call(ToolCall("run_command", {"argv": ["echo"]}, run_id="r1", principal=intern))
        assert _decider(env) == ("policy:interns-no-commands", "deny")
        dev = Principal(user="dan", roles=("dev",))
        assert call(ToolCall("run_command", {"argv": ["echo"]}, run_id="r2", principal=dev)).ok
        acme = Principal(agent="bot", tenant="acme")
        env = call(ToolCall("write_text", {"path": "b.txt", "text": "x"}, run_id="r3",
                            principal=acme))
        assert _decider(env) == ("policy:acme-writes-ask", "ask")
        assert env.status is Status.REJECTED  # no approver: an ask is refused
        assert call(ToolCall("write_text", {"path": "b.txt", "text": "x"})).ok
        # The built-in rules still apply beside Cedar.
        env = call(ToolCall("run_command", {"argv": ["rm", "-rf", "/"]}))
        assert _decider(env) == ("policy:denied_command", "deny")
    finally:
        reg.shutdown()


def test_observe_mode_records_the_cedar_policy_in_the_step_and_the_metric(
    tmp_path: Path,
) -> None:
    sink = MetricsSink()
    reg = _reg(tmp_path, _policy(tmp_path, POLICIES), metrics=False, extra_sinks=(sink,))
    try:
        for _ in range(3):
            env = reg.call(ToolCall("run_command", {"argv": ["echo", "curl"]}))
            assert env.ok and _decider(env) == ("policy:no-curl", "observe_deny")
        assert _decider(reg.call(ToolCall("run_command", {"argv": ["echo"]})))[1] == "allow"
        cid = env.call_id
    finally:
        reg.shutdown()
    labels = {"tool": "run_command", "rule": "no-curl", "decision": "observe_deny"}
    assert sink.registry.get_sample_value("tooltrace_policy_observed_total", labels) == 3
    # The Cedar id is in the closed set of rule ids, so it is the label a scrape sees.
    from support.prom import Prometheus

    with serve_metrics(0, registry=sink) as srv, Prometheus([f"127.0.0.1:{srv.port}"]) as prom:
        prom.wait_for_up()
        prom.wait_until('sum(tooltrace_policy_observed_total{tool="run_command",'
                        'rule="no-curl",decision="observe_deny"})', lambda v: v == 3)
        assert prom.value("count(tooltrace_policy_observed_total)") == 1
    res = CliRunner().invoke(main, ["autopsy", "--home", str(tmp_path / "h"), cid])
    assert res.exit_code == 0 and "policy:no-curl" in res.output
    assert "observe_deny" in res.output


def test_default_deny_needs_a_permit_and_a_cedar_file_can_stand_alone(tmp_path: Path) -> None:
    strict = '[cedar]\npolicies = ["agents.cedar"]\ndefault = "deny"\n'
    cedar = ('@id("reads") permit (principal, action, resource)'
             ' when { resource.capability == "read" };\n')
    reg = _reg(tmp_path, _policy(tmp_path, cedar, strict), metrics=False)
    try:
        assert reg.call(ToolCall("read_text", {"path": "a.txt"})).ok
        env = reg.call(ToolCall("write_text", {"path": "b.txt", "text": "x"}))
        assert _decider(env) == ("policy:cedar", "deny")
    finally:
        reg.shutdown()
    alone = _policy(tmp_path / "ws", POLICIES, None)
    reg = _reg(tmp_path, alone, metrics=False)
    try:
        assert _decider(reg.call(ToolCall("job_kill", {"job_id": "x"}))) == (
            "policy:no-job-kill", "deny")
        assert reg.call(ToolCall("write_text", {"path": "b.txt", "text": "x"})).ok
    finally:
        reg.shutdown()


BAD_SYNTAX = """@id("fine")
forbid (principal, action, resource) when { resource.effect == "local" };

// the next two do not parse
forbid (principal, action, resource) when { resource.effect == };

  permit (principal, actoin, resource);
"""
BAD_SCHEMA = """@id("colour")
forbid (principal, action, resource) when { resource.colour == "red" };

@id("robots")
forbid (principal is Tooltrace::Robot, action, resource);

@id("maybe") @decision("maybe")
forbid (principal, action, resource);

@id("fine")
forbid (principal, action == Tooltrace::Action::"no_such_tool", resource);
"""


@pytest.mark.parametrize(("text", "want"), [
    # Each problem at what it is about, not at the policy's first line: the token that does
    # not parse, the attribute, entity type or action the schema lacks, the annotation.
    (BAD_SYNTAX, [(5, 64, "Cedar syntax: unexpected token `}`"),
                  (7, 22, "Cedar syntax: found an invalid variable in the policy scope")]),
    (BAD_SCHEMA, [(2, 54, "Cedar schema: policy colour: attribute `colour` on entity type"),
                  (5, 22, "Cedar schema: policy robots: unrecognized entity type"),
                  (7, 14, "policy maybe: @decision must be one of deny, ask"),
                  (11, 30, "Cedar schema: policy fine: unrecognized action")]),
])
def test_a_bad_cedar_file_is_placed_and_refused(
    tmp_path: Path, text: str, want: list[tuple[int, int, str]]
) -> None:
    f = _policy(tmp_path, text)
    res = CliRunner().invoke(main, ["policy", "check", str(f), "--json"])
    assert res.exit_code == 2, res.output
    got = [(p["line"], p["column"], p["message"]) for p in orjson.loads(res.output)["problems"]]
    for line, col, start in want:
        assert any((g[0], g[1]) == (line, col) and g[2].startswith(start) for g in got), got
    res = CliRunner().invoke(main, ["policy", "check", str(f)])
    assert f"{tmp_path / 'agents.cedar'}:{want[0][0]}:{want[0][1]}: " in res.output
    with pytest.raises(PolicyFileError) as info:
        _reg(tmp_path, f)
    assert info.value.problems[0].file == str(tmp_path / "agents.cedar")


def test_cedar_ids_may_not_clash_and_annotations_belong_to_forbids(tmp_path: Path) -> None:
    toml = '[[rules]]\nid = "mine"\n\n[cedar]\npolicies = ["agents.cedar"]\n'
    cedar = ('@id("mine") forbid (principal, action, resource);\n'
             '@decision("ask") permit (principal, action, resource);\n'
             '@id("cedar") forbid (principal, action, resource);\n')
    msgs = [(p.line, p.message) for p in check_policy(_policy(tmp_path, cedar, toml))]
    assert [(line, m.split(" (")[0]) for line, m in msgs] == [
        (1, "policy id 'mine' is used twice"),
        (2, "policy policy1: @decision is for forbid policies"),
        (3, "policy id 'cedar' is used twice"),
    ]
    missing = tmp_path / "none.toml"
    missing.write_text('[cedar]\npolicies = ["nope.cedar"]\n')
    assert [p.message for p in check_policy(missing)] == [
        "cannot read the Cedar file: No such file or directory"]


def test_the_cedar_schema_command_prints_a_schema_cedar_accepts(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["policy", "cedar-schema"])
    assert res.exit_code == 0, res.output
    schema = cedarpy.Schema.from_str(res.output)
    assert 'action "run_command" in ["call"]' in res.output
    assert '"argv"?: Set<String>' in res.output
    ok = cedarpy.validate_policies(POLICIES.replace('context.mode == "review"', "true"), schema)
    assert ok.validation_passed, [str(e) for e in ok.errors]
    res = CliRunner().invoke(main, ["policy", "cedar-schema", "--mode", "plan"])
    assert res.exit_code == 0 and 'action "read_text"' in res.output
    assert "run_command" not in res.output and "write_text" not in res.output
    res = CliRunner().invoke(main, ["policy", "cedar-schema", "--mode", "review"])
    assert res.exit_code == 2 and "unknown mode 'review'" in res.output
    f = _policy(tmp_path, POLICIES)
    res = CliRunner().invoke(main, ["policy", "cedar-schema", "--policy", str(f),
                                    "--mode", "review"])
    assert res.exit_code == 0 and "run_command" in res.output and "write_text" not in res.output


TIGHT = """@id("writes") @decision("ask")
forbid (principal, action == Tooltrace::Action::"write_text", resource);

@id("no-notes-reads")
forbid (principal, action == Tooltrace::Action::"read_text", resource)
when { context has path && context.path like "notes/*" };

@id("no-python")
forbid (principal, action == Tooltrace::Action::"run_command", resource)
when { context.args has argv && context.args.argv.contains("python3") };
"""
LOOSE_TOML = """tools = ["scan_index", "deploy_service"]

[builtin.denied_command]
enabled = false

[cedar]
policies = ["agents.cedar"]
"""
LOOSE = """@id("report-writes") @decision("ask")
forbid (principal, action == Tooltrace::Action::"write_text", resource)
when { context has path && context.path like "reports/*" };
"""


@pytest.fixture(scope="module")
def trail(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("cedar-whatif") / "home"
    run_demo(home=home)
    return home


def _whatif(trail: Path, policy: Path) -> tuple[int, dict]:  # type: ignore[type-arg]
    res = CliRunner().invoke(main, ["policy", "test", str(policy), "--home", str(trail),
                                    "--tools", "tooltrace.demo:DEMO_TOOLS", "--json"])
    return res.exit_code, orjson.loads(res.output)


def _groups(d: dict, key: str) -> list[tuple[str, str, str, str, int]]:  # type: ignore[type-arg]
    return [(c["tool"], c["rule"], c["before"], c["after"], c["count"]) for c in d[key]]


def test_what_if_replays_the_trail_through_a_tightening_cedar_policy(
    trail: Path, tmp_path: Path
) -> None:
    code, d = _whatif(trail, _policy(tmp_path, TIGHT, None))
    assert code == 1
    # Cedar sees the arguments redacted, as the trail holds them: nothing is undecidable.
    assert (d["changed"], d["undecidable"]) == (3, 0)
    assert _groups(d, "changes") == [
        ("read_text", "no-notes-reads", "allow", "deny", 2),
        ("run_command", "no-python", "allow", "deny", 1),
    ]


def test_what_if_replays_the_trail_through_a_loosening_cedar_policy(
    trail: Path, tmp_path: Path
) -> None:
    code, d = _whatif(trail, _policy(tmp_path, LOOSE, LOOSE_TOML))
    assert code == 1
    assert (d["changed"], d["undecidable"]) == (2, 0)
    assert _groups(d, "changes") == [
        ("run_command", "denied_command", "deny", "allow", 1),
        ("write_text", "writes_need_approval", "ask", "allow", 1),
    ]


def test_every_resolved_path_is_asked_and_unnamed_tools_skip_cedar(tmp_path: Path) -> None:
    from tooltrace import ToolDefinition
    from tooltrace.policy import PolicyRequest, Verdict
    from tooltrace.policy.file import load_policy

    schema = {"type": "object", "properties": {"src": {"type": "string"},
                                               "dst": {"type": "string"},
                                               "n": {"type": "number"}}}
    copy = ToolDefinition(name="copy", description="copy a file", parameters=schema,
                          path_params=("src", "dst"))
    echo = ToolDefinition(name="echo", description="echo", parameters=schema)
    cedar = ('@id("no-env") forbid (principal, action == Tooltrace::Action::"copy", resource)'
             ' when { context has path && context.path like "*.env" };\n'
             '@id("no-x") forbid (principal, action == Tooltrace::Action::"copy", resource)'
             ' when { context.args has src && context.args.src == "x" };\n')
    f = _policy(tmp_path, cedar, None)
    rule = next(r for r in load_policy(f, tools={"copy": copy, "echo": echo}).compiled.policy
                .rules if r.name == "cedar")
    req = PolicyRequest(copy, {"src": "a.txt", "dst": "b.env", "n": 1.5}, "default", "r", "c",
                        {"src": "a.txt", "dst": "b.env"})
    d = rule(req)
    assert d is not None and (d.verdict, d.rule) == (Verdict.DENY, "no-env")
    ok = PolicyRequest(copy, {"src": "a.txt", "dst": "b.txt"}, "default", "r", "c",
                       {"src": "a.txt", "dst": "b.txt"})
    assert rule(ok) is None
    # Only string, integer, boolean and string-list arguments reach Cedar.
    assert [orjson.loads(r["context"])["args"] for r in rule.requests(req)] == [
        {"src": "a.txt", "dst": "b.env"}] * 2
    assert rule.applies_to(copy) and not rule.applies_to(echo)


def test_cedar_sees_arguments_as_the_registrys_redactor_leaves_them(tmp_path: Path) -> None:
    cedar = ('@id("no-secret-echo") forbid (principal,'
             ' action == Tooltrace::Action::"run_command", resource)'
             ' when { context.args has argv && context.args.argv.contains("hunter2-pass") };\n'
             '@id("redacted-echo") @mode("observe") forbid (principal,'
             ' action == Tooltrace::Action::"run_command", resource)'
             ' when { context.args has argv &&'
             ' context.args.argv.contains("[REDACTED:registered]") };\n')
    reg = _reg(tmp_path, _policy(tmp_path, cedar, None), metrics=False)
    try:
        reg.redactor.register_value("hunter2-pass")
        env = reg.call(ToolCall("run_command", {"argv": ["echo", "hunter2-pass"]}))
        # The policy naming the raw value never matches: Cedar never sees the secret.
        assert env.ok and _decider(env) == ("policy:redacted-echo", "observe_deny")
        assert "hunter2" not in orjson.dumps(env.to_dict()).decode()
    finally:
        reg.shutdown()


def test_only_cedar_policies_rules_and_limits_naming_an_entry_that_is_not_a_tool_decide_it(
        tmp_path: Path) -> None:
    # The MCP proxy's sampling, elicitation and roots entries (listed=False): an open-scope
    # forbid is about tools; a policy whose scope names the entry decides it.
    from tooltrace import ToolDefinition
    from tooltrace.policy import PolicyRequest, Verdict
    from tooltrace.policy.file import load_policy

    def entry(name: str) -> ToolDefinition:
        return ToolDefinition(name=name, description="", parameters={"type": "object"},
                              listed=False)

    cedar = ('@id("nothing") forbid (principal, action, resource);\n'
             '@id("no-roots") forbid (principal, action, resource == Tooltrace::Tool::'
             '"mcp.fs.roots");\n')
    f = _policy(tmp_path, cedar, """
[cedar]
policies = ["agents.cedar"]

[[rules]]
id = "no-git-sampling"
tools = ["mcp.git.sampling"]

[[limits]]
id = "one-elicitation"
tools = ["mcp.fs.elicitation"]
max_calls = 1
""")
    policy = load_policy(f, tools=None).compiled.policy
    tool = ToolDefinition(name="t", description="", parameters={"type": "object"})

    def verdict(d: ToolDefinition, call: str = "c") -> Verdict | None:
        got, _ = policy.evaluate(PolicyRequest(d, {}, "default", "r", call))
        return None if got is None else got.verdict

    assert verdict(tool) is Verdict.DENY  # the open forbid still holds for tools
    assert verdict(entry("mcp.fs.sampling")) is None
    assert verdict(entry("mcp.git.sampling")) is Verdict.DENY  # a [[rules]] entry names it
    assert verdict(entry("mcp.fs.roots")) is Verdict.DENY
    assert verdict(entry("mcp.fs.elicitation"), "c1") is None
    assert verdict(entry("mcp.fs.elicitation"), "c2") is Verdict.DENY  # over its limit
