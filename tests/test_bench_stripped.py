"""The events section's contenders without a feature really run without it.

``bench._stripped`` recompiles today's call path with a feature's code taken out; the bench's
verdict ("nothing measurable") means something only if the stripped registry still runs a call
as before and no longer does what the feature does. Each check runs in a process of its own
(stripping replaces tooltrace's functions for the rest of the process)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent

PROBE = textwrap.dedent('''
    import json, sys, tempfile
    from bench._stripped import strip
    features = tuple(f for f in sys.argv[1].split(",") if f)
    sources = strip(features)
    from tooltrace import Capability, CallContext, Effect, ToolCall, ToolRegistry, tool

    home = tempfile.mkdtemp()
    reg = ToolRegistry(workspace=home, home=home)
    seen = []
    sub = reg.subscribe(seen.append)

    @tool(execution="inline")
    def noop(x: str) -> str:
        """Return x."""
        return x

    @tool(execution="thread")
    def parent(ctx: CallContext) -> str:
        """Call noop through the context."""
        return ctx.call("noop", {"x": "child"}).status

    @tool(capability=Capability.WRITE, effect=Effect.LOCAL, path_params=("path",),
          writes=("path",))
    def write(path: str) -> str:
        """Write a file."""
        with open(home + "/" + path, "w") as f:
            f.write("new")
        return "done"

    for t in (noop, parent, write):
        reg.register(t)
    with open(home + "/f.txt", "w") as f:
        f.write("old")
    plain = reg.call(ToolCall("noop", {"x": "a"}))
    nested = reg.call(ToolCall("parent", {}))
    wrote = reg.call(ToolCall("write", {"path": "f.txt"}))
    sub.flush(5.0)
    reg.shutdown(5.0)
    print(json.dumps({
        "plain": [plain.status, plain.data, [s.step for s in plain.record.steps]],
        "nested": [nested.status, nested.data],
        "snapshot_steps": [s.step for s in wrote.record.steps if s.step == "snapshot"],
        "wrote": wrote.status,
        "events": sorted({type(e).__name__ for e in seen}),
        "sources": sources,
    }))
''')


def _names(src: str) -> set[str]:
    """Every name, attribute and parameter a function's code uses (not its docstring)."""
    tree = ast.parse(textwrap.dedent(src))
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | {
        n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)} | {
        n.arg for n in ast.walk(tree) if isinstance(n, ast.arg)}


def _probe(features: str) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-c", PROBE, features], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr[-2000:]
    out: dict[str, Any] = json.loads(p.stdout.strip().splitlines()[-1])
    return out


@pytest.fixture(scope="module")
def control() -> dict[str, Any]:
    return _probe("")


def test_the_control_recompiles_everything_and_keeps_every_feature(
        control: dict[str, Any]) -> None:
    assert control["plain"][:2] == ["ok", "a"]
    assert control["nested"] == ["ok", "ok"]
    assert control["snapshot_steps"] == ["snapshot"]
    assert control["wrote"] == "ok"
    assert {"CallStarted", "CallStep", "CallFinished"} <= set(control["events"])
    assert "tooltrace.pipeline._stages:pipeline" in control["sources"]
    assert "tooltrace.runtime._context:CallContext.__init__" in control["sources"]


def test_each_feature_is_taken_out_and_a_plain_call_runs_as_before(
        control: dict[str, Any]) -> None:
    events = _probe("events")
    assert events["events"] == []  # a subscriber of every kind gets nothing
    # (ctx.call finds its registry through the context's hub, which goes with the events.)
    assert events["snapshot_steps"] == ["snapshot"]
    assert "_hub" not in set().union(*(_names(src) for src in events["sources"].values()))

    snaps = _probe("snapshots")
    assert snaps["snapshot_steps"] == [] and snaps["wrote"] == "ok"
    assert snaps["nested"] == ["ok", "ok"] and snaps["events"] == control["events"]
    joined = "".join(snaps["sources"].values())
    assert not any(w in joined for w in ("snapshot_before", "snapshot_after", ".snapshots"))

    nested = _probe("nested")
    assert nested["nested"][0] == "failed"  # ctx.call has no way to its pipeline any more
    assert nested["snapshot_steps"] == ["snapshot"]
    used = set().union(*(_names(src) for src in nested["sources"].values()))
    assert not used & {"parent", "depth", "parent_call_id", "parent_tool", "nested", "max_depth"}

    everything = _probe("events,snapshots,nested")
    for probe in (events, snaps, nested, everything):
        assert probe["plain"] == control["plain"]


def test_verdict_needs_a_band_clear_of_zero_and_of_the_noise() -> None:
    from bench.events_cost import verdict

    assert verdict((120.0, -30.0, 200.0), 50.0).startswith("not measurable (its band")
    assert verdict((40.0, 10.0, 60.0), 50.0).startswith("not measurable (within")
    assert verdict((-40.0, -60.0, -10.0), 50.0).startswith("not measurable (within")
    assert verdict((120.0, 80.0, 200.0), 50.0) == "measurable: +120 ns"
    assert verdict((-120.0, -200.0, -80.0), 50.0) == "measurable: -120 ns"
