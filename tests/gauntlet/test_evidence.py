"""Evidence: the agent plays against its own record with every built-in tool.

A default registry (``create_registry(workspace)``: the home in the user's state directory,
commands in the kernel sandbox) runs a first agent session that leaves a trail, snapshots,
artifacts and anchors; a second session then tries to read, copy, append to, truncate, delete,
replace and link to the home's keys, segments, snapshots, artifacts and anchors, by absolute
path, by ``..``, through symlinks it plants, and through shell scripts that build the path at
run time (so only the sandbox can stop them). Every attempt must be refused or fail inside the
sandbox, the keys must appear in no result and no sink, and ``verify --anchors`` must pass
with every call of both sessions present.

Then the same agent against protections the user weakened (the home placed inside the
workspace, ``sandbox = "off"`` in the policy file): tampering now succeeds, and ``verify
--anchors`` against anchors kept elsewhere (a copy, as ``audit ship-anchors`` keeps them under
Object Lock) catches every successful tampering, naming the writer.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner

import tooltrace
from tooltrace import Status, ToolCall, ToolRegistry, ToolResultEnvelope
from tooltrace.audit import list_segments, open_store, secret_values
from tooltrace.cli import main as cli
from tooltrace.testing import RecordingSink

from ._figures import record

SUPPORT = Path(__file__).resolve().parents[1] / "support"


@dataclass
class Session:
    """One agent session's registry and what its sinks saw."""

    reg: ToolRegistry
    sink: RecordingSink
    log: io.StringIO
    calls: list[str] = field(default_factory=list)

    def call(self, name: str, args: dict[str, Any]) -> ToolResultEnvelope:
        env = self.reg.call(ToolCall(name, args))
        self.calls.append(env.call_id)
        return env

    def close(self) -> None:
        self.reg.shutdown(timeout_s=20.0)


def _session(ws: Path, **options: Any) -> Session:
    sink, log = RecordingSink(), io.StringIO()
    reg = tooltrace.create_registry(ws, metrics=False, log_stream=log, extra_sinks=(sink,),
                                    **options)
    return Session(reg, sink, log)


def _workspace(root: Path) -> Path:
    ws = root / "ws"
    (ws / "notes").mkdir(parents=True)
    (ws / "notes" / "a.txt").write_text("alpha\n")
    return ws


def _first_run(s: Session) -> None:
    """Leave a trail, a snapshot (a write) and an artifact (a big output)."""
    assert s.call("read_text", {"path": "notes/a.txt"}).status is Status.OK
    assert s.call("write_text", {"path": "notes/a.txt", "text": "beta\n"}).status is Status.OK
    big = s.call("run_command", {"argv": [sys.executable, "-c", "print('x' * 40000)"]})
    assert big.status is Status.OK and big.artifact is not None, big.summary


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _hidden(path: Path) -> str:
    """A shell expression for ``path`` that names no path on the command line."""
    return f'"$(echo {_b64(str(path))} | base64 -d)"'


