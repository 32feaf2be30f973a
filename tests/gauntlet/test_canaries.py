"""Secret canaries: fake credentials of 33 kinds, each raw, base64, percent-encoded and JSON-
escaped, placed in arguments, results (as values and as mapping keys), exception messages, hook
inputs and outputs, approvers' reasons (and approved arguments), command output (split across
two flushes) and file contents, through a registry with every sink on.
Then the raw bytes of every sink are searched: OTLP requests received on 127.0.0.1, the metrics
exposition, log lines, every audit file (segments, and Parquet after compaction, decoded), the
artifact files, what hooks and approvers were shown, and the CLI's output (calls, stats, query,
autopsy, approvals).

"Found" is defined in ``_canaries.py``: 24 or more consecutive characters of a canary's random
core, as is or in any encoding. Artifacts hold the *redacted* full text (the registry redacts
before it offloads), so they are searched like every other sink.
"""

from __future__ import annotations

import io
import json
import os
import random
import re
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from prometheus_client import CollectorRegistry, generate_latest
from support.otlp import OtlpHttpReceiver

from tooltrace import (
    ApprovalDecision,
    ApprovalRequest,
    DenyCommandPatterns,
    DenyPrivateNetwork,
    HookAction,
    HookDecision,
    HookView,
    Policy,
    Redactor,
    RequireApproval,
    Status,
    ToolCall,
    ToolResult,
    create_registry,
    hook,
    tool,
)
from tooltrace.audit import open_store
from tooltrace.cli import main as cli
from tooltrace.telemetry.audit import compact
from tooltrace.telemetry.tracing import TracingSink

from ._canaries import (
    ENCODINGS,
    KINDS,
    PASSWORD_STYLES,
    Canary,
    Finder,
    make_canaries,
    random_password,
)
from ._figures import LONG, record, size
from ._sinks import home_blobs, snapshot_folder_is_owner_only

N_CANARIES = size(312, 10_000)
SEED = int(os.environ.get("TOOLTRACE_CANARY_SEED", "20261202"))
PER_COMMAND = 26  # canaries printed by one run_command child (each in 4 encodings)
AUTOPSIES = size(40, 300)
N_PASSWORDS = size(3000, 50_000)

# The second placement of each (canary, encoding), besides arguments and result, rotates here.
EXTRA = (
    "exception",
    "file",
    "offload",
    "pre_warn",
    "pre_modify",
    "pre_raise",
    "post_modify",
    "post_annotate",
    "post_block",
    "tool_summary",
    "path",
    "denied_path",
    "approval",
)
# A secret that can stand as a file name (as is or encoded) is placed in one.
_PATH_SAFE = re.compile(r"[A-Za-z0-9._=+%~-]{8,200}")

# What each child prints: every canary of its batch, in every encoding, each in two flushes.
CHILD = r"""
import json, sys, time
for line in json.load(open(sys.argv[1])):
    cut = max(1, len(line) // 2)
    sys.stdout.write(line[:cut]); sys.stdout.flush(); time.sleep(0.0005)
    sys.stdout.write(line[cut:] + "\n"); sys.stdout.flush()
"""


class _Plan:
    """Which placed value each call carries; hooks look theirs up by the ``slot`` argument."""

    def __init__(self) -> None:
        self.values: dict[int, str] = {}
        self.seen_by_hooks: list[bytes] = []

    def put(self, value: str) -> int:
        slot = len(self.values)
        self.values[slot] = value
        return slot


