"""The policy file: every problem placed at file:line:column, compiled to the one policy engine,
read by create_registry and the CLI; observe mode and principals through real calls."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from tooltrace import create_registry
from tooltrace.audit import AuditStore
from tooltrace.cli import main
from tooltrace.model import Principal, Status, ToolCall
from tooltrace.policy.file import PolicyFileError, check_policy, load_policy

TOOLS = {"read_text", "write_text", "run_command"}

BAD = """version = 2
tols = ["x"]

[modes.review]
capabilities = ["read", "writ"]
tools = ["read_txt"]

[[rules]]
id = "no-curl"
tools = ["run_command"]
args = { argv = "curl[" }
modes = ["reviw"]
colour = "red"

[[rules]]
id = "no-curl"
decision = "block"
[rules.url_hosts]
deny = 3

[[limits]]
id = "denied_command"
per = "tenant"
max_calls = 0
"""


def _write(tmp_path: Path, text: str, name: str = "tooltrace.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_every_problem_of_a_bad_file_is_reported_with_its_place(tmp_path: Path) -> None:
    f = _write(tmp_path, BAD, "bad.toml")
    got = [(p.line, p.column, p.message.split(" (")[0].split(";")[0])
           for p in check_policy(f, tools=TOOLS)]
    assert got == [
        (1, 1, "version must be 1"),
        (2, 1, "unknown key 'tols' in the file"),
        (5, 25, "unknown capability 'writ'"),
        (6, 10, "unknown tool 'read_txt'"),
        (11, 17, "bad pattern in rules[0].args.argv: unterminated character set"),
        (12, 10, "unknown mode 'reviw'"),
        (13, 1, "unknown key 'colour' in rules[0]"),
        (16, 6, "rule id 'no-curl' is used twice"),
        (17, 12, "rules[1].decision must be one of deny, ask, not 'block'"),
        (19, 1, "rules[1].url_hosts.deny must be a list of strings"),
        (22, 6, "rule id 'denied_command' is used twice"),
        (23, 7, "limits[0].per must be one of run, principal, not 'tenant'"),
        (24, 1, "limits[0].max_calls must be an integer >= 1"),
    ]


@pytest.mark.parametrize(("text", "line", "col", "start"), [
    ("a = [1,,]\n", 1, 8, "TOML syntax"),
    ("[rules]\nid = 1\n", 1, 1, "rules must be an array of tables"),
    ("[[rules]]\ndecision = 'deny'\n", 1, 1, "rules[0] needs an id"),
    ("[[limits]]\nid = 'x'\n", 1, 1, "limits[0] needs max_calls"),
    ("[approval]\nreason = 'x'\n", 1, 1, "approval needs tools"),
    ("[paths]\ndeny = '**/.env'\n", 2, 1, "paths.deny must be a list of strings"),
    ("[builtin.private_network]\ncapabilities = ['net']\n", 2, 17, "unknown capability 'net'"),
    ("[[rules]]\nid = 'a b'\n", 2, 6, "rules[0].id must be 1-64 characters"),
    ("[[rules]]\nid = 'x'\nmode = 'shadow'\n", 3, 8, "rules[0].mode must be one of"),
])
def test_each_kind_of_bad_file_is_refused_at_its_place(
    tmp_path: Path, text: str, line: int, col: int, start: str
) -> None:
    problems = check_policy(_write(tmp_path, text), tools=TOOLS)
    assert len(problems) == 1, problems
    assert (problems[0].line, problems[0].column) == (line, col)
    assert problems[0].message.startswith(start), problems[0].message


def test_policy_check_prints_file_line_column_and_exits_2(tmp_path: Path) -> None:
    f = _write(tmp_path, BAD, "bad.toml")
    res = CliRunner().invoke(main, ["policy", "check", str(f)])
    assert res.exit_code == 2
    assert f"{f}:5:25: unknown capability 'writ'" in res.output
    good = _write(tmp_path, "[paths]\ndeny = ['**/.env']\n", "good.toml")
    res = CliRunner().invoke(main, ["policy", "check", str(good), "--json"])
    assert res.exit_code == 0 and orjson.loads(res.output)["valid"] is True


def test_a_registry_never_starts_on_an_invalid_file(tmp_path: Path) -> None:
    f = _write(tmp_path, BAD)
    with pytest.raises(PolicyFileError) as info:
        create_registry(tmp_path, home=tmp_path / "h", policy_file=f, metrics=False)
    assert len(info.value.problems) == 13
    with pytest.raises(PolicyFileError):
        create_registry(tmp_path, home=tmp_path / "h", policy_file=tmp_path / "missing.toml")


POLICY = """
[modes.review]
capabilities = ["read"]
effects = ["none"]
tools = ["read_text"]