def _attacks(ws: Path, target: Path, i: int) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(label, tool, arguments) of every attempt on one target of the home."""
    rel = os.path.relpath(target, ws)
    is_dir = target.is_dir()
    for form, p in (("absolute", str(target)), ("dotdot", rel), ("link", f"notes/l{i}")):
        yield f"read {form}", "read_text", {"path": p if not is_dir else p + "/x.txt"}
        yield f"replace {form}", "write_text", {"path": p + ("/x.txt" if is_dir else ""),
                                               "text": "forged"}
        yield f"cat {form}", "run_command", {"argv": ["cat", p]}
        yield f"copy {form}", "run_command", {"argv": ["cp", "-r", p, f"notes/copy{i}"]}
        yield f"append {form}", "run_command", {"argv": ["sh", "-c", f"echo forged >> {p}"]}
        yield f"truncate {form}", "run_command", {"argv": ["truncate", "-s", "0", p]}
        yield f"delete {form}", "run_command", {"argv": ["rm", "-rf", p]}
        yield f"move {form}", "run_command", {"argv": ["mv", p, f"notes/moved{i}"]}
        yield f"hardlink {form}", "run_command", {"argv": ["ln", p, f"notes/hard{i}"]}
    h = _hidden(target)
    for label, script in (
        ("cat", f"cat {h}"),
        ("copy", f"cp -r {h} notes/hidden-copy{i}"),
        ("append", f"echo forged >> {h}"),
        ("truncate", f"truncate -s 0 {h}"),
        ("delete", f"rm -rf {h}"),
        ("move", f"mv {h} notes/hidden-moved{i}"),
        ("hardlink", f"ln {h} notes/hidden-hard{i}"),
    ):
        yield f"{label} in a shell", "run_command", {"argv": ["sh", "-c", script]}
    if is_dir:
        # Listing a directory reads it; a file's own metadata (stat) is no content, and
        # Landlock does not hide it (the threat model says so).
        yield "list in a shell", "run_command", {"argv": ["sh", "-c", f"ls -la {h}"]}


def _succeeded(env: ToolResultEnvelope) -> bool:
    """Whether an attempt got through: ran and, for a command, exited 0."""
    if env.status is not Status.OK:
        return False
    data = env.data if isinstance(env.data, dict) else {}
    return data.get("exit_code", 0) == 0


def _fingerprint(home: Path, skip: Callable[[Path], bool]) -> dict[str, str]:
    """sha256 of every file in the home that a session must leave as it was."""
    return {str(p.relative_to(home)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(home.rglob("*")) if p.is_file() and not skip(p)}


def _verify(home: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    res = CliRunner().invoke(cli, ["verify", "--home", str(home), "--json", *extra])
    assert res.exit_code in (0, 1), res.output
    return res.exit_code, orjson.loads(res.stdout)


def test_the_agent_cannot_reach_its_evidence(tmp_path: Path) -> None:
    ws = _workspace(tmp_path)
    first = _session(ws)
    home = Path(first.reg.home)
    assert not home.resolve().is_relative_to(ws.resolve())
    _first_run(first)
    first.close()
    secrets = secret_values(home)
    assert len(secrets) >= 3
    run1 = {s.path for s in list_segments(home / "audit")}
    targets = [home / "audit.key", home / "keys" / "signing.ed25519", home / "keys",
               sorted(run1)[0], home / "audit", home / "snapshots", home / "artifacts",
               home / "anchors" / "anchors.jsonl", home]
    assert all(t.exists() for t in targets), [t for t in targets if not t.exists()]
    # The second session appends to the trail, its digest and the anchors; nothing else of the
    # first session's may change.
    appended = [home / "anchors" / "anchors.jsonl", home / "audit" / "digest.jsonl"]
    prefixes = [p.read_bytes() for p in appended]
    keep = _fingerprint(home, lambda p: p in appended or p.name.endswith(".live.jsonl")
                        or p.parent.name == "lookup" or "live" in p.name)

    agent = _session(ws)
    got_through: list[str] = []
    attempts = 0
    for i, target in enumerate(targets):
        # The agent plants a link to the target without naming it on a command line.
        plant = agent.call("run_command", {"argv": ["sh", "-c",
                                                    f"ln -s {_hidden(target)} notes/l{i}"]})
        assert plant.status is Status.OK
        for label, tool, args in _attacks(ws, target, i):
            attempts += 1
            env = agent.call(tool, args)
            if _succeeded(env):
                got_through.append(f"{label} on {target.name}: {env.summary}")
    agent.close()

    assert got_through == [], got_through
    assert _fingerprint(home, lambda p: str(p.relative_to(home)) not in keep) == keep
    assert all(p.read_bytes().startswith(b) for p, b in zip(appended, prefixes, strict=True))
    # A failed `cp -r` of a directory may leave the empty directory it made; no file of the
    # home's reaches the workspace.
    made = [str(p) for p in (ws / "notes").rglob("*") if not p.is_dir()
            and p.name not in ("a.txt",) and not p.is_symlink()]
    assert made == [], made

    # No key in any result, record, log line, artifact or trail line.
    seen = [str(r) for s in (first, agent) for r in s.sink.records]
    seen += [first.log.getvalue(), agent.log.getvalue()]
    seen += [p.read_bytes().decode("utf-8", "replace")
             for d in ("audit", "artifacts", "snapshots") for p in (home / d).rglob("*")
             if p.is_file()]
    leaks = [v[:8] for v in secrets for text in seen if v in text]
    assert leaks == []

    code, report = _verify(home, "--anchors", str(home / "anchors" / "anchors.jsonl"))
    assert code == 0, report
    with open_store(home) as store:
        recorded = {r[0] for r in store.sql("SELECT call_id::VARCHAR FROM tool_calls").rows}
    assert set(first.calls + agent.calls) <= recorded
    record("evidence", attempts=attempts, refused_or_failed=attempts - len(got_through),
           calls_recorded=len(recorded))


# -- weakened: the home inside the workspace, the sandbox off ---------------------------------


@dataclass
class Weak:
    """A trail in a home inside the workspace, with its anchors and public key kept elsewhere."""

    ws: Path
    home: Path
    anchors: Path
    pubkey: Path
    writer: str
    policy: Path


def _weak(root: Path) -> Weak:
    ws = _workspace(root)
    home = ws / ".tooltrace"
    policy = root / "tooltrace.toml"
    policy.write_text('[commands]\nsandbox = "off"\n')
    first = _session(ws, home=home, policy_file=policy)
    _first_run(first)
    first.close()
    outside = root / "kept"
    outside.mkdir()
    shutil.copy(home / "anchors" / "anchors.jsonl", outside / "anchors.jsonl")
    shutil.copy(home / "keys" / "signing.ed25519.pub", outside / "signing.pub")
    writers = {s.writer for s in list_segments(home / "audit")}
    assert len(writers) == 1
    code, report = _verify(home, "--anchors", str(outside / "anchors.jsonl"),
                           "--pubkey", str(outside / "signing.pub"))
    assert code == 0, report
    return Weak(ws, home, outside / "anchors.jsonl", outside / "signing.pub", writers.pop(),
                policy)


def _forge_script(home: Path) -> str:
    """What a prompt-injected agent with the keys in reach runs: rewrite the first session's
    arguments, re-chain and re-seal with the home's own audit key and signing key."""
    return f"""
import sys
sys.path.insert(0, {str(SUPPORT.parent)!r})
from pathlib import Path
from support.forge import reforge
from tooltrace.audit import load_signer
from tooltrace.audit._format import load_key
home = Path({str(home)!r})
def edit(writer, seq, fields):
    if fields.get("k") == "c":
        fields["summary"] = "nothing happened here"
    return fields
reforge(home, load_key(home, create=False), load_signer(home, create=False), edit)
"""


