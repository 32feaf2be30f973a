"""What-if counts limits as the engine does: a policy replayed against the trail it produced
changes nothing, with calls that ask and calls a rule cannot decide on redacted arguments
counted against its limits (and the result saying the count is approximate)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from tooltrace import ApprovalDecision, ApprovalRequest, create_registry
from tooltrace.audit import AuditStore
from tooltrace.cli import main
from tooltrace.model import ToolCall

FAKE_KEY = "AKIA" + "Q7XF2EXAMPLE9LMT"  # a fake credential: recorded redacted

RULES = """
[approval]
tools = ["write_text"]

[[rules]]
id = "no-curl"
tools = ["run_command"]
args = { argv = "curl" }

[[rules]]
id = "no-echo-watch"
tools = ["run_command"]
args = { argv = "^echo nothing" }
mode = "observe"

[[limits]]
id = "writes"
tools = ["write_text"]
max_calls = 4

[[limits]]
id = "commands"
tools = ["run_command"]
max_calls = 5
"""
PER_MINUTE = """
[[limits]]
id = "reads"
tools = ["read_text"]
per_minute = 3
"""


def _approver(req: ApprovalRequest) -> ApprovalDecision:
    ok = str(req.arguments.get("path", "")).startswith("reports/")
    return ApprovalDecision(ok, who="ops", reason="reports only")


def _record(tmp_path: Path, text: str) -> tuple[Path, Path]:
    ws = tmp_path / "ws"
    (ws / "reports").mkdir(parents=True)
    (ws / "a.txt").write_text("a\n")
    f = tmp_path / "policy.toml"
    f.write_text(text)
    home = tmp_path / "home"
    reg = create_registry(ws, home=home, policy_file=f, metrics=False, logging=False,
                          approver=_approver)
    try:
        for i in range(7):  # asks, approved or not: each counts against "writes"
            where = "reports" if i % 2 else "elsewhere"
            reg.call(ToolCall("write_text", {"path": f"{where}/{i}.txt", "text": "x"}))
        for argv in (["echo", f"key={FAKE_KEY}"], ["curl", "example.org"], ["echo", "hi"],
                     ["curl", f"-H key={FAKE_KEY}"],
                     ["echo", f"again {FAKE_KEY}"], ["echo", "nothing"], ["echo", "3"],
                     ["echo", "4"], ["echo", "5"]):
            reg.call(ToolCall("run_command", {"argv": argv}))
        for _ in range(5):
            reg.call(ToolCall("read_text", {"path": "a.txt"}))
    finally:
        reg.shutdown()
    return f, home


def _deciders(home: Path) -> dict[str, int]:
    with AuditStore(home) as store:
        rows = store.sql("SELECT decider, count(*) FROM tool_call_steps WHERE step = 'policy'"
                         " AND decision = 'deny' GROUP BY 1").rows
    return dict(rows)


@pytest.mark.parametrize("extra", ["", PER_MINUTE], ids=["max-calls", "per-minute"])
def test_a_policy_replayed_against_the_trail_it_produced_changes_nothing(
    tmp_path: Path, extra: str
) -> None:
    f, home = _record(tmp_path, RULES + extra)
    denied = _deciders(home)
    # The live run: the limit on writes was reached by asks, the one on commands by calls
    # the argument rule cannot be replayed on (their key is stored redacted).
    assert denied["policy:writes"] == 3 and denied["policy:commands"] == 2
    assert denied["policy:no-curl"] == 2
    assert denied.get("policy:reads", 0) == (2 if extra else 0)
    res = CliRunner().invoke(main, ["policy", "test", str(f), "--home", str(home), "--json"])
    d = orjson.loads(res.stdout)
    assert (res.exit_code, d["changed"], d["changes"]) == (0, 0, [])
    # Three calls the argument rule cannot be replayed on; the one it denied in the live run
    # did not count against the limit then, and is not counted now.
    assert d["undecidable"] == 3 and d["approximate"] == 2
    res = CliRunner().invoke(main, ["policy", "test", str(f), "--home", str(home)])
    assert res.exit_code == 0
    assert "0 would change, 3 undecidable" in res.output
    assert "approximate: limits counted 2 undecidable calls as the recorded run decided them" \
        in res.output


def test_policy_test_exit_codes_tell_changes_from_could_not_test(tmp_path: Path) -> None:
    f, home = _record(tmp_path, RULES)
    looser = tmp_path / "looser.toml"
    looser.write_text(RULES.replace("max_calls = 4", "max_calls = 40"))
    res = CliRunner().invoke(main, ["policy", "test", str(looser), "--home", str(home)])
    assert res.exit_code == 1 and "3 would change" in res.output
    res = CliRunner().invoke(main, ["policy", "test", str(f), "--home", str(tmp_path / "none")])
    assert res.exit_code == 2 and "no audit trail" in res.output
    bad = tmp_path / "bad.toml"
    bad.write_text("[[rules]]\nid = 'x'\ndecision = 'block'\n")
    assert CliRunner().invoke(main, ["policy", "test", str(bad), "--home", str(home)]
                              ).exit_code == 2
    res = CliRunner().invoke(main, ["policy", "test", str(looser), "--home", str(home),
                                    "--wide"], env={"COLUMNS": "60"})
    assert res.exit_code == 1 and "left out" not in res.output