def _build(tmp_path: Path, canaries: list[Canary], plan: _Plan, rx: OtlpHttpReceiver) -> Any:
    ws = tmp_path / "ws"
    ws.mkdir()
    home = tmp_path / "home"
    redactor = Redactor(extra_values=[c.secret for c in canaries if c.registered])
    metrics = CollectorRegistry()
    log = io.BytesIO()

    def seen(view: HookView) -> None:
        plan.seen_by_hooks.append(json.dumps([view.arguments, view.result], default=str).encode())

    @hook("pre_probe", tools={"hooked"})
    def pre_probe(view: HookView) -> HookDecision | None:
        seen(view)
        how = view.arguments.get("how")
        value = plan.values[int(view.arguments["slot"])]
        if how == "pre_warn":
            return HookDecision.warn(f"looked at {value}")
        if how == "pre_modify":
            return HookDecision.modify(
                arguments={**view.arguments, "note": value}, reason=f"set note to {value}"
            )
        if how == "pre_raise":
            raise RuntimeError(f"hook crashed on {value}")
        return None

    @hook("post_probe", phase="post", tools={"hooked"})
    def post_probe(view: HookView) -> HookDecision | None:
        seen(view)
        how = view.arguments.get("how")
        value = plan.values[int(view.arguments["slot"])]
        if how == "post_modify":
            return HookDecision.modify(result={"rewritten": value}, reason=f"now {value}")
        if how == "post_annotate":
            return HookDecision(HookAction.CONTINUE, f"noted {value}", annotations={"why": value})
        if how == "post_block":
            return HookDecision.block(f"withheld because of {value}")
        return None

    def approver(req: ApprovalRequest) -> ApprovalDecision:
        # An approver sees redacted arguments; its reason holds the secret, the trail must not.
        plan.seen_by_hooks.append(json.dumps([req.arguments, req.reason]).encode())
        value = plan.values[int(req.arguments["slot"])]
        return ApprovalDecision(True, who="gauntlet", reason=f"approved {value}", ttl=600)

    policy = Policy([DenyCommandPatterns(), DenyPrivateNetwork(),
                     RequireApproval(tools=frozenset({"guarded"}))])
    tracing = TracingSink(endpoint=rx.endpoint, protocol="http/protobuf", capture_content=True,
                          interval_s=0.05)
    reg = create_registry(
        ws, home=home, tracing=False, metrics_registry=metrics, log_stream=log,
        extra_sinks=(tracing,), redactor=redactor, hooks=[pre_probe, post_probe],
        cancel_grace_s=2.0, approver=approver, policy=policy,
    )

    @tool(capability="read")
    def echo(note: str, keyed: dict[str, str]) -> dict[str, Any]:
        """Return the note and a mapping keyed by it (arguments and results)."""
        return {"echo": note, "keyed": keyed}

    @tool(capability="read")
    def explode(note: str) -> str:
        """Raise with the note in the message."""
        raise RuntimeError(f"upstream refused: {note}")

    @tool(capability="read")
    def big(note: str) -> str:
        """A result long enough to be offloaded to an artifact."""
        return ("filler line of ordinary output\n" * 700) + note + "\n" + "tail\n" * 50

    @tool(capability="read")
    def summarised(note: str) -> ToolResult:
        """The note in the tool's own summary and detail."""
        return ToolResult({"ok": True}, summary=f"handled {note}", detail={"saw": note})

    @tool(capability="read")
    def hooked(slot: int, how: str, note: str = "") -> dict[str, Any]:
        """A tool whose hooks place the canaries."""
        return {"slot": slot, "note": note}

    @tool(capability="network", effect="external")
    def guarded(slot: int, note: str) -> dict[str, Any]:
        """A tool that needs approval: the approver's reason holds the canary."""
        return {"slot": slot, "note": note}

    for t in (echo, explode, big, summarised, hooked, guarded):
        reg.register(t)
    return reg, ws, home, metrics, log


