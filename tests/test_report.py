"""``tooltrace report``: a post-mortem page of a call or a run, checked in headless Chromium.

A real registry with every sink on makes calls that carry fake secrets (the gauntlet's
canaries, every kind in every encoding) in arguments, hook rewrites, results, artifacts and
exception messages, all in one run. Then the reports of a call and of the run are rendered and:
the page draws in Chromium (a screenshot that is not blank, the steps in its DOM), loads nothing
over the network (a recording proxy sees no request, while a control page's image does reach
it), holds no address but the trace link, and no canary in any form.
"""

from __future__ import annotations

import html
import json
import re
import socketserver
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from gauntlet._canaries import ENCODINGS, KINDS, Finder, make_canaries
from support.components import require_binary
from support.otlp import OtlpHttpReceiver

from tooltrace import (
    HookDecision,
    HookView,
    Redactor,
    Status,
    ToolCall,
    create_registry,
    hook,
    tool,
)
from tooltrace.cli import main as cli
from tooltrace.telemetry.tracing import TracingSink

TRACE_URL = "https://tempo.example.test/explore?trace={trace_id}&x=1"
CANARIES = make_canaries(len(KINDS), 20261203)


@pytest.fixture(scope="module")
def trail(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One run's calls, secrets in them, recorded under a home; the ids to report on."""
    tmp = tmp_path_factory.mktemp("report")
    ws, home = tmp / "ws", tmp / "home"
    ws.mkdir()

    @hook("add-note", tools={"echo"})
    def add_note(view: HookView) -> HookDecision | None:
        return HookDecision.modify(arguments={**view.arguments, "note": "checked " +
                                              str(view.arguments["text"])},
                                   reason=f"noted {view.arguments['text']}")

    @tool(capability="read")
    def echo(text: str, note: str = "") -> dict[str, Any]:
        """Return the text and the note."""
        return {"echo": text, "note": note}

    @tool(capability="read")
    def big(text: str) -> str:
        """A result long enough to be offloaded to an artifact."""
        return ("ordinary output line\n" * 1000) + text + "\n"

    @tool(capability="read")
    def explode(text: str) -> str:
        """Fail with the text in the message."""
        raise RuntimeError(f"upstream refused {text}")

    with OtlpHttpReceiver() as rx:
        tracing = TracingSink(endpoint=rx.endpoint, protocol="http/protobuf",
                              capture_content=True, interval_s=0.05)
        redactor = Redactor(extra_values=[c.secret for c in CANARIES if c.registered])
        reg = create_registry(ws, home=home, tracing=False, extra_sinks=(tracing,),
                              hooks=[add_note], logging=False, redactor=redactor)
        for t in (echo, big, explode):
            reg.register(t)
        ids: dict[str, str] = {}
        for i, c in enumerate(CANARIES):
            for enc in ENCODINGS.values():
                env = reg.call(ToolCall("echo", {"text": enc(c.text)}))
                assert env.status is Status.OK
                ids.setdefault("hooked", env.call_id)
            tool_name = ("big", "explode")[i % 2]
            env = reg.call(ToolCall(tool_name, {"text": c.text}))
            ids.setdefault(tool_name, env.call_id)
        reg.shutdown()
    assert ids["big"] and ids["explode"]
    return {"home": home, "ids": ids, "run": reg.run_id, "tmp": tmp}


def _report(trail: dict[str, Any], *args: str) -> tuple[str, Path]:
    out = trail["tmp"] / f"r{abs(hash(args))}.{'md' if 'md' in args else 'html'}"
    res = CliRunner().invoke(cli, ["report", "--home", str(trail["home"]), *args,
                                   "-o", str(out)], env={"TOOLTRACE_TRACE_URL": TRACE_URL})
    assert res.exit_code == 0, res.output
    return out.read_text(encoding="utf-8"), out


def test_no_canary_reaches_any_report(trail: dict[str, Any]) -> None:
    finder = Finder(CANARIES)
    ids = trail["ids"]
    for args in ([ids["hooked"]], [ids["big"]], [ids["explode"]], ["--run", trail["run"]],
                 ["--run", trail["run"], "--format", "md"], [ids["hooked"], "--format", "md"]):
        text, _ = _report(trail, *args)
        assert finder.find(text.encode()) == [], args
    # The search bites: the canaries are in the raw text the calls were given.
    assert finder.find(CANARIES[0].text.encode())


def _links(text: str) -> list[str]:
    return re.findall(r"(?i)(?:https?:)?//[^\s\"'<>)]+", text)


def test_the_page_holds_no_address_but_the_trace_link(trail: dict[str, Any]) -> None:
    text, _ = _report(trail, trail["ids"]["big"])
    # The only addresses are trace links, each inside an <a href>.
    hrefs = re.findall(r'<a href="([^"]+)">', text)
    assert hrefs and all(h.startswith("https://tempo.example.test/explore?trace=") for h in hrefs)
    assert len(_links(text)) == len(hrefs)
    assert re.search(r"trace=[0-9a-f]{32}&amp;x=1", hrefs[0])
    for banned in ("<script", "<link", "<img", "<iframe", "@import", "url(", "src="):
        assert banned not in text.lower(), banned
    assert "Content-Security-Policy" in text and "default-src 'none'" in html.unescape(text)
    # The artifact is listed with its sha256, the hook's change is shown.
    assert re.search(r"<td>[0-9a-f]{64}</td>", text)
    hooked, _ = _report(trail, trail["ids"]["hooked"])
    # The hook filled in the defaulted note: before empty, after the note (secret redacted).
    assert re.search(r"<td>pre</td><td>add-note</td><td>modify</td><td>noted \[REDACTED:\w+\]"
                     r"</td><td>note</td><td></td><td>checked \[REDACTED:\w+\]</td>", hooked)


def test_a_trace_url_template_that_is_not_http_gives_no_link(trail: dict[str, Any]) -> None:
    out = trail["tmp"] / "js.html"
    res = CliRunner().invoke(cli, ["report", "--home", str(trail["home"]), trail["ids"]["big"],
                                   "-o", str(out)],
                             env={"TOOLTRACE_TRACE_URL": "javascript:alert('{trace_id}')"})
    assert res.exit_code == 0, res.output
    text = out.read_text()
    assert "<a href" not in text and "javascript" not in text


def test_cli_errors(trail: dict[str, Any]) -> None:
    home = ["--home", str(trail["home"])]
    runner = CliRunner()
    assert runner.invoke(cli, ["report", *home]).exit_code == 2
    assert runner.invoke(cli, ["report", *home, "x", "--run", "y"]).exit_code == 2
    missing = runner.invoke(cli, ["report", *home, "01a2aaaa-0000-7000-8000-000000000000"])
    assert missing.exit_code == 1 and "no call" in missing.output
    assert runner.invoke(cli, ["report", *home, "--run", "nope"]).exit_code == 1
    md = runner.invoke(cli, ["report", *home, trail["ids"]["explode"], "--format", "md"])
    assert md.exit_code == 0 and md.output.startswith("# tooltrace post-mortem: call ")
    assert "| seq | step |" in md.output and "~~~text" in md.output


# -- headless Chromium ---------------------------------------------------------------------------

_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
          "--disable-background-networking", "--disable-component-update", "--disable-sync",
          "--disable-default-apps", "--no-pings"]