[paths]
deny = ["**/.env", "**/*.pem", "**/id_*"]
read_only = ["vendor"]

[builtin.denied_command]
extra_patterns = ["^git push --force"]

[[rules]]
id = "interns-no-commands"
tools = ["run_command"]
principal = { roles = ["intern"] }
reason = "interns may not run commands"

[[rules]]
id = "no-egress"
tools = ["run_command"]
args = { argv = "https?://" }
url_hosts = { allow = ["pypi.org", "*.github.com"] }
mode = "observe"

[approval]
tools = ["write_text"]
principal = { tenants = ["acme"] }

[[limits]]
id = "reads-per-run"
tools = ["read_text"]
max_calls = 3
"""


def _reg(tmp_path: Path, text: str, **kw: object):  # type: ignore[no-untyped-def]
    ws = tmp_path / "ws"
    (ws / "vendor").mkdir(parents=True, exist_ok=True)
    (ws / "a.txt").write_text("a")
    (ws / ".env").write_text("X=1")
    f = _write(tmp_path, text)
    return create_registry(ws, home=tmp_path / "h", policy_file=f, metrics=False,
                           logging=False, **kw)


def _decider(env) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    st = [s for s in env.steps if s.step == "policy"][-1]
    return st.decider, st.decision


def test_a_file_compiles_to_rules_that_decide_and_name_themselves(tmp_path: Path) -> None:
    reg = _reg(tmp_path, POLICY)
    try:
        call = reg.call
        assert _decider(call(ToolCall("read_text", {"path": ".env"}))) == (
            "policy:denied_path", "deny")
        env = call(ToolCall("write_text", {"path": "vendor/x.txt", "text": "x"}))
        assert _decider(env) == ("policy:read_only_path", "deny")
        env = call(ToolCall("run_command", {"argv": ["git", "push", "--force"]}))
        assert _decider(env) == ("policy:denied_command", "deny")
        intern = Principal(user="ann", roles=("intern",))
        env = call(ToolCall("run_command", {"argv": ["echo", "hi"]}, run_id="r-intern",
                            principal=intern))
        assert _decider(env) == ("policy:interns-no-commands", "deny")
        assert env.record.principal == intern
        acme = Principal(user="bob", tenant="acme")
        env = call(ToolCall("write_text", {"path": "b.txt", "text": "x"}, run_id="r-acme",
                            principal=acme))
        assert _decider(env) == ("policy:approval", "ask")
        env = call(ToolCall("write_text", {"path": "c.txt", "text": "x"}))
        assert env.ok and _decider(env)[1] == "allow"
        env = call(ToolCall("read_text", {"path": "a.txt"}, mode="review"))
        assert env.ok
        env = call(ToolCall("run_command", {"argv": ["echo"]}, mode="review"))
        assert _decider(env) == ("policy:mode", "deny")
        # Calls 2 and 3 of read_text in this run; the fourth is over the limit.
        assert call(ToolCall("read_text", {"path": "a.txt"})).ok
        assert call(ToolCall("read_text", {"path": "a.txt"})).ok
        env = call(ToolCall("read_text", {"path": "a.txt"}))
        assert _decider(env) == ("policy:reads-per-run", "deny")
    finally:
        reg.shutdown()


def test_observe_mode_lets_the_call_go_on_and_records_the_rule(tmp_path: Path) -> None:
    reg = _reg(tmp_path, POLICY)
    try:
        argv = ["python3", "-c", "print('https://evil.example/x')"]
        env = reg.call(ToolCall("run_command", {"argv": argv}))
        assert env.status is Status.OK
        assert _decider(env) == ("policy:no-egress", "observe_deny")
        cid = env.call_id
        env = reg.call(ToolCall("run_command", {"argv": ["echo", "https://pypi.org/simple"]}))
        assert env.ok and _decider(env)[1] == "allow"
    finally:
        reg.shutdown()
    res = CliRunner().invoke(main, ["autopsy", "--home", str(tmp_path / "h"), cid])
    assert res.exit_code == 0, res.output
    assert "policy:no-egress" in res.output and "observe_deny" in res.output
    store = AuditStore(tmp_path / "h")
    try:
        rows = store.sql("SELECT decider, decision FROM tool_call_steps"
                         " WHERE decision = 'observe_deny'").rows
    finally:
        store.close()
    assert rows == [("policy:no-egress", "observe_deny")]


def test_principals_are_recorded_in_their_own_columns_and_bound_once_per_run(
    tmp_path: Path,
) -> None:
    reg = _reg(tmp_path, "")
    try:
        p = Principal(user="ann", agent="coder", tenant="acme", roles=("dev", "oncall"))
        assert reg.call(ToolCall("read_text", {"path": "a.txt"}, run_id="r1", principal=p)).ok
        inherited = reg.call(ToolCall("read_text", {"path": "a.txt"}, run_id="r1"))
        assert inherited.ok and inherited.record.principal == p
        other = reg.call(ToolCall("read_text", {"path": "a.txt"}, run_id="r1",
                                  principal=Principal(user="mallory")))
        assert other.status is Status.REJECTED and "principal" in other.summary
        secret = Principal(user="AKIA" + "Z7QF3EXAMPLE4DMO")
        env = reg.call(ToolCall("read_text", {"path": "a.txt"}, run_id="r2", principal=secret))
        assert env.status is Status.REJECTED and "AKIA" not in orjson.dumps(env.to_dict()).decode()
    finally:
        reg.shutdown()
    store = AuditStore(tmp_path / "h")
    try:
        rows = store.sql("SELECT principal_user, principal_agent, principal_tenant,"
                         " principal_roles FROM tool_calls WHERE run_id = 'r1'"
                         " AND status = 'ok'").rows
    finally:
        store.close()
    assert [(u, a, t, orjson.loads(r)) for u, a, t, r in rows] == [
        ("ann", "coder", "acme", ["dev", "oncall"])] * 2


def test_the_environment_names_the_file_and_an_explicit_policy_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    f = _write(tmp_path, "[paths]\ndeny = ['**/*.txt']\n", "env.toml")
    monkeypatch.setenv("TOOLTRACE_POLICY", os.fspath(f))
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("a")
    reg = create_registry(ws, home=tmp_path / "h", metrics=False, logging=False)
    try:
        assert _decider(reg.call(ToolCall("read_text", {"path": "a.txt"}))) == (
            "policy:denied_path", "deny")
    finally:
        reg.shutdown()
    pf = load_policy(f, tools=TOOLS)
    assert pf.rule_ids == ("denied_command", "private_network", "denied_path")


def test_the_mcp_proxy_reads_the_policy_file_in_its_config(tmp_path: Path) -> None:
    import asyncio

    from test_mcp_proxy import call_id, proxy_session, toy_server, write_config

    marker = tmp_path / "marker.txt"
    (tmp_path / "policy.toml").write_text(
        '[[rules]]\nid = "no-markers"\ntools = ["write_marker"]\nreason = "no markers"\n'
        '[[rules]]\nid = "watch-echo"\ntools = ["echo"]\nmode = "observe"\n')
    config = write_config(tmp_path, f"""
