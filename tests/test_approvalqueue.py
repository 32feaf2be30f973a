"""The approval queue: a call in one process waits for an answer given from another (the CLI),
the answer and the answerer land in the audit chain, expiry denies, the first answer wins, and
signed webhooks announce requests to a real local receiver."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tooltrace.audit import explain, list_approvals, open_store
from tooltrace.cli import main
from tooltrace.policy import (
    SIGNATURE_HEADER,
    AlreadyAnswered,
    ApprovalExpired,
    ApprovalNotFound,
    ApprovalQueue,
    SignatureError,
    answerer,
    sign,
    sign_callback,
    verify_signature,
)
from tooltrace.policy._queue import EXPIRED_WHO

AGENT = Path(__file__).parent / "support" / "approval_agent.py"
from support.approval_agent import CANARY  # noqa: E402


def _agent(home: Path, tmp: Path, timeout: float, *to: str,
           env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    ws = tmp / "ws"
    ws.mkdir(exist_ok=True)
    return subprocess.Popen(
        [sys.executable, str(AGENT), str(home), str(ws), str(timeout), *to],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, **(env or {})})


def _wait_pending(q: ApprovalQueue, n: int = 1, proc: subprocess.Popen[str] | None = None
                  ) -> list[Any]:
    for _ in range(600):
        got = q.pending()
        if len(got) >= n:
            return got
        if proc is not None and proc.poll() is not None:
            raise AssertionError(proc.stderr.read() if proc.stderr else "agent ended")
        time.sleep(0.05)
    raise AssertionError("no request appeared in the queue")


def _lines(proc: subprocess.Popen[str]) -> list[dict[str, Any]]:
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return [json.loads(x) for x in out.splitlines()]


def test_a_call_waits_for_an_answer_from_the_cli_and_the_chain_names_who(tmp_path: Path) -> None:
    home = tmp_path / "home"
    proc = _agent(home, tmp_path, 60, "ops@example.com")
    q = ApprovalQueue(home)
    (p,) = _wait_pending(q, proc=proc)
    assert p.tool == "send" and p.rule == "sends_need_approval"
    assert p.principal == {"user": "dana", "agent": "mailer"}
    assert CANARY not in json.dumps(p.arguments)  # the queue holds redacted arguments only
    for f in (home / "approvals" / "queue").iterdir():
        assert CANARY not in f.read_text()
        assert f.stat().st_mode & 0o077 == 0
    listed = CliRunner().invoke(main, ["approvals", "pending", "--home", str(home), "--json"])
    assert listed.exit_code == 0, listed.output
    assert [r["approval_id"] for r in json.loads(listed.output)] == [p.approval_id]
    res = CliRunner().invoke(main, ["approvals", "answer", p.approval_id, "--approve",
                                    "--reason", "looks right", "--ttl", "10m",
                                    "--home", str(home)])
    assert res.exit_code == 0, res.output
    who = answerer("cli")
    assert f"approved {p.approval_id} as {who}" in res.output
    (line,) = _lines(proc)
    assert line["status"] == "ok"
    with open_store(home) as store:
        a = explain(store.call(line["call_id"]))
        steps = [(s["step"], s["decider"], s["decision"]) for s in a.steps]
        assert ("approval", f"user:{who}", "approve") in steps, steps
        (rec,) = list_approvals(store).dicts()
        assert rec["approver"] == who and rec["reason"] == "looks right"
        assert rec["expires_at"] is not None
    again = CliRunner().invoke(main, ["approvals", "answer", p.approval_id, "--deny",
                                      "--home", str(home)])
    assert again.exit_code == 1 and "already answered" in again.output


def test_an_unanswered_request_expires_and_the_call_is_denied(tmp_path: Path) -> None:
    home = tmp_path / "home"
    proc = _agent(home, tmp_path, 0.5, "late@example.com")
    (line,) = _lines(proc)
    assert line["status"] == "rejected"
    assert EXPIRED_WHO in line["summary"]
    q = ApprovalQueue(home)
    assert q.pending() == []
    ((p, a),) = q.answered()
    assert (a.approved, a.who, a.via) == (False, EXPIRED_WHO, "expiry")
    with pytest.raises(AlreadyAnswered):
        q.answer(p.approval_id, approved=True, who="x@cli")
    with open_store(home) as store:
        (rec,) = list_approvals(store).dicts()
        assert (rec["decision"], rec["approver"]) == ("deny", EXPIRED_WHO)


def test_the_first_answer_wins_and_bad_ids_are_refused(tmp_path: Path) -> None:
    home = tmp_path / "home"
    proc = _agent(home, tmp_path, 60, "a@example.com")
    q = ApprovalQueue(home)
    (p,) = _wait_pending(q, proc=proc)
    results: list[str] = []

    def racer(approved: bool) -> None:
        try:
            ApprovalQueue(home).answer(p.approval_id, approved=approved, who="r@api")
            results.append("won" if approved else "won-deny")
        except AlreadyAnswered:
            results.append("lost")

    ts = [threading.Thread(target=racer, args=(i % 2 == 0,)) for i in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert results.count("lost") == 7
    (line,) = _lines(proc)
    assert line["status"] == ("ok" if "won" in results else "rejected")
    with pytest.raises(ApprovalNotFound):
        q.answer("../../etc/passwd", approved=True, who="x@cli")
    with pytest.raises(ApprovalNotFound):
        q.get("0190c0de-0000-7000-8000-000000000000")
    bad = CliRunner().invoke(main, ["approvals", "answer", "nope", "--home", str(home)])
    assert bad.exit_code == 2


def test_a_request_past_its_time_cannot_be_approved_even_when_its_waiter_is_gone(
        tmp_path: Path) -> None:
    home = tmp_path / "home"
    q = ApprovalQueue(home, timeout=0.05)
    from tooltrace.policy import ApprovalRequest

    p = q.submit(ApprovalRequest("c", "r", "send", {"to": "x"}, "rule", "why", "d" * 64))
    time.sleep(0.1)
    with pytest.raises(ApprovalExpired):
        q.answer(p.approval_id, approved=True, who="late@cli")
    ((_, a),) = q.answered()
    assert a.who == EXPIRED_WHO


class _Receiver(http.server.BaseHTTPRequestHandler):
    got: list[tuple[dict[str, str], bytes]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).got.append((dict(self.headers), body))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.mark.parametrize("style", ["json", "slack"])
def test_a_new_request_is_posted_signed_to_a_webhook(tmp_path: Path, style: str) -> None:
    _Receiver.got = []
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    secret = "s3cret-webhook-key"
    try:
        home = tmp_path / "home"
        proc = _agent(home, tmp_path, 60, "hook@example.com", env={
            "TT_WEBHOOK_URL": f"http://127.0.0.1:{srv.server_address[1]}/hook",
            "TT_WEBHOOK_SECRET": secret, "TT_WEBHOOK_STYLE": style,
            "TT_CONSOLE_URL": "http://127.0.0.1:9/"})
        q = ApprovalQueue(home)
        (p,) = _wait_pending(q, proc=proc)
        for _ in range(200):
            if _Receiver.got:
                break
            time.sleep(0.05)
        ((headers, body),) = _Receiver.got
        verify_signature(secret.encode(), body, headers[SIGNATURE_HEADER])
        with pytest.raises(SignatureError):
            verify_signature(b"other", body, headers[SIGNATURE_HEADER])
        with pytest.raises(SignatureError):
            verify_signature(secret.encode(), body + b" ", headers[SIGNATURE_HEADER])
        assert CANARY not in body.decode()
        payload = json.loads(body)
        if style == "slack":
            assert "send" in payload["text"] and p.approval_id in payload["text"]
            assert payload["blocks"][0]["type"] == "section"
        else:
            assert payload["approval"]["approval_id"] == p.approval_id
            assert payload["callback_url"] == "http://127.0.0.1:9/api/callback"
        q.answer(p.approval_id, approved=False, who="x@api", reason="no")
        assert _lines(proc)[0]["status"] == "rejected"
    finally:
        srv.shutdown()


def test_signatures_expire_and_bind_the_body() -> None:
    body, header = sign_callback(b"k", "id", approve=True, who="ana", timestamp=1_000)
    assert verify_signature(b"k", body, header, now=1_100) == 1_000
    with pytest.raises(SignatureError, match="too old"):
        verify_signature(b"k", body, header, now=1_000 + 301)
    with pytest.raises(SignatureError, match="malformed"):
        verify_signature(b"k", body, "v1=abc")
    assert sign(b"k", b"x", 5) != sign(b"k", b"y", 5)


def test_the_mcp_proxy_asks_the_queue_when_its_configuration_says_so(tmp_path: Path) -> None:
    import asyncio

    from test_mcp_proxy import proxy_session, text_of, toy_server, write_config

    home = tmp_path / "home"
    config = write_config(tmp_path, f"""
[proxy]
home = "home"
{toy_server("toy", env={"TOY_TOOLS": "echo"})}
[policy]
ask = ["echo"]
approval = "queue:60"
""")

    async def run() -> Any:
        async with proxy_session(config) as s:
            call = asyncio.ensure_future(s.call_tool("echo", {"text": "hello"}))
            q = ApprovalQueue(home)
            got = await asyncio.get_running_loop().run_in_executor(None, _wait_pending, q)
            assert got[0].tool == "echo"
            q.answer(got[0].approval_id, approved=True, who="ops@cli", reason="fine")
            return await call

    result = asyncio.run(run())
    assert not result.is_error, text_of(result)
    with open_store(home) as store:
        (rec,) = list_approvals(store).dicts()
    assert (rec["approver"], rec["decision"], rec["tool"]) == ("ops@cli", "approve", "echo")
    from tooltrace import ConfigurationError
    from tooltrace.mcp._config import resolve_approver

    with pytest.raises(ConfigurationError):
        resolve_approver("queue:soon", home)
