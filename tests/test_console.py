"""The console as a person uses it, in real headless Chromium (Playwright with the system's
Chromium) against ``tooltrace serve`` in its own process: an agent process blocks on an
approval, the browser sees the request appear live and approves it, and the call completes with
the approver in its autopsy; a request expires and is denied; a request is answered through a
signed webhook callback sent by a local receiver; the live view shows a new call within a
second; every page at 1,280 and 800 px without horizontal overflow; no planted secret on any
page; the token, CSRF and read-only guards."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright import sync_api as pw
from support.components import require_binary

from tooltrace.audit import explain, open_store
from tooltrace.policy import KEY_HEADER, SIGNATURE_HEADER, ApprovalQueue, answerer, sign_callback
from tooltrace.policy._queue import EXPIRED_WHO

AGENT = Path(__file__).parent / "support" / "approval_agent.py"
from support.approval_agent import CANARY  # noqa: E402

CALLBACK_KEY = b"callback-key-of-the-ops-bot-0123456789"
PAGES = ("calls", "runs", "approvals", "stats")


class Console:
    """``tooltrace serve`` in a subprocess: its base URL and token."""

    def __init__(self, home: Path, tmp: Path, *extra: str) -> None:
        keyfile = tmp / "ops.key"
        keyfile.write_bytes(CALLBACK_KEY)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "from tooltrace.cli import main; main()", "serve",
             "--home", str(home), "--port", "0", "--callback-key", f"ops={keyfile}", *extra],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("open: "):
                self.url = line[6:].strip()
                break
        else:
            raise AssertionError(self.proc.stderr.read() if self.proc.stderr else "no URL")
        self.base, self.token = self.url.split("/?token=")

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.base, timeout=30,
                            headers={"Authorization": f"Bearer {self.token}"})

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def console(home: Path, tmp_path: Path) -> Iterator[Console]:
    c = Console(home, tmp_path)
    yield c
    c.stop()


@pytest.fixture
def browser() -> Iterator[Any]:
    exe = require_binary("chromium", "apt-get install -y --no-install-recommends chromium")
    with pw.sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, args=["--no-sandbox", "--disable-gpu"])
        yield b
        b.close()


def _agent(home: Path, tmp: Path, timeout: float, *to: str,
           env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    ws = tmp / "ws"
    ws.mkdir(exist_ok=True)
    return subprocess.Popen([sys.executable, str(AGENT), str(home), str(ws), str(timeout), *to],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})


def _done(proc: subprocess.Popen[str]) -> list[dict[str, Any]]:
    out, err = proc.communicate(timeout=90)
    assert proc.returncode == 0, err
    return [json.loads(x) for x in out.splitlines()]


def test_a_person_approves_a_waiting_call_in_the_browser(
        console: Console, home: Path, tmp_path: Path, browser: Any) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(console.url)
    assert page.url == f"{console.base}/calls"  # the token became a cookie, and left the URL
    page.goto(f"{console.base}/approvals")
    page.wait_for_selector("#none-pending")
    agent = _agent(home, tmp_path, 90, "ops@example.com")
    card = page.wait_for_selector("#pending [data-approval-id]", timeout=30_000)
    assert card is not None
    assert "send" in card.inner_text() and "dana" in card.inner_text()
    assert CANARY not in page.content()
    page.fill("#pending input[name=reason]", "checked the recipient")
    page.click("#pending button.approve")
    page.wait_for_selector("#answered td:has-text('approved')")
    who = answerer("console")
    assert who in page.inner_text("#answered")
    (line,) = _done(agent)
    assert line["status"] == "ok"
    with open_store(home) as store:
        a = explain(store.call(line["call_id"]))
    assert ("approval", f"user:{who}", "approve") in [
        (s["step"], s["decider"], s["decision"]) for s in a.steps]
    page.goto(f"{console.base}/calls/{line['call_id']}")
    assert who in page.inner_text("main")
    page.click(f"a[href='/id/{line['call_id']}']")  # the report's ids link to their pages
    assert page.url.endswith(f"/calls/{line['call_id']}")


def test_an_unanswered_request_expires_and_shows_as_denied(
        console: Console, home: Path, tmp_path: Path, browser: Any) -> None:
    page = browser.new_page()
    page.goto(console.url)
    (line,) = _done(_agent(home, tmp_path, 1.0, "late@example.com"))
    assert line["status"] == "rejected" and EXPIRED_WHO in line["summary"]
    page.goto(f"{console.base}/approvals")
    assert EXPIRED_WHO in page.inner_text("#answered")
    assert "denied" in page.inner_text("#answered")


class _Bot(http.server.BaseHTTPRequestHandler):
    """A chat bot's receiver: on an announced request, answers through the console's callback."""

    console_base = ""
    answered: list[int] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.send_response(204)
        self.end_headers()
        aid = body["approval"]["approval_id"]
        payload, sig = sign_callback(CALLBACK_KEY, aid, approve=True, who="bob",
                                     reason="ok from chat")
        headers = {SIGNATURE_HEADER: sig, KEY_HEADER: "ops", "Content-Type": "application/json"}
        r = httpx.post(f"{self.console_base}/api/callback", content=payload, headers=headers)
        again = httpx.post(f"{self.console_base}/api/callback", content=payload, headers=headers)
        forged = httpx.post(f"{self.console_base}/api/callback", content=payload.replace(
            b"approve", b"deny"), headers=headers)
        type(self).answered.extend([r.status_code, again.status_code, forged.status_code])

    def log_message(self, *args: Any) -> None:
        pass


def test_a_request_answered_through_a_signed_webhook_callback(
        console: Console, home: Path, tmp_path: Path) -> None:
    _Bot.console_base, _Bot.answered = console.base, []
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Bot)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        (line,) = _done(_agent(home, tmp_path, 90, "chat@example.com", env={
            "TT_WEBHOOK_URL": f"http://127.0.0.1:{srv.server_address[1]}/",
            "TT_WEBHOOK_SECRET": "outgoing-secret", "TT_CONSOLE_URL": console.base}))
    finally:
        srv.shutdown()
    assert line["status"] == "ok"
    assert _Bot.answered == [200, 409, 401]  # answered; a replay refused; a forgery refused
    with open_store(home) as store:
        a = explain(store.call(line["call_id"]))
    assert ("approval", "user:bob@webhook.ops", "approve") in [
        (s["step"], s["decider"], s["decision"]) for s in a.steps]


def test_the_live_view_shows_a_new_call_within_a_second(
        console: Console, home: Path, tmp_path: Path, browser: Any) -> None:
    page = browser.new_page()
    page.goto(console.url)
    page.wait_for_function("document.getElementById('count') !== null")
    page.evaluate("""() => { window.seen = {};
        new MutationObserver(ms => { for (const m of ms) for (const n of m.addedNodes)
          if (n.id) window.seen[n.id] = Date.now(); })
        .observe(document.querySelector('#live tbody'), {childList: true}); }""")
    agent = _agent(home, tmp_path, 90, "live@example.com")
    (p,) = _wait(lambda: ApprovalQueue(home).pending())
    ApprovalQueue(home).answer(p.approval_id, approved=True, who="t@api")
    (line,) = _done(agent)
    row = page.wait_for_selector(f"#c-{line['call_id']}", timeout=10_000)
    assert row is not None and "send" in row.inner_text() and "dana" in row.inner_text()
    shown_ms = page.evaluate(f"window.seen['c-{line['call_id']}']")
    with open_store(home) as store:
        (ended_us,) = store.sql("SELECT epoch_us(started_at) + CAST(elapsed_ms * 1000 AS BIGINT)"
                                " FROM tool_calls WHERE call_id = $c",
                                {"c": line["call_id"]}).rows[0]
    assert shown_ms - ended_us / 1000 < 1000, "the live view took a second or more"


def _wait(fn: Any) -> Any:
    for _ in range(600):
        got = fn()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError("timed out")


def test_every_page_fits_1280_and_800_px_and_shows_no_secret(
        console: Console, home: Path, tmp_path: Path, browser: Any) -> None:
    agent = _agent(home, tmp_path, 0.5, "a@example.com", "b@example.com")
    _done(agent)
    waiting = _agent(home, tmp_path, 90, "c@example.com")
    _wait(lambda: ApprovalQueue(home).pending())
    with console.client() as c:
        call_id = c.get("/calls").text.split('href="/calls/')[1][:36]
        run_id = c.get("/runs").text.split('href="/runs/')[1][:36]
    paths = [*PAGES, f"calls/{call_id}", f"runs/{run_id}", "approvals/pending"]
    for width in (1280, 800):
        page = browser.new_page(viewport={"width": width, "height": 900})
        page.goto(console.url)
        for path in paths:
            page.goto(f"{console.base}/{path}")
            html = page.content()
            assert CANARY not in html and console.token not in html, path
            over = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
            assert over <= 0, f"/{path} overflows {width} px by {over} px"
            shot = tmp_path / f"{path.replace('/', '-')}-{width}.png"
            page.screenshot(path=str(shot), full_page=True)
            assert shot.stat().st_size > 2000
        page.close()
    ApprovalQueue(home).answer(ApprovalQueue(home).pending()[0].approval_id, approved=False,
                               who="t@api")
    _done(waiting)


def test_the_token_csrf_and_read_only_guards(home: Path, tmp_path: Path) -> None:
    c = Console(home, tmp_path)
    try:
        assert httpx.get(f"{c.base}/calls").status_code == 401
        assert httpx.get(f"{c.base}/calls?token=wrong").status_code == 401
        agent = _agent(home, tmp_path, 90, "x@example.com")
        (p,) = _wait(lambda: ApprovalQueue(home).pending())
        with c.client() as cl:
            r = cl.post(f"/approvals/{p.approval_id}", data={"decision": "approve"})
            assert r.status_code == 403  # no CSRF token
            page = cl.get("/approvals").text
            csrf = page.split('name=csrf value="')[1].split('"')[0]
            r = cl.post(f"/approvals/{p.approval_id}", data={"decision": "approve", "csrf": csrf},
                        headers={"Origin": "http://evil.example"})
            assert r.status_code == 403  # another site's form
            assert ApprovalQueue(home).pending() != []
    finally:
        c.stop()
    ro = Console(home, tmp_path, "--read-only")
    try:
        with ro.client() as cl:
            page = cl.get("/approvals").text
            assert "read-only" in page and "name=csrf" not in page
            assert cl.post(f"/approvals/{p.approval_id}", data={"decision": "approve"}
                           ).status_code == 403
    finally:
        ro.stop()
    ApprovalQueue(home).answer(p.approval_id, approved=False, who="t@api")
    assert _done(agent)[0]["status"] == "rejected"


def test_demo_serve_lets_a_newcomer_answer_the_demos_approvals_in_the_browser(
        tmp_path: Path, browser: Any) -> None:
    home = tmp_path / "home"
    proc = subprocess.Popen(
        [sys.executable, "-c", "from tooltrace.cli import main; main()", "demo", "--serve",
         "--serve-port", "0", "--home", str(home), "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None and proc.stdout is not None
        url = ""
        for line in proc.stderr:
            if "the console is at " in line:
                url = line.split("the console is at ")[1].strip()
                break
        assert url, "the demo printed no console URL"
        page = browser.new_page()
        page.goto(url)
        base = url.split("/?token=")[0]
        page.goto(f"{base}/approvals")
        for decision in ("approve", "deny"):  # reports/summary.txt, then notes/todo.txt
            page.wait_for_selector(f"#pending [data-approval-id] button.{decision}",
                                   timeout=60_000)
            page.fill("#pending input[name=reason]", f"{decision} from the browser")
            page.click(f"#pending button.{decision}")
            page.wait_for_selector(f"#answered td:has-text('{decision} from the browser')")
        for line in proc.stderr:
            if "keeps serving" in line:
                break
        summary = json.loads(proc.stdout.read(1) + _read_json(proc))
        story = {s["what"]: s["status"] for s in summary["story"]}
        assert story["approved-write"] == "ok" and story["denied-write"] == "rejected"
        assert proc.poll() is None, proc.stderr.read()
        page.goto(f"{base}/calls")
        assert page.locator("#live tbody tr").count() >= len(summary["story"])
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _read_json(proc: subprocess.Popen[str]) -> str:
    """The rest of the demo's JSON summary (it stays running, so read up to the closing brace)."""
    assert proc.stdout is not None
    out = []
    for line in proc.stdout:
        out.append(line)
        if line.rstrip() == "}":
            break
    return "".join(out)


def test_a_waiting_call_outlives_a_restart_of_the_console(home: Path, tmp_path: Path) -> None:
    agent = _agent(home, tmp_path, 90, "restart@example.com")
    first = Console(home, tmp_path)
    try:
        with first.client() as cl:
            _wait(lambda: "data-approval-id" in cl.get("/approvals").text)
    finally:
        first.stop()
    second = Console(home, tmp_path)
    try:
        with second.client() as cl:
            page = cl.get("/approvals").text
            aid = page.split('data-approval-id="')[1].split('"')[0]
            csrf = page.split('name=csrf value="')[1].split('"')[0]
            r = cl.post(f"/approvals/{aid}", data={"decision": "approve", "csrf": csrf,
                                                   "reason": "after a restart", "ttl": "5m"})
            assert r.status_code == 303
    finally:
        second.stop()
    (line,) = _done(agent)
    assert line["status"] == "ok"
    ((_, a),) = ApprovalQueue(home).answered()
    assert (a.who, a.via, a.ttl_s) == (answerer("console"), "console", 300.0)