def _drive(reg: Any, ws: Path, canaries: list[Canary], plan: _Plan) -> dict[str, int]:
    counts = {"calls": 0, "placements": 0, "approvals": 0}
    statuses: dict[str, int] = {}

    def call(name: str, args: dict[str, Any]) -> Any:
        env = reg.call(ToolCall(name, args))
        counts["calls"] += 1
        statuses[env.status.value] = statuses.get(env.status.value, 0) + 1
        return env

    i = 0
    for c in canaries:
        for fn in ENCODINGS.values():
            placed = fn(c.text)
            # Arguments and result, as a value and as a mapping key.
            env = call("echo", {"note": placed, "keyed": {placed: "value"}})
            assert env.status is Status.OK
            counts["placements"] += 4
            how = EXTRA[i % len(EXTRA)]
            i += 1
            if how == "exception":
                assert call("explode", {"note": placed}).status is Status.FAILED
            elif how == "file":
                name = f"c{i}.txt"
                (ws / name).write_text(placed + "\n")
                assert call("read_text", {"path": name}).status is Status.OK
            elif how == "offload":
                env = call("big", {"note": placed})
                assert env.status is Status.OK and env.artifact is not None
            elif how == "tool_summary":
                assert call("summarised", {"note": placed}).status is Status.OK
            elif how in ("path", "denied_path") and not _alone(reg, secret := fn(c.secret)):
                # A bare random string says nothing of being a secret (unless registered): a
                # path holds only secrets that name their kind (ghp_..., AKIA..., sk-...).
                name = f"f{i}.txt"
                (ws / name).write_text(placed + "\n")
                assert call("read_text", {"path": name}).status is Status.OK
            elif how == "path" and _PATH_SAFE.fullmatch(secret):
                # In a file name read and written: the policy step records the resolved path.
                (ws / f"r-{secret}.txt").write_text("ordinary text\n")
                # (A percent-escape of a separator is refused: then the refusal holds it.)
                for name, args in (("read_text", {"path": f"r-{secret}.txt"}),
                                   ("write_text", {"path": f"w-{secret}.txt", "text": "x"})):
                    assert call(name, args).status in (Status.OK, Status.REJECTED)
                counts["placements"] += 1
            elif how in ("path", "denied_path"):
                # In a refused path, at every offset the message's cut can fall on.
                pad = "d" * (i % 61)
                env = call("read_text", {"path": f"../{pad}/{secret}.txt"})
                assert env.status is Status.REJECTED
            elif how == "approval":
                # Asked once, then reused (decider approval:<id>): both steps name the approval.
                slot = plan.put(placed)
                for _ in range(2):
                    assert call("guarded", {"slot": slot, "note": placed}).status is Status.OK
                counts["approvals"] += 1
            else:
                slot = plan.put(placed)
                call("hooked", {"slot": slot, "how": how, "note": placed})
            counts["placements"] += 1
    # Command output: a child prints each canary of its batch, in every encoding, in two
    # flushes; the canaries reach it through a file, never through its arguments.
    for b in range(0, len(canaries), PER_COMMAND):
        batch = canaries[b : b + PER_COMMAND]
        lines = [fn(c.text) for c in batch for fn in ENCODINGS.values()]
        (ws / f"batch{b}.json").write_text(json.dumps(lines))
        env = call("run_command", {"argv": [sys.executable, "-c", CHILD, f"batch{b}.json"]})
        assert env.status is Status.OK, env.summary
        counts["placements"] += len(lines)
    counts.update({f"status_{k}": v for k, v in statuses.items()})
    return counts


def _alone(reg: Any, secret: str) -> bool:
    """Whether ``secret`` alone, with no context around it, is recognised as one."""
    return bool(reg.redactor.redact_text(secret) != secret)


def _cli_outputs(home: Path, call_ids: list[str]) -> list[tuple[str, bytes]]:
    runner = CliRunner()
    env = {"COLUMNS": "100000", "NO_COLOR": "1"}
    out: list[tuple[str, bytes]] = []

    def run(*args: str) -> None:
        res = runner.invoke(cli, [*args, "--home", str(home)], env=env, catch_exceptions=False)
        assert res.exit_code == 0, (args, res.output[-2000:])
        out.append((" ".join(args[:2]), res.output.encode()))

    run("calls", "--json", "--limit", "1000000")
    run("calls", "--limit", "1000000")
    run("stats", "--json")
    run("stats")
    run("query", "SELECT * FROM tool_calls", "--json")
    run("query", "SELECT * FROM tool_call_steps", "--json")
    run("query", "SELECT * FROM approvals", "--json")
    run("approvals", "--json", "--limit", "1000000")
    run("approvals", "--wide", "--limit", "1000000")
    for cid in call_ids:
        run("autopsy", cid, "--json")
    for cid in call_ids[:10]:
        run("autopsy", cid)
    return out