[proxy]
home = "home"
[policy]
file = "policy.toml"
{toy_server("toy", env={"TOY_TOOLS": "write_marker,echo"})}
""")

    async def scenario() -> list:  # type: ignore[type-arg]
        async with proxy_session(config) as s:
            return [await s.call_tool("write_marker", {"path": str(marker), "text": "x"}),
                    await s.call_tool("echo", {"text": "hi"})]

    wrote, echoed = asyncio.run(scenario())
    assert wrote.is_error and not marker.exists()
    assert not echoed.is_error
    store = AuditStore(tmp_path / "home")
    try:
        got = [store.sql("SELECT decider, decision FROM tool_call_steps WHERE call_id = $c"
                         " AND step = 'policy'", {"c": call_id(r)}).rows[-1]
               for r in (wrote, echoed)]
    finally:
        store.close()
    assert got == [("policy:no-markers", "deny"), ("policy:watch-echo", "observe_deny")]


def test_call_takes_policy_and_refuses_an_invalid_file(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("a")
    bad = _write(tmp_path, "[[rules]]\nid = 'x'\ntools = ['nope']\n", "bad.toml")
    args = ["call", "read_text", '{"path": "a.txt"}', "--workspace", str(tmp_path),
            "--home", str(tmp_path / "h")]
    res = CliRunner().invoke(main, [*args, "--policy", str(bad)])
    assert res.exit_code == 2 and f"{bad}:3:10: unknown tool 'nope'" in res.output
    good = _write(tmp_path, "[paths]\ndeny = ['*.txt']\n", "good.toml")
    res = CliRunner().invoke(main, [*args, "--policy", str(good), "--json"])
    assert res.exit_code == 1
    steps = orjson.loads(res.output)["steps"]
    assert [(s["decider"], s["decision"]) for s in steps if s["step"] == "policy"] == [
        ("policy:denied_path", "deny")]


LIMITS = """
[[limits]]
id = "reads-per-principal"
per = "principal"
tools = ["read_text"]
max_calls = 2