class _Proxy(socketserver.ThreadingTCPServer):
    """An HTTP proxy on 127.0.0.1 that records each request line and answers 502."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        self.seen: list[str] = []
        owner = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                line = self.rfile.readline(4096).decode("latin-1").strip()
                if line:
                    owner.seen.append(line)
                self.wfile.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")

        super().__init__(("127.0.0.1", 0), Handler)

    def page_requests(self) -> list[str]:
        """What was asked for, less the browser's own traffic: Chromium contacts its update
        and sign-in services (update.googleapis.com, accounts.google.com, clients2.google.com)
        whatever page it shows and whatever flags it is given."""
        browser = re.compile(r"^\S+ (?:https?://)?[\w.-]+\.(?:google|googleapis)\.com[:/]")
        return [line for line in self.seen if not browser.match(line)]


@pytest.fixture
def proxy() -> Iterator[_Proxy]:
    p = _Proxy()
    t = threading.Thread(target=p.serve_forever, daemon=True)
    t.start()
    yield p
    p.shutdown()
    p.server_close()


def _chromium(page: Path, tmp: Path, proxy: _Proxy, *action: str) -> subprocess.CompletedProcess[
        str]:
    exe = require_binary("chromium", "apt-get install -y --no-install-recommends chromium")
    profile = tmp / f"profile{len(list(tmp.glob('profile*')))}"
    profile.mkdir()
    # Every request, loopback included, goes to the recording proxy; names resolve nowhere.
    args = [exe, *_FLAGS, f"--user-data-dir={profile}", f"--proxy-server=127.0.0.1:"
            f"{proxy.server_address[1]}", "--proxy-bypass-list=<-loopback>",
            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1", "--window-size=1100,1400",
            *action, page.as_uri()]
    return subprocess.run(args, capture_output=True, text=True, timeout=120)


def test_the_page_renders_in_chromium_and_loads_nothing(
    trail: dict[str, Any], proxy: _Proxy, tmp_path: Path
) -> None:
    from PIL import Image

    _, page = _report(trail, "--run", trail["run"])
    shot = tmp_path / "shot.png"
    _chromium(page, tmp_path, proxy, f"--screenshot={shot}")
    with Image.open(shot) as im:
        colours = im.convert("RGB").getcolors(maxcolors=1 << 20) or []
    assert len(colours) > 20  # text, table rules and coloured bars, not a blank page
    non_white = sum(n for n, c in colours if c != (255, 255, 255))
    assert non_white > 0.01 * sum(n for n, _ in colours)

    dom = _chromium(page, tmp_path, proxy, "--dump-dom").stdout
    assert 'class="timeline"' in dom and "<rect" in dom
    for step in ("resolve", "validate", "policy", "pre_hook", "execute"):
        assert f'data-step="{step}"' in dom, step
    # Every call of the run is on its timeline; the first 100 have a section of their own.
    n_calls = len(CANARIES) * (len(ENCODINGS) + 1)
    assert dom.count('class="label"') - dom.count('data-step=') == n_calls
    assert dom.count('<section class="call"') == 100 and "listed only" in dom
    # It opens with the counts and what needs attention, before the timeline.
    assert dom.index("Calls by status") < dom.index("What needs attention") < dom.index(
        'class="timeline"')
    assert proxy.page_requests() == [], proxy.seen


def test_the_network_check_sees_a_page_that_does_load_something(
    proxy: _Proxy, tmp_path: Path
) -> None:
    control = tmp_path / "control.html"
    control.write_text('<!DOCTYPE html><html><body><img src="http://cdn.example.test/x.png">'
                       "</body></html>")
    _chromium(control, tmp_path, proxy, "--dump-dom")
    assert any("cdn.example.test/x.png" in line for line in proxy.page_requests()), proxy.seen


def test_the_timeline_is_drawn_to_scale(trail: dict[str, Any]) -> None:
    # Every bar of a real call's timeline: x and width are its step's offset and duration on
    # one linear axis (a zero-length step keeps a 2-pixel mark).
    text, _ = _report(trail, trail["ids"]["hooked"])
    svg = text[text.index('<svg class="timeline"'):text.index("</svg>")]
    bars = re.findall(r'<rect x="([\d.]+)" y="[\d.]+" width="([\d.]+)" height="12" fill="#\w+">'
                      r"<title>[^<]*?, \+([\d.e-]+) ms, ([\d.e-]+) ms</title>", svg)
    ticks = [float(t) for t in re.findall(r'<line x1="([\d.]+)"', svg)]
    assert len(bars) >= 8 and len(ticks) >= 3
    x0, px_per_tick = ticks[0], ticks[1] - ticks[0]
    last = re.findall(r'class="tick">([\d.]+) (m?s)</text>', svg)[-1]
    span_ms = float(last[0]) * (1000 if last[1] == "s" else 1)
    scale = (ticks[-1] - x0) / span_ms
    assert px_per_tick > 0
    for x, width, offset, elapsed in bars:
        assert float(x) == pytest.approx(x0 + float(offset) * scale, abs=0.11)
        assert float(width) == pytest.approx(max(2.0, float(elapsed) * scale), abs=0.11)


def test_late_steps_are_drawn_after_a_break_with_their_time() -> None:
    from tooltrace.report import StepRow
    from tooltrace.report._svg import call_timeline

    steps = [StepRow(0, "resolve", 0.0, 1.0, "registry", "accept", ""),
             StepRow(1, "execute", 1.0, 9.0, "tool", "returned", ""),
             StepRow(1000, "resolved", 60_000.0, 0.0, "user", "ok", "", late=True)]
    svg = call_timeline(steps)
    assert svg.count("<rect") == 3 and svg.count('data-late="resolved"') == 1
    assert ">+60.00 s</text>" in svg and 'data-step="resolved"' in svg
    # The axis still ends at the last step while the call ran (10 ms), not at the late one.
    ticks = re.findall(r'class="tick">([^<]+)</text>', svg)
    assert [t for t in ticks if t != "//"][-1] == "10 ms"


def test_a_call_resolved_later_shows_what_it_returned_and_its_outcome(tmp_path: Path) -> None:
    # The demo's deploy that outlives its deadline returns unknown and is resolved ok later.
    home = tmp_path / "home"
    runner = CliRunner()
    assert runner.invoke(cli, ["demo", "--home", str(home)]).exit_code == 0
    found = runner.invoke(cli, ["calls", "--home", str(home), "--status", "unknown", "--json"])
    call_id = json.loads(found.output)[0]["call_id"]
    page = runner.invoke(cli, ["report", "--home", str(home), call_id])
    md = runner.invoke(cli, ["report", "--home", str(home), call_id, "--format", "md"])
    assert page.exit_code == md.exit_code == 0
    assert ": returned unknown, outcome ok</h2>" in page.output
    assert "<dt>outcome</dt><dd>ok (resolved later, at " in page.output
    # The late step is in the table (in italics) and on the timeline after the break.
    assert re.search(r'<tr class="late"><td class="num">1000</td><td>resolved</td>', page.output)
    svg = page.output[page.output.index('<svg class="timeline"'):]
    assert 'data-late="resolved"' in svg[:svg.index("</svg>")]
    # The legend names the colours drawn, and rejected and failed do not share one.
    assert '<div class="legend">' in page.output
    from tooltrace.report._svg import COLOURS

    assert len({COLOURS[k] for k in ("rejected", "failed", "unknown", "cancelled", "ok")}) == 5
    assert ": returned unknown, outcome ok" in md.output and "| resolved (late) |" in md.output


_MEASURE = ("<script>addEventListener('load',()=>{document.body.setAttribute('data-overflow',"
            "String(document.documentElement.scrollWidth-innerWidth));"
            "document.body.setAttribute('data-width',String(innerWidth));"
            # ids and times on one line: an inline element that wraps has several line boxes
            "const ids=[...document.querySelectorAll('td.nowrap a, h2 code, h3 code')];"
            "document.body.setAttribute('data-ids',String(ids.length));"
            "document.body.setAttribute('data-wrapped',"
            "String(ids.filter(e=>e.getClientRects().length>1).length))})</script>")


@pytest.mark.parametrize("width", [1280, 800])
@pytest.mark.parametrize("which", ["run", "call", "unknown"])
def test_no_page_overflows_horizontally_in_chromium(
    trail: dict[str, Any], proxy: _Proxy, tmp_path: Path, width: int, which: str
) -> None:
    if which == "unknown":  # the demo's deploy: returned unknown, resolved ok later
        home = tmp_path / "home"
        runner = CliRunner()
        assert runner.invoke(cli, ["demo", "--home", str(home)]).exit_code == 0
        found = runner.invoke(cli, ["calls", "--home", str(home), "--status", "unknown",
                                    "--json"])
        text = runner.invoke(cli, ["report", "--home", str(home),
                                   json.loads(found.output)[0]["call_id"]]).output
    else:
        args = ("--run", trail["run"]) if which == "run" else (trail["ids"]["hooked"],)
        text, _ = _report(trail, *args)
    # A copy that measures itself: the page's own policy forbids scripts, so it goes.
    probe = tmp_path / "probe.html"
    probe.write_text(re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", text)
                     .replace("</body>", _MEASURE + "</body>"), encoding="utf-8")
    dom = _chromium(probe, tmp_path, proxy, f"--window-size={width},900", "--dump-dom").stdout
    measured = re.search(r'data-overflow="(-?\d+)"', dom)
    shown = re.search(r'data-width="(\d+)"', dom)
    assert measured and shown, dom[-500:]
    assert abs(int(shown[1]) - width) <= 40  # the window is as wide as asked
    assert int(measured[1]) <= 0, f"{which} at {width} px overflows by {measured[1]} px"
    ids, wrapped = re.search(r'data-ids="(\d+)"', dom), re.search(r'data-wrapped="(\d+)"', dom)
    assert ids and wrapped and int(ids[1]) >= 1
    assert wrapped[1] == "0", f"{wrapped[1]} ids or times wrapped onto several lines"