@pytest.mark.timeout(3600 if LONG else 300)
def test_no_canary_reaches_any_sink(tmp_path: Path) -> None:
    assert len(KINDS) >= 20
    canaries = make_canaries(N_CANARIES, SEED)
    finder = Finder(canaries)
    plan = _Plan()
    t0 = time.monotonic()
    with OtlpHttpReceiver(keep_bodies=True) as rx:
        reg, ws, home, metrics, log = _build(tmp_path, canaries, plan, rx)
        counts = _drive(reg, ws, canaries, plan)
        exposition = generate_latest(metrics)
        dropped = {s.name: getattr(s, "dropped", 0) for s in reg.sinks}
        reg.shutdown(timeout_s=30.0)
        spans = rx.span_count
        otlp = rx.bodies
    drive_s = time.monotonic() - t0
    # Nothing was lost on the way, so every sink really saw every call.
    assert all(v == 0 for v in dropped.values()), dropped
    assert spans == counts["calls"]

    result = compact(home)
    assert result.calls == counts["calls"]
    with open_store(home) as store:
        approvals = store.sql("SELECT count(*), sum(uses) FROM approvals").rows[0]
    assert approvals == (counts["approvals"], 2 * counts["approvals"]) and approvals[0] > 0
    with_ids = sorted({ln.split('"call_id":"')[1][:36] for ln in log.getvalue().decode()
                       .splitlines() if '"call_id":"' in ln})
    step = max(1, len(with_ids) // AUTOPSIES)
    cli_out = _cli_outputs(home, with_ids[::step][:AUTOPSIES])

    blobs: list[tuple[str, bytes]] = []
    blobs += [(f"otlp request {i}", b) for i, b in enumerate(otlp)]
    blobs.append(("metrics exposition", exposition))
    blobs.append(("log lines", log.getvalue()))
    blobs += list(home_blobs(home))
    assert (home / "snapshots").is_dir() and snapshot_folder_is_owner_only(home)
    blobs += [(f"hook view {i}", b) for i, b in enumerate(plan.seen_by_hooks)]
    blobs += [(f"cli {label}", b) for label, b in cli_out]
    kinds = {label.split("/")[0].split(" ")[0] for label, _ in blobs}
    assert {"otlp", "metrics", "log", "audit", "artifacts", "hook", "cli"} <= kinds, kinds
    assert any(label.endswith("(rows)") for label, _ in blobs)  # Parquet after compaction

    found: list[tuple[str, str, int]] = []
    scanned = 0
    for label, data in blobs:
        scanned += len(data)
        for c, off in finder.find(data):
            found.append((label, c.kind, off))
    record(
        "canaries",
        canaries=len(canaries),
        kinds=len(KINDS),
        encodings=len(ENCODINGS),
        placements=counts["placements"],
        calls=counts["calls"],
        spans=spans,
        sink_bytes_scanned=scanned,
        found=len(found),
        seconds=round(drive_s, 1),
    )
    assert not found, found[:20]
    # The search itself works: the workspace files hold the canaries as placed.
    placed = [hit for _, data in (("ws", p.read_bytes()) for p in ws.glob("*"))
              for hit in finder.find(data)]
    assert len({c.core for c, _ in placed}) == len(canaries)


def test_canaries_in_the_call_envelope_fields(tmp_path: Path) -> None:
    from tooltrace import ToolRegistry
    from tooltrace.testing import RecordingSink

    canaries = [c for c in make_canaries(52, SEED + 1) if " " not in c.text and "\n" not in c.text]
    finder = Finder(canaries)
    sink = RecordingSink()
    reg = ToolRegistry(workspace=tmp_path, home=tmp_path / "home", sinks=[sink])
    leaks: dict[str, int] = {}
    for c in canaries:
        for field, call in (
            ("tool name", ToolCall(c.text, {})),
            ("mode", ToolCall("read_text", {}, mode=c.text)),
            ("run_id", ToolCall("read_text", {}, run_id=c.text)),
            ("attributes", ToolCall("read_text", {}, attributes={"note": c.text})),
        ):
            env = reg.call(call)
            blob = json.dumps([env.to_dict(), repr(sink.records[-1])], default=str).encode()
            if finder.find(blob):
                leaks[field] = leaks.get(field, 0) + 1
    reg.shutdown()
    record("canaries in envelope fields", canaries=len(canaries), **leaks)
    assert not leaks, leaks


def test_generated_passwords_after_their_name_are_never_kept() -> None:
    """Generated passwords (letters and digits, 12 to 40) after ``password:``, ``password=``,
    ``password = ``, ``"password": "..."`` and inside a sentence are redacted whatever their
    letters happen to spell, in every encoding. About one in a hundred of them splits into
    capitalised pieces (``NBBZonZO40Vwm02MkmTO``) and once passed for a type name."""
    rng = random.Random(SEED + 2)
    canaries = [Canary("password", pw, pw, pw) for pw in
                (random_password(rng) for _ in range(N_PASSWORDS))]
    finder = Finder(canaries)
    red = Redactor()
    kept: list[tuple[str, str]] = []
    for c in canaries:
        for style in PASSWORD_STYLES:
            for encoding, fn in ENCODINGS.items():
                placed = fn(style.format(v=c.secret))
                out = red.redact_text(placed)
                if out == placed or finder.find(out.encode()):
                    kept.append((encoding, placed))
    record("generated passwords", passwords=len(canaries), styles=len(PASSWORD_STYLES),
           encodings=len(ENCODINGS), kept=len(kept))
    assert not kept, kept[:20]
    # The search itself finds each password as placed.
    assert all(finder.find(c.secret.encode()) for c in canaries[:100])
