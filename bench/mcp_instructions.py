"""What one ``tools/call`` costs each MCP contender in CPU instructions (``--mcp-instructions``).

On a shared VM the time a call takes drifts between runs by more than most changes to the proxy
are worth; the instructions a process executes per call do not. Each contender of the ``mcp``
section that is a process of its own (the line relay, the SDK passthrough, the proxy, and the
proxy from a ``--baseline`` tree where the timing table has it) is started
under ``valgrind --tool=callgrind`` twice and driven over stdio by a raw JSON-RPC client with
``few`` and then ``many`` calls of the toy server's ``echo``: ``(total(many) - total(few)) /
(many - few)`` is what one call costs, start-up excluded. Every thread of the contender counts
(the proxy's sink workers too), and the main thread, where the calls are served and which sets
their latency, is also given alone; the toy server, a child process, does not count. Every answer is
checked: a contender whose upstream did not start (callgrind runs code about 50 times slower) is
an error, not a fast contender. The proxy gets a configuration file that gives its upstream ten
minutes to start.
"""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench._common import Table, scratch
from bench.mcp_proxy import TOY, commands, pythonpath

__all__ = ["run"]

_SUMMARY = re.compile(rb"^summary: (\d+)$", re.MULTILINE)
#: How long one contender run may take under callgrind (start-up included).
_RUN_TIMEOUT_S = 900.0


class InstructionsError(RuntimeError):
    """A contender could not be measured (it exited, hung, or answered with an error)."""


def _config(home: str) -> str:
    path = Path(home) / "servers.toml"
    path.write_text(f"[servers.toy]\ncommand = {json.dumps(sys.executable)}\n"
                    f"args = [{json.dumps(TOY)}]\nstartup_timeout_s = 600\n")
    return str(path)


def _commands(home: str, baseline: Path | None, config: str) -> dict[str, list[str]]:
    """The timing table's contenders that are a process of their own, the proxies given the
    toy server by ``config``."""
    out = commands(home, baseline, upstream=["--config", config])
    del out["direct"]  # the toy server alone, the child the other counts leave out
    return out


def _request(proc: subprocess.Popen[bytes], rid: int, method: str,
             params: dict[str, Any] | None = None) -> dict[str, Any]:
    assert proc.stdin is not None and proc.stdout is not None
    msg: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        msg["params"] = params
    proc.stdin.write(json.dumps(msg).encode() + b"\n")
    proc.stdin.flush()
    # stdout is unbuffered, so a line select() does not see cannot sit in a buffer.
    if not select.select([proc.stdout], [], [], _RUN_TIMEOUT_S)[0]:
        raise InstructionsError(f"no answer to {method} within {_RUN_TIMEOUT_S:g} s")
    line = proc.stdout.readline()
    if not line:
        raise InstructionsError(f"the contender exited before answering {method}")
    answer: dict[str, Any] = json.loads(line)
    result = answer.get("result")
    if not isinstance(result, dict) or result.get("isError"):
        raise InstructionsError(f"{method} was answered with {line[:200]!r}")
    return result


def _count(cmd: list[str], env: dict[str, str], cwd: str, calls: int) -> tuple[int, int]:
    """Instructions the contender executed, start to exit, serving ``calls`` calls: in all its
    threads, and in its main thread alone (where an event loop serves the calls)."""
    out = Path(scratch("callgrind-")) / "callgrind.out"
    valgrind = ["valgrind", "--tool=callgrind", "--separate-threads=yes",
                f"--callgrind-out-file={out}"]
    proc = subprocess.Popen([*valgrind, *cmd], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, env=env, cwd=cwd, bufsize=0)
    try:
        _request(proc, 0, "initialize", {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "bench", "version": "1"}})
        assert proc.stdin is not None
        proc.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        tools = {t.get("name") for t in _request(proc, 1, "tools/list").get("tools", [])}
        if "echo" not in tools:
            raise InstructionsError(f"no echo tool (listed: {sorted(tools)})")
        for i in range(calls):
            _request(proc, i + 2, "tools/call", {"name": "echo", "arguments": {"text": "hello"}})
        proc.stdin.close()
        proc.wait(_RUN_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # One file per thread: <out>-01 is the main thread, <out>-02 and on the others.
    threads: dict[str, int] = {}
    for f in out.parent.glob(out.name + "-*"):
        found = _SUMMARY.search(f.read_bytes())
        if found is not None:
            threads[f.name.rsplit("-", 1)[1]] = int(found.group(1))
    if "01" not in threads:
        raise InstructionsError("callgrind wrote no summary of the main thread")
    return sum(threads.values()), threads["01"]


def check(only: set[str] | None, baseline: Path | None) -> None:
    """Refuse, before anything is measured, what ``run`` could not do: no valgrind, or a
    contender in ``only`` that this run does not have."""
    if shutil.which("valgrind") is None:
        raise SystemExit("--mcp-instructions needs valgrind (Debian package valgrind)")
    names = list(_commands("", baseline, "-"))
    unknown = sorted((only or set()) - set(names))
    if unknown:
        raise SystemExit(f"--mcp-instructions: no contender {', '.join(unknown)} here "
                         f"(there are: {', '.join(names)})")


def run(few: int = 50, many: int = 550, baseline: Path | None = None,
        only: set[str] | None = None) -> dict[str, Any]:
    """Measure and print instructions per call (of the contenders named in ``only``, the
    relay always among them: every other count is also given over it); return them by
    contender."""
    check(only, baseline)
    if not 0 < few < many:
        raise SystemExit("--mcp-instructions needs 0 < few < many calls")
    home = scratch("mcp-instructions-")
    contenders = _commands(home, baseline, _config(home))
    base = {"TOOLTRACE_LOG_LEVEL": "error", "TOY_TOOLS": "echo", "PATH": os.environ.get("PATH", "")}
    per_call: dict[str, float] = {}
    main_thread: dict[str, float] = {}
    for name, cmd in contenders.items():
        if only is not None and name not in only and name != "relay":
            continue
        env = {**base, "PYTHONPATH": pythonpath(name, baseline)}
        try:
            (lo, lo_main), (hi, hi_main) = (_count(cmd, env, home, n) for n in (few, many))
        except InstructionsError as exc:
            raise SystemExit(f"--mcp-instructions: {name}: {exc}") from None
        per_call[name] = (hi - lo) / (many - few)
        main_thread[name] = (hi_main - lo_main) / (many - few)
    table = Table(f"MCP tools/call, CPU instructions per call (callgrind, {many} - {few} calls)",
                  ["path", "instructions per call", "in the main thread", "over relay"])
    relay = per_call["relay"]
    for name, n in per_call.items():
        table.add(name, round(n), round(main_thread[name]),
                  None if name == "relay" else round(n - relay))
    table.print()
    return {"few": few, "many": many, "per_call": per_call, "main_thread": main_thread}