def _segments_of(home: Path, writer: str) -> list[Path]:
    return sorted(s.path for s in list_segments(home / "audit") if s.writer == writer)


def _last(w: Weak) -> Path:
    return _segments_of(w.home, w.writer)[-1]


def _run1_text(w: Weak) -> str:
    return "".join(p.read_text() for p in _segments_of(w.home, w.writer))


#: Each tampering: the command the agent runs (naming no path on its command line), and how to
#: tell it got through. ``_weak`` passes the prepared trail to both; the check runs after.
TAMPERING: dict[str, tuple[Callable[[Weak], list[str]], Callable[[Weak, Any], bool]]] = {
    "delete the trail": (lambda w: ["sh", "-c", f"rm -rf {_hidden(w.home / 'audit')}"],
                         lambda w, _: _segments_of(w.home, w.writer) == []),
    "delete the home": (lambda w: ["sh", "-c", f"rm -rf {_hidden(w.home)}"],
                        lambda w, _: _segments_of(w.home, w.writer) == []),
    "delete a writer": (lambda w: ["sh", "-c", "rm -f " + " ".join(
        _hidden(p) for p in _segments_of(w.home, w.writer))],
        lambda w, _: _segments_of(w.home, w.writer) == []),
    "cut the tail": (lambda w: ["sh", "-c", f"truncate -s -400 {_hidden(_last(w))}"],
                     lambda w, size: _last(w).stat().st_size == size - 400),
    "append a forged record": (
        lambda w: ["sh", "-c", f"echo '{{\"k\":\"c\",\"seq\":9999}}' >> {_hidden(_last(w))}"],
        lambda w, _: _last(w).read_text().rstrip().endswith('"seq":9999}')),
    "rewrite and reseal with the keys": (
        lambda w: ["sh", "-c",
                   f"{sys.executable} -c \"$(echo {_b64(_forge_script(w.home))} | base64 -d)\""],
        lambda w, _: "nothing happened here" in _run1_text(w)),
}


@pytest.mark.parametrize("kind", list(TAMPERING))
def test_weakened_protections_let_tampering_through_and_the_anchors_catch_it(
    tmp_path: Path, kind: str,
) -> None:
    w = _weak(tmp_path)
    command, happened = TAMPERING[kind]
    size = _last(w).stat().st_size
    agent = _session(w.ws, home=w.home, policy_file=w.policy)
    env = agent.call("run_command", {"argv": command(w)})
    agent.close()
    assert _succeeded(env), (kind, env.summary, env.data)
    assert happened(w, size), f"{kind}: the tampering did not get through"

    code, report = _verify(w.home, "--anchors", str(w.anchors), "--pubkey", str(w.pubkey))
    assert code == 1, (kind, report)
    text = orjson.dumps(report).decode()
    if kind != "append a forged record":
        assert w.writer in text, (kind, report)
    record("evidence weakened", kind=kind, caught=code == 1)