[[limits]]
id = "one-write-at-a-time"
tools = ["write_text"]
max_concurrent = 1

[[limits]]
id = "commands-per-minute"
tools = ["run_command"]
per_minute = 2
"""


def test_limits_count_per_principal_per_minute_and_at_once(tmp_path: Path) -> None:
    reg = _reg(tmp_path, LIMITS)
    try:
        ann, bob = Principal(user="ann"), Principal(user="bob")
        for run in ("r1", "r2"):  # the same principal in two runs: one counter
            assert reg.call(ToolCall("read_text", {"path": "a.txt"}, run_id=run,
                                     principal=ann)).ok
        env = reg.call(ToolCall("read_text", {"path": "a.txt"}, run_id="r3", principal=ann))
        assert _decider(env) == ("policy:reads-per-principal", "deny")
        assert reg.call(ToolCall("read_text", {"path": "a.txt"}, run_id="r4",
                                 principal=bob)).ok
        # Calls at once: each write's slot is freed when its record is emitted.
        for i in range(3):
            assert reg.call(ToolCall("write_text", {"path": f"w{i}.txt", "text": "x"})).ok
        for _ in range(2):
            assert reg.call(ToolCall("run_command", {"argv": ["true"]})).ok
        env = reg.call(ToolCall("run_command", {"argv": ["true"]}))
        assert _decider(env) == ("policy:commands-per-minute", "deny")
    finally:
        reg.shutdown()


def test_a_call_decided_twice_counts_once(tmp_path: Path) -> None:
    from tooltrace.policy import PolicyRequest
    from tooltrace.policy.file import LimitRule

    pf = load_policy(_write(tmp_path, LIMITS), tools=TOOLS)
    limit = next(x for x in pf.compiled.limits if x.name == "reads-per-principal")
    assert isinstance(limit, LimitRule)
    reg = _reg(tmp_path, "")
    try:
        d = reg.definition("read_text")
        assert d is not None
        p = Principal(user="ann")
        for _ in range(5):  # a hook's re-authorization, an adapter's look ahead: one call
            assert limit(PolicyRequest(d, {}, "default", "r", "c1", principal=p)) is None
        assert limit(PolicyRequest(d, {}, "default", "r", "c2", principal=p)) is None
        over = limit(PolicyRequest(d, {}, "default", "r", "c3", principal=p))
        assert over is not None and over.rule == "reads-per-principal"
    finally:
        reg.shutdown()
