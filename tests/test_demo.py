"""`tooltrace demo`: the scripted story produces every kind of call, and the trail shows it."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tooltrace.demo import FAKE_KEY, run_demo

EXPECTED = {
    "read": ("ok", None),
    "params": ("rejected", "params"),
    "path-escape": ("rejected", "policy"),
    "symlink-escape": ("rejected", "policy"),
    "denied-command": ("rejected", "policy"),
    "approved-write": ("ok", None),
    "denied-write": ("rejected", "approval"),
    "hook-block": ("rejected", "hook"),
    "hook-modify": ("ok", None),
    "command": ("ok", None),
    "deadline": ("failed", None),
    "offload": ("ok", None),
    "big-file": ("ok", None),
    "index": ("ok", None),
    "cancel": ("cancelled", None),
    "unknown": ("unknown", None),
    "secret-arg": ("ok", None),
}


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, object]]:
    cwd = tmp_path_factory.mktemp("demo")
    exe = Path(sys.executable).with_name("tooltrace")
    # Run as a user who did not activate the venv: its bin directory is not on PATH.
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep)
                           if p and Path(p).resolve() != exe.parent.resolve())
    env = {**os.environ, "NO_COLOR": "1", "PATH": path}
    env.pop("TOOLTRACE_HOME", None)
    out = subprocess.run([str(exe), "demo", "--json"], cwd=cwd, env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return cwd, json.loads(out.stdout)


def test_demo_makes_every_kind_of_call(tmp_path: Path) -> None:
    result = run_demo(home=tmp_path / "home")
    by_id = {e.call_id: e for e in result.envelopes}
    assert set(result.highlights) == set(EXPECTED)
    for label, (status, stage) in EXPECTED.items():
        env = by_id[result.highlights[label]]
        assert env.status.value == status, (label, env.summary)
        if stage is not None:
            assert env.reject_stage is not None and env.reject_stage.value == stage, label
    approved = by_id[result.highlights["approved-write"]]
    assert any(s.decider == "user:oncall-bot" and s.decision == "approve" for s in approved.steps)
    modified = by_id[result.highlights["hook-modify"]]
    assert modified.record.hook_modified
    offload = by_id[result.highlights["offload"]]
    assert offload.artifact is not None and len(offload.artifact.sha256) == 64
    deadline = by_id[result.highlights["deadline"]]
    assert deadline.record.error_type == "timeout" and deadline.record.execution_started
    for e in result.envelopes:
        assert FAKE_KEY not in repr(e.to_dict())
        assert str(tmp_path) not in e.summary
    # The demo says which sandbox its commands ran in: the one the execute steps recorded.
    recorded = {s.detail["sandbox"] for e in result.envelopes for s in e.steps
                if s.step == "execute" and e.tool == "run_command" and "sandbox" in s.detail}
    assert result.sandboxes == recorded and recorded
    assert not (tmp_path / "home" / "demo").exists()


def test_demo_command_prints_summary_and_autopsy_commands(
        demo_run: tuple[Path, dict[str, object]]) -> None:
    cwd, data = demo_run
    assert data["sandboxes"] and all(isinstance(s, str) for s in data["sandboxes"])
    assert data["calls"] == len(EXPECTED)
    assert isinstance(data["autopsy"], list) and len(data["autopsy"]) == 3
    by_status = data["by_status"]
    assert isinstance(by_status, dict)
    assert {"ok", "rejected", "failed", "cancelled", "unknown"} <= set(by_status)
    # The unknown call's final outcome: it returned unknown and was resolved later.
    story = {r["what"]: r for r in data["story"]}  # type: ignore[attr-defined]
    assert story["unknown"]["status"] == "unknown" and story["unknown"]["outcome"] == "ok"
    assert data["by_outcome"].get("unknown", 0) == 0  # type: ignore[attr-defined]
    # Every printed next step runs as printed, pasted into a shell whose PATH lacks the venv
    # (the command names the tooltrace executable by its full path then).
    bare = {**os.environ, "NO_COLOR": "1", "PATH": "/usr/bin:/bin"}
    assert isinstance(data["next"], list)
    for cmd in [*data["autopsy"], *data["next"]]:
        assert isinstance(cmd, str)
        assert cmd.startswith(str(Path(sys.executable).with_name("tooltrace"))), cmd
        out = subprocess.run(["/bin/sh", "-c", cmd], cwd=cwd, capture_output=True, text=True,
                             timeout=60, env=bare)
        assert out.returncode == 0, (cmd, out.stderr)
        assert FAKE_KEY not in out.stdout and str(cwd) not in out.stdout
        if " autopsy " in cmd:
            assert cmd.split()[-1] in out.stdout
            assert sys.prefix not in out.stdout
        if "--status unknown" in cmd:  # the table shows ids as prefixes unique in the trail
            assert story["unknown"]["call_id"][:13] in out.stdout


def test_demo_trail_is_queryable_and_verifies(demo_run: tuple[Path, dict[str, object]]) -> None:
    cwd, _ = demo_run
    exe = Path(sys.executable).with_name("tooltrace")
    env = {**os.environ, "NO_COLOR": "1"}
    calls = subprocess.run([str(exe), "calls", "--json", "--limit", "100"], cwd=cwd, env=env,
                           capture_output=True, text=True, timeout=60)
    assert calls.returncode == 0, calls.stderr
    rows = json.loads(calls.stdout)
    assert len(rows) == len(EXPECTED)
    assert FAKE_KEY not in calls.stdout
    verify = subprocess.run([str(exe), "verify"], cwd=cwd, env=env, capture_output=True,
                            text=True, timeout=60)
    assert verify.returncode == 0, verify.stdout + verify.stderr


TEAM_POLICY = """
[[rules]]
id = "writes-only-in-reports"
tools = ["write_text"]
only_paths = ["reports/**"]

[approval]
tools = ["write_text"]

[[rules]]
id = "no-python"
tools = ["run_command"]
args = { argv = "^python" }

[[limits]]
id = "commands-per-run"
tools = ["run_command"]
max_calls = 6

[[limits]]
id = "scans"
tools = ["scan_index"]
max_calls = 1
"""


def test_the_demo_runs_on_the_working_directorys_policy_and_replays_to_no_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from click.testing import CliRunner

    from tooltrace.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TOOLTRACE_POLICY", raising=False)
    # The file names the demo's own scan_index without declaring it in tools = [...].
    (tmp_path / "tooltrace.toml").write_text(TEAM_POLICY)
    home = tmp_path / "home"
    res = CliRunner().invoke(main, ["demo", "--home", str(home), "--calls", "30", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    # Every next command it prints runs as printed (--home after the command's name).
    for line in [*out["autopsy"], *out["next"]]:
        words = shlex.split(line.replace("<home>", str(home)))  # --json scrubs the home
        args = words[3:] if words[1:3] == ["-m", "tooltrace"] else words[1:]
        if args[0] == "verify":
            continue  # verifies the whole trail, slow; the same --home placement as the rest
        again = CliRunner().invoke(main, args)
        assert again.exit_code == 0, (line, again.output)
    story = {r["what"]: r for r in out["story"]}
    assert story["denied-write"]["status"] == "rejected"  # notes/ is outside reports/
    assert story["cancel"]["status"] == "rejected"  # the second scan: over its limit
    # The trail that policy produced, replayed against it: nothing changes.
    res = CliRunner().invoke(main, ["policy", "test", "tooltrace.toml", "--home", str(home),
                                    "--tools", "tooltrace.demo:DEMO_TOOLS", "--json"])
    assert res.stdout, res.output
    report = json.loads(res.stdout)
    assert (res.exit_code, report["changed"], report["unknown_tools"]) == (0, 0, {}), report
    assert report["approximate"] >= 1  # the echo of a fake key is stored redacted
    # A file that names none of them replays without --tools, and says how to replay them.
    (tmp_path / "writes.toml").write_text('[approval]\ntools = ["write_text"]\n')
    res = CliRunner().invoke(main, ["policy", "test", "writes.toml", "--home", str(home)])
    assert res.exit_code == 1, res.output  # looser than the file that made the trail
    assert "calls of scan_index (no definition: pass --tools MODULE:ATTR (the demo's: --tools" \
        " tooltrace.demo:DEMO_TOOLS))" in res.output
